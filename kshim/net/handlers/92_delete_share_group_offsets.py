"""DeleteShareGroupOffsets (KIP-932): forget a share group's state on whole topics, on the
group's coordinator, while the group has no member.

- Whole-request errors: GROUP_AUTHORIZATION_FAILED without DELETE on the group;
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; GROUP_ID_NOT_FOUND; NON_EMPTY_GROUP while it
  has members.
- Per topic: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED without READ on it. A good one
  deletes the state of every partition (DeleteShareGroupState through the share coordinator, a
  tombstone COMMITTED before the answer): the next member starts there from
  share.auto.offset.reset.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_offsets_common import group_error
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 92
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    code, message = group_error(ctx, req.group_id, AclOperation.DELETE, must_be_empty=True)
    if code:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}
    responses = []
    for t in req.topics:
        info = ctx.broker.topics.get(t.topic_name)
        if not authz.topic_allowed(ctx, AclOperation.READ, t.topic_name):
            err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None:
            err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            err = ErrorCode.NONE
            for p in info.partitions:
                err = await ctx.share.delete_state(req.group_id, info.topic_id, p.index) or err
        responses.append({"topic_name": t.topic_name, "topic_id": info.topic_id if info is not None else None,
                          "error_code": err, "error_message": None})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}
