"""InitializeShareGroupState (inter-broker, KIP-932): a share partition's state starts over at a
start offset under a new state epoch (kshim/coordinator/share_partitions/coordinator.py): what
AlterShareGroupOffsets writes through the share coordinator. An older state epoch than the stored
one is FENCED_STATE_EPOCH; a key whose `__share_group_state` partition is not led here
NOT_COORDINATOR (loading: COORDINATOR_LOAD_IN_PROGRESS). CLUSTER_ACTION is required."""
from __future__ import annotations

from construct import Container

from kshim.coordinator.share_partitions.coordinator import StateKey
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_state_common import per_partition

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    async def serve(key: StateKey, p: Container) -> dict:
        return {"error_code": await ctx.node.share_coordinator.initialize(key, p.state_epoch, p.start_offset)}
    return await per_partition(ctx, req, serve)
