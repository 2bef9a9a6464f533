"""DeleteRecords: advance partitions' log start offsets, each partition independently of the others.

- `offset` is the new log start offset: records below it become unreadable (fetching them is
  OFFSET_OUT_OF_RANGE) and whole segments below it are removed from disk.
- -1 means the high watermark (delete everything currently in the partition).
- An offset above the high watermark, or below -1, is OFFSET_OUT_OF_RANGE.
- An offset at or below the current log start offset changes nothing (not an error).
- A topic whose cleanup.policy is compact without delete is POLICY_VIOLATION, its low watermark
  unmoved (Kafka: only the cleaner removes records there); `compact,delete`, `delete` and the
  empty policy allow it. The partition decides (Partition.delete_records).
- An unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION.
- Success answers low_watermark, the partition's log start offset afterwards; failures answer -1.
- The change is on disk before the response. timeout_ms is ignored.
- ACLs (docs/security.md): DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import refuse_internal
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.replica.partition import OffsetOutOfRange
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers.delete_records")

API_KEY = 21
VERSIONS = (0, 2)


def _delete(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    if not authz.topic_allowed(ctx, AclOperation.DELETE, topic):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not DELETE records of {topic!r}")
    refuse_internal(topic, "delete records of")
    partition = ctx.broker.replica_manager.get_partition_or_error(topic, index)
    if isinstance(partition, ErrorCode):
        raise BrokerError(partition, f"{topic}-{index}: {partition.name}")
    return partition.delete_records(offset)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    topics = []
    for topic in req.topics or ():
        partitions = []
        for p in topic.partitions or ():
            answer = {"partition_index": p.partition_index, "low_watermark": -1, "error_code": ErrorCode.NONE}
            try:
                answer["low_watermark"] = _delete(ctx, topic.name, p.partition_index, p.offset)
            except BrokerError as e:
                answer["error_code"] = e.code
            except OffsetOutOfRange:
                answer["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            except OSError:
                log.exception("deleting records of %s-%d failed", topic.name, p.partition_index)
                answer["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
