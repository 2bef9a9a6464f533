"""DescribeGroups: state, protocol and members of classic groups coordinated here.

- A group this broker does not know, or a KIP-848 consumer group (described by
  ConsumerGroupDescribe), is reported Dead: with no error up to v5, with GROUP_ID_NOT_FOUND and a
  message from v6 (KIP-1043), as Kafka does.
- Members' metadata and assignments, and the protocol name, are given for Stable groups; during
  a rebalance the members are listed without them.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS per group. Authorized operations are not
  provided (INT32_MIN).
- ACLs (docs/security.md): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it;
  authorized_operations (v3+, when asked for) has the bits of what the principal may do on it.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.coordinator.groups.group import Group
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation, ResourceType
from wire.errors import ErrorCode

API_KEY = 15
VERSIONS = (0, 6)


NOT_FOUND_SINCE = 6  # KIP-1043


def describe(coordinator: GroupCoordinator, group_id: str, version: int = NOT_FOUND_SINCE,
             operations: int = authz.NOT_PROVIDED) -> dict:
    entry: dict = {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id, "group_state": "Dead",
                   "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": operations}
    code = coordinator.check(group_id)
    if code:
        return {**entry, "error_code": code, "group_state": ""}
    group = coordinator.get_group(group_id)
    if not isinstance(group, Group):  # none, or a KIP-848 consumer group: Dead to the classic API
        if version >= NOT_FOUND_SINCE:
            entry.update(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                         error_message=f"Group {group_id} not found." if group is None
                         else f"Group {group_id} is not a classic group.")
        return entry
    stable = group.state == "Stable"
    entry.update(group_state=group.state, protocol_type=group.protocol_type or "",
                 protocol_data=(group.protocol_name or "") if stable else "")
    entry["members"] = [{
        "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
        "client_host": m.client_host, "member_metadata": m.metadata(group.protocol_name) if stable else b"",
        "member_assignment": m.assignment if stable else b""} for m in group.members.values()]
    return entry


async def handle(ctx: RequestContext, req: Container) -> Response:
    asked = bool(req.get("include_authorized_operations", False)) if ctx.version >= 3 else False
    groups = []
    for g in req.groups:
        if not authz.group_allowed(ctx, AclOperation.DESCRIBE, g):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": None, "group_id": g,
                           "group_state": "", "protocol_type": "", "protocol_data": "", "members": [],
                           "authorized_operations": authz.NOT_PROVIDED})
            continue
        groups.append(describe(ctx.groups, g, ctx.version, authz.operations(ctx, ResourceType.GROUP, g, asked)))
    return {"throttle_time_ms": 0, "groups": groups}
