"""Heartbeat (classic protocol): keeps a member's session alive.

- NONE in a Stable or CompletingRebalance group; REBALANCE_IN_PROGRESS while the group prepares a
  rebalance (the member rejoins); ILLEGAL_GENERATION for another generation; UNKNOWN_MEMBER_ID
  for a member the group does not have (removed after its session timeout, or an unknown group);
  FENCED_INSTANCE_ID for an old member id of a static instance; NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import instance_id
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    group_id = req.group_id
    if not group_id:
        code = ErrorCode.INVALID_GROUP_ID
    elif not authz.group_allowed(ctx, AclOperation.READ, group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        code = coordinator.check(group_id)
    if not code:
        group = coordinator.get_group(group_id)
        code = ErrorCode.UNKNOWN_MEMBER_ID if group is None else group.heartbeat(
            coordinator.clock(), member_id=req.member_id, instance_id=instance_id(req, ctx.version, 3),
            generation=req.generation_id)
    return {"throttle_time_ms": 0, "error_code": code}
