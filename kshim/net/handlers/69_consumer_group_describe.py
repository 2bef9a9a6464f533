"""ConsumerGroupDescribe (KIP-848): consumer groups coordinated here, with their epochs, assignor,
members, and each member's current and target assignment (topic ids and names).

- A classic group, or a group this broker does not know: GROUP_ID_NOT_FOUND (clients such as
  librdkafka then fall back to DescribeGroups). An empty id: INVALID_GROUP_ID.
- States: Empty, Assigning, Reconciling, Stable (Dead is never listed: unloaded groups are gone).
- v1 member_type (KIP-1099): always 1 (consumer): kshim has no classic members in consumer groups.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE per group.
  Authorized operations are not provided (INT32_MIN).
- ACLs (docs/security.md): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it;
  authorized_operations (when asked for) has the bits of what the principal may do on it.
"""
from __future__ import annotations

from typing import Callable, Hashable

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.coordinator.groups.consumer_group import ConsumerGroup, by_topic
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation, ResourceType
from wire.errors import ErrorCode

API_KEY = 69
VERSIONS = (0, 1)
CONSUMER_MEMBER = 1


def _error(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}


def describe(coordinator: GroupCoordinator, group_id: str) -> dict:
    if not group_id:
        return _error(group_id, ErrorCode.INVALID_GROUP_ID)
    code = coordinator.check(group_id)
    if code:
        return _error(group_id, code)
    code, group = coordinator.consumer_group(group_id)
    if code or group is None:
        return _error(group_id, code, f"Group {group_id} not found." if group_id not in coordinator.groups
                      else f"Group {group_id} is not a consumer group.")
    return _described(group, coordinator.topic_name)


def _described(group: ConsumerGroup, topic_name: Callable[[Hashable], str]) -> dict:
    def assignment(partitions: set[tuple[Hashable, int]]) -> dict:
        return {"topic_partitions": [{"topic_id": t, "topic_name": topic_name(t), "partitions": ps}
                                     for t, ps in by_topic(partitions).items()]}
    return {
        "error_code": ErrorCode.NONE, "error_message": None, "group_id": group.group_id,
        "group_state": group.state, "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.epoch, "member_type": CONSUMER_MEMBER, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": list(m.subscribed_names), "subscribed_topic_regex": m.subscribed_regex,
            "assignment": assignment(m.assigned),
            "target_assignment": assignment(group.target.get(m.member_id, set())),
        } for m in group.members.values()],
    }


async def handle(ctx: RequestContext, req: Container) -> Response:
    asked = bool(req.get("include_authorized_operations", False))
    groups = []
    for g in req.group_ids:
        if g and not authz.group_allowed(ctx, AclOperation.DESCRIBE, g):
            groups.append(_error(g, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        entry = describe(ctx.groups, g)
        if not entry["error_code"]:
            entry["authorized_operations"] = authz.operations(ctx, ResourceType.GROUP, g, asked)
        groups.append(entry)
    return {"throttle_time_ms": 0, "groups": groups}
