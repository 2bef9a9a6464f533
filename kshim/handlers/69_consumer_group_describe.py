"""ConsumerGroupDescribe (KIP-848): consumer groups coordinated here, with their epochs, assignor,
members, and each member's current and target assignment (topic ids and names).

- A classic group, or a group this broker does not know: GROUP_ID_NOT_FOUND (clients such as
  librdkafka then fall back to DescribeGroups). An empty id: INVALID_GROUP_ID.
- States: Empty, Assigning, Reconciling, Stable (Dead is never listed: unloaded groups are gone).
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE per group.
  Authorized operations are not provided (INT32_MIN).
"""
from __future__ import annotations

from construct import Container

from kshim.handlers import RequestContext, Response
from wire.errors import ErrorCode

API_KEY = 69
VERSIONS = (0, 0)


def _error(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}


def describe(coordinator, group_id: str) -> dict:
    if not group_id:
        return _error(group_id, ErrorCode.INVALID_GROUP_ID)
    code = coordinator.check(group_id)
    if code:
        return _error(group_id, code)
    code, group = coordinator.consumer_group(group_id)
    if code:
        return _error(group_id, code, f"Group {group_id} not found." if group_id not in coordinator.groups
                      else f"Group {group_id} is not a consumer group.")
    return group.describe(coordinator.topic_name)


async def handle(ctx: RequestContext, req: Container) -> Response:
    return {"throttle_time_ms": 0, "groups": [describe(ctx.groups, g) for g in req.group_ids]}
