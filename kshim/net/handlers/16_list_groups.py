"""ListGroups: the groups coordinated by this broker (clients ask every broker).

- Groups that only have committed offsets are listed too (Empty, protocol type "").
- v4+ states filter (case-insensitive Kafka state names), v5+ types filter: "classic" groups, and
  "consumer" (KIP-848) groups with protocol type "consumer" and states Empty, Assigning,
  Reconciling, Stable.
- COORDINATOR_LOAD_IN_PROGRESS while an offsets partition is still loading.
- ACLs (docs/security.md): DESCRIBE on the cluster lists every group; without it, only the
  groups the principal may DESCRIBE.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 16
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    if coordinator.loading:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "groups": []}
    states = {s.lower() for s in (req.get("states_filter") or [])} if ctx.version >= 4 else set()
    types = {t.lower() for t in (req.get("types_filter") or [])} if ctx.version >= 5 else set()
    groups = []
    everything = authz.cluster_allowed(ctx, AclOperation.DESCRIBE)
    for g in coordinator.led_groups():
        if not everything and not authz.group_allowed(ctx, AclOperation.DESCRIBE, g.group_id):
            continue
        if states and g.state.lower() not in states:
            continue
        group_type = getattr(g, "group_type", "classic")
        if types and group_type not in types:
            continue
        groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                       "group_state": g.state, "group_type": group_type})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}
