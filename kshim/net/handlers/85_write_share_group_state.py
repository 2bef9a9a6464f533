"""WriteShareGroupState (inter-broker, KIP-932): a partition leader writes a share partition's
in-flight window (start offset and state batches); answered once the record is COMMITTED in
`__share_group_state`. An older state epoch than the stored one is FENCED_STATE_EPOCH, an older
leader epoch FENCED_LEADER_EPOCH; a key not coordinated here NOT_COORDINATOR (loading:
COORDINATOR_LOAD_IN_PROGRESS). v1's delivery_complete_count is not kept (kshim derives the lag
from the batches). CLUSTER_ACTION is required."""
from __future__ import annotations

from construct import Container

from kshim.coordinator.share_partitions.state import StateBatch
from kshim.coordinator.share_partitions.coordinator import StateKey
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_state_common import per_partition

API_KEY = 85
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: Container) -> Response:
    async def serve(key: StateKey, p: Container) -> dict:
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in p.state_batches]
        return {"error_code": await ctx.node.share_coordinator.write(key, p.state_epoch, p.leader_epoch,
                                                                     p.start_offset, batches)}
    return await per_partition(ctx, req, serve)
