"""SyncGroup (classic protocol): the leader hands in the assignment, every member gets its part.

- The answer is an awaitable: followers wait until the leader's SyncGroup arrives (or the
  rebalance is abandoned: REBALANCE_IN_PROGRESS, and they rejoin).
- In a Stable group a member gets its current assignment at once.
- Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the group is preparing a
  new rebalance), FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL (v5+ type/name mismatch),
  NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups.group import SyncResult, Waiter
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import instance_id
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 14
VERSIONS = (0, 5)


def _answer(result: SyncResult) -> dict:
    return {"throttle_time_ms": 0, "error_code": result.error_code, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment}


async def _wait(waiter: Waiter) -> dict:
    return _answer(await waiter.wait())


async def handle(ctx: RequestContext, req: Container) -> Response:
    v = ctx.version
    coordinator = ctx.groups
    code = coordinator.check(req.group_id) if req.group_id else ErrorCode.INVALID_GROUP_ID
    if req.group_id and not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    group = coordinator.get_group(req.group_id) if not code else None
    if code or group is None:
        return _answer(SyncResult(code or ErrorCode.UNKNOWN_MEMBER_ID))
    waiter = group.sync(coordinator.clock(), member_id=req.member_id, instance_id=instance_id(req, v, 3),
                        generation=req.generation_id,
                        protocol_type=req.get("protocol_type") if v >= 5 else None,
                        protocol_name=req.get("protocol_name") if v >= 5 else None,
                        assignments=[(a.member_id, bytes(a.assignment)) for a in req.assignments])
    if waiter.done:
        return _answer(waiter.value)
    return _wait(waiter)
