"""DescribeShareGroupOffsets (KIP-932): each share partition's start offset, as the share
coordinator holds it, on the group's coordinator.

- Group-level errors: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group;
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; GROUP_ID_NOT_FOUND for no share group of that id.
- topics null: every partition of every topic on which the group has state. A partition on
  which it has none answers start offset -1; an unknown topic or partition
  UNKNOWN_TOPIC_OR_PARTITION; no DESCRIBE on the topic TOPIC_AUTHORIZATION_FAILED.
- leader_epoch is that of the leader that last wrote the state; lag (v1) is the records still to
  be delivered when this broker holds a replica of the partition (its high watermark, less the
  start offset and the records done above it), else -1.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_offsets_common import group_error
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 90
VERSIONS = (0, 1)
INTERNAL = ("__consumer_offsets", "__transaction_state", "__share_group_state")


async def handle(ctx: RequestContext, req: Container) -> Response:
    return {"throttle_time_ms": 0, "groups": [await _group(ctx, g) for g in req.groups]}


async def _group(ctx: RequestContext, g: Container) -> dict:
    code, message = group_error(ctx, g.group_id, AclOperation.DESCRIBE)
    if code:
        return {"group_id": g.group_id, "topics": [], "error_code": code, "error_message": message}
    share = ctx.share
    topics = []
    if g.topics is None:
        for name, info in sorted(ctx.broker.topics.items()):
            if name in INTERNAL or not authz.topic_allowed(ctx, AclOperation.DESCRIBE, name):
                continue
            parts = []
            for p in info.partitions:
                err, start, epoch, lag = await share.describe_offset(g.group_id, info.topic_id, p.index)
                if err or start >= 0:
                    parts.append(_partition(p.index, err, start, epoch, lag))
            if parts:
                topics.append({"topic_name": name, "topic_id": info.topic_id, "partitions": parts})
    else:
        for t in g.topics:
            named = ctx.broker.topics.get(t.topic_name)
            tid = named.topic_id if named is not None else None
            parts = []
            for index in t.partitions:
                if not authz.topic_allowed(ctx, AclOperation.DESCRIBE, t.topic_name):
                    parts.append(_partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                elif named is None or not 0 <= index < len(named.partitions):
                    parts.append(_partition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    parts.append(_partition(index, *await share.describe_offset(g.group_id, named.topic_id, index)))
            topics.append({"topic_name": t.topic_name, "topic_id": tid, "partitions": parts})
    return {"group_id": g.group_id, "topics": topics, "error_code": ErrorCode.NONE, "error_message": None}


def _partition(index: int, code: ErrorCode, start: int = -1, epoch: int = -1, lag: int = -1) -> dict:
    return {"partition_index": index, "start_offset": start, "leader_epoch": epoch, "lag": lag, "error_code": code,
            "error_message": None}
