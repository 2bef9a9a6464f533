"""AlterShareGroupOffsets (KIP-932): set share partitions' start offsets, on the group's
coordinator, while the group has no member.

- Whole-request errors: GROUP_AUTHORIZATION_FAILED without READ on the group;
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; GROUP_ID_NOT_FOUND for no share group of that
  id (kshim does not create one here); NON_EMPTY_GROUP while it has members.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED without READ on the
  topic, INVALID_REQUEST for a negative offset. A good one starts the share partition over at
  that offset under a new state epoch (InitializeShareGroupState through the share coordinator,
  COMMITTED before the answer): nothing in flight, every record from there on delivered anew.
  The partition's leader drops what it held when a member next opens a session on it (or its
  next write is fenced by the state epoch).
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_offsets_common import group_error
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 91
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    code, message = group_error(ctx, req.group_id, AclOperation.READ, must_be_empty=True)
    if code:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}
    responses = []
    for t in req.topics:
        info = ctx.broker.topics.get(t.topic_name)
        allowed = authz.topic_allowed(ctx, AclOperation.READ, t.topic_name)
        parts = []
        for p in t.partitions:
            if not allowed:
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= p.partition_index < len(info.partitions):
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif p.start_offset < 0:
                err = ErrorCode.INVALID_REQUEST
            else:
                err = await ctx.share.alter_offset(req.group_id, info.topic_id, p.partition_index, p.start_offset)
            parts.append({"partition_index": p.partition_index, "error_code": err, "error_message": None})
        responses.append({"topic_name": t.topic_name, "topic_id": info.topic_id if info is not None else None,
                          "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}
