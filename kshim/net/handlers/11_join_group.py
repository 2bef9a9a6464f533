"""JoinGroup (classic protocol): a member joins and waits until the rebalance completes.

- The answer is an awaitable: the connection goes on reading while the member waits for the
  others (or for the rebalance timeout, after which members that did not rejoin are removed).
- v4+: a member without a member id gets MEMBER_ID_REQUIRED with its new id and joins again with
  it (static members skip that step).
- Static membership (v5+ group.instance.id): a known instance joining without a member id takes
  its old member's place: with unchanged protocols in a Stable group it gets the current
  generation and its assignment back without a rebalance; the old member id gets
  FENCED_INSTANCE_ID from then on.
- The coordinator picks the protocol all members support and a leader; only the leader receives
  the members' metadata. Errors: INVALID_GROUP_ID (empty id), INVALID_SESSION_TIMEOUT (outside
  6 s..30 min), INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups.group import JoinResult, Waiter
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import client_host, instance_id
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 11
VERSIONS = (0, 9)


def _fit(version: int, result: JoinResult) -> dict:
    return {"throttle_time_ms": 0, "error_code": result.error_code, "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            "protocol_name": "" if version < 7 and result.protocol_name is None else result.protocol_name,
            "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                        for m in result.members]}


async def _wait(version: int, waiter: Waiter) -> dict:
    return _fit(version, await waiter.wait())


async def handle(ctx: RequestContext, req: Container) -> Response:
    v = ctx.version
    coordinator = ctx.groups
    if not req.group_id:
        return _fit(v, JoinResult(ErrorCode.INVALID_GROUP_ID, req.member_id))
    if not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        return _fit(v, JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, req.member_id))
    code = coordinator.check(req.group_id)
    if code:
        return _fit(v, JoinResult(code, req.member_id))
    group = coordinator.get_group(req.group_id, create=True)
    assert group is not None  # create=True always gives one
    waiter = group.join(
        coordinator.clock(), member_id=req.member_id, instance_id=instance_id(req, v, 5),
        client_id=ctx.header.client_id or "", client_host=client_host(ctx),
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.get("rebalance_timeout_ms", -1) if v >= 1 else -1,
        protocol_type=req.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member=v >= 4, version=v)
    if waiter.done:
        return _fit(v, waiter.value)
    return _wait(v, waiter)
