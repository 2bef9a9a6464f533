"""ShareGroupDescribe (KIP-932): share groups coordinated here, with their epochs, assignor
("simple"), members and each member's assignment (topic ids and names).

- v1 only (v0 was early access). A group this broker does not know: GROUP_ID_NOT_FOUND "Group X
  not found."; a classic or consumer group: GROUP_ID_NOT_FOUND "Group X is not a share group."; an
  empty id: INVALID_GROUP_ID. States: Empty, Stable.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE per group.
- ACLs (docs/security.md): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it; DESCRIBE
  on every topic its members subscribe to, else TOPIC_AUTHORIZATION_FAILED for it (v1);
  authorized_operations (when asked for) has the bits of what the principal may do on it.
"""
from __future__ import annotations

from typing import Callable, Hashable

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.coordinator.groups.consumer_group import by_topic
from kshim.coordinator.groups.share_group import ShareGroup
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation, ResourceType
from wire.errors import ErrorCode

API_KEY = 77
VERSIONS = (1, 1)


def _error(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": authz.NOT_PROVIDED}


def describe(coordinator: GroupCoordinator, group_id: str) -> tuple[dict, ShareGroup | None]:
    if not group_id:
        return _error(group_id, ErrorCode.INVALID_GROUP_ID), None
    code = coordinator.check(group_id)
    if code:
        return _error(group_id, code), None
    code, group = coordinator.share_group(group_id)
    if code or group is None:
        return _error(group_id, code, f"Group {group_id} not found." if group_id not in coordinator.groups
                      else f"Group {group_id} is not a share group."), None
    return _described(group, coordinator.topic_name), group


def _described(group: ShareGroup, topic_name: Callable[[Hashable], str]) -> dict:
    def assignment(partitions: set[tuple[Hashable, int]]) -> dict:
        return {"topic_partitions": [{"topic_id": t, "topic_name": topic_name(t), "partitions": ps}
                                     for t, ps in by_topic(partitions).items()]}
    return {
        "error_code": ErrorCode.NONE, "error_message": None, "group_id": group.group_id,
        "group_state": group.state, "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
        "members": [{
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_names),
            "assignment": assignment(m.assigned),
        } for m in group.members.values()],
        "authorized_operations": authz.NOT_PROVIDED,
    }


async def handle(ctx: RequestContext, req: Container) -> Response:
    asked = bool(req.include_authorized_operations)
    groups = []
    for g in req.group_ids:
        if g and not authz.group_allowed(ctx, AclOperation.DESCRIBE, g):
            groups.append(_error(g, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        entry, group = describe(ctx.groups, g)
        if group is not None:
            denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, group.subscribed_topics())
            if denied:
                groups.append(_error(g, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     f"not authorized to describe topics {sorted(denied)}"))
                continue
            entry["authorized_operations"] = authz.operations(ctx, ResourceType.GROUP, g, asked)
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}
