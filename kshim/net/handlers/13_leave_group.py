"""LeaveGroup (classic protocol): members leave; the others rebalance (an emptied group is Empty).

- v0-2: one member id; v3+: a batch of members, each by member id or (static) group instance id,
  each with its own error: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
- Group-level errors: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    code = coordinator.check(req.group_id) if req.group_id else ErrorCode.INVALID_GROUP_ID
    if req.group_id and not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if code:
        return {"throttle_time_ms": 0, "error_code": code, "members": []}
    group = coordinator.get_group(req.group_id)
    now = coordinator.clock()

    def leave(member_id: str, instance: str | None) -> ErrorCode:
        return ErrorCode.UNKNOWN_MEMBER_ID if group is None else group.leave(now, member_id, instance)

    if ctx.version < 3:
        return {"throttle_time_ms": 0, "error_code": leave(req.member_id, None)}
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "error_code": leave(m.member_id, m.group_instance_id)} for m in req.members]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "members": members}
