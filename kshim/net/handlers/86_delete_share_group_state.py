"""DeleteShareGroupState (inter-broker, KIP-932): forget a share partition's state (a tombstone in
`__share_group_state`): what DeleteShareGroupOffsets and DeleteGroups write through the share
coordinator. A key not coordinated here is NOT_COORDINATOR (loading: COORDINATOR_LOAD_IN_PROGRESS).
CLUSTER_ACTION is required."""
from __future__ import annotations

from construct import Container

from kshim.coordinator.share_partitions.coordinator import StateKey
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_state_common import per_partition

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    async def serve(key: StateKey, p: Container) -> dict:
        return {"error_code": await ctx.node.share_coordinator.delete(key)}
    return await per_partition(ctx, req, serve)
