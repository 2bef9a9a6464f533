"""DeleteGroups: deletes Empty groups and their committed offsets (tombstones in
`__consumer_offsets`, answered once COMMITTED).

- A group with members: NON_EMPTY_GROUP; an unknown group: GROUP_ID_NOT_FOUND; an empty id:
  INVALID_GROUP_ID; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as for the other group APIs.
- ACLs (docs/security.md): DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 42
VERSIONS = (0, 2)


async def _delete(coordinator: GroupCoordinator, names: list[str], denied: set[str]) -> dict:
    results = []
    for name in names:
        if name in denied:
            results.append({"group_id": name, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        code = await coordinator.delete_group(name) if name else ErrorCode.INVALID_GROUP_ID
        results.append({"group_id": name, "error_code": code})
    return {"throttle_time_ms": 0, "results": results}


async def handle(ctx: RequestContext, req: Container) -> Response:
    names = list(req.groups_names)
    denied = {n for n in names if n and not authz.group_allowed(ctx, AclOperation.DELETE, n)}
    return _delete(ctx.groups, names, denied)
