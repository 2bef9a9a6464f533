"""OffsetDelete: deletes committed offsets of a group (tombstones, answered once COMMITTED).

- Allowed for partitions of topics the group's members do not subscribe to (consumer protocol
  subscriptions are read); subscribed topics get GROUP_SUBSCRIBED_TO_TOPIC per partition. A
  non-Empty group of another protocol type: NON_EMPTY_GROUP. Unknown group: GROUP_ID_NOT_FOUND.
- ACLs (docs/security.md): DELETE on the group, else GROUP_AUTHORIZATION_FAILED; READ on each
  topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 47
VERSIONS = (0, 0)


def _answer(code: ErrorCode, req: Container, codes: dict) -> dict:
    return {"error_code": code, "throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes.get((t.name, p.partition_index), ErrorCode.NONE)}
                                        for p in t.partitions]} for t in req.topics] if not code else []}


async def _delete(coordinator: GroupCoordinator, req: Container, deletes: list, codes: dict) -> dict:
    code = await coordinator.write(req.group_id, [(tp, None) for tp in deletes])
    for tp in deletes:
        codes[tp] = code
    return _answer(ErrorCode.NONE, req, codes)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    code = coordinator.check(req.group_id) if req.group_id else ErrorCode.INVALID_GROUP_ID
    if req.group_id and not authz.group_allowed(ctx, AclOperation.DELETE, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    if code:
        return _answer(code, req, {})
    group = coordinator.get_group(req.group_id)
    if group is None and req.group_id not in coordinator.offsets:
        return _answer(ErrorCode.GROUP_ID_NOT_FOUND, req, {})
    subscribed: set[str] = set()
    if group is not None and group.members:
        topics = group.subscribed_topics()
        if topics is None:
            return _answer(ErrorCode.NON_EMPTY_GROUP, req, {})
        subscribed = topics
    codes, deletes = {}, []
    have = coordinator.offsets.get(req.group_id, {})
    denied = authz.denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in denied:
                codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t.name in subscribed:
                codes[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif tp in have:
                deletes.append(tp)
    if not deletes:
        return _answer(ErrorCode.NONE, req, codes)
    return _delete(coordinator, req, deletes, codes)
