"""ReadShareGroupState (inter-broker, KIP-932): what a partition leader loads a share partition
from: the stored state epoch, start offset and state batches (start offset -1 when nothing is
stored). A leader epoch older than the last writer's is FENCED_LEADER_EPOCH; a key not
coordinated here NOT_COORDINATOR (loading: COORDINATOR_LOAD_IN_PROGRESS). CLUSTER_ACTION is
required."""
from __future__ import annotations

from construct import Container

from kshim.coordinator.share_partitions.coordinator import StateKey
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_state_common import per_partition

API_KEY = 84
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    async def serve(key: StateKey, p: Container) -> dict:
        code, state = ctx.node.share_coordinator.read(key, p.leader_epoch)
        if state is None:
            return {"error_code": code, "state_epoch": 0, "start_offset": -1, "state_batches": []}
        return {"error_code": code, "state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                   "delivery_state": b.state, "delivery_count": b.delivery_count}
                                  for b in state.batches]}
    return await per_partition(ctx, req, serve)
