"""ListOffsets: offsets by timestamp, and the earliest / latest / max-timestamp specials.

- -2 (earliest) and -4 (earliest local, KIP-405, v8+) answer the log start offset; -5 (latest
  tiered, KIP-1005, v9+) and -6 (earliest pending upload, KIP-1023, v11+) answer offset -1 with
  timestamp and leader epoch -1, as Kafka does for a topic without tiered storage (kshim has none).
- A special timestamp in a version older than the one that brought it gets UNSUPPORTED_VERSION
  for that partition (Kafka's timestampMinSupportedVersion); another negative one INVALID_REQUEST.
- v10's timeout_ms bounds waiting for remote storage reads (KIP-1075): there are none here.
- -1 (latest) answers the bound of the request's isolation level, the same as Fetch: the last
  stable offset for read_committed (the first offset of the earliest open transaction, else the
  high watermark), the log end offset for read_uncommitted (or the high watermark where
  kshim.uncommitted.read.limit=high-watermark).
- Only the leader answers; other brokers say NOT_LEADER_OR_FOLLOWER.
- -3 (max timestamp, v7+, KIP-734) answers the offset and timestamp of the record with the
  largest timestamp.
- A timestamp >= 0 answers the first offset whose record timestamp is >= it (found through the
  time index, then by walking that one batch's records in a worker thread), or offset -1 when
  there is none.
- ACLs (docs/security.md): DESCRIBE on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

import logging

import anyio
from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.replica.partition import Partition
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.compression import CorruptRecordError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers.list_offsets")

API_KEY = 2
VERSIONS = (1, 11)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# the first version carrying each special timestamp (Kafka's timestampMinSupportedVersion)
MIN_VERSION = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
               EARLIEST_PENDING_UPLOAD: 11}


async def _lookup(partition: Partition, timestamp: int, isolation_level: int) -> tuple[int, int]:
    """(offset, timestamp) for one partition. A lookup by time reads and walks a batch's
    records: that runs in a worker thread, never on the event loop."""
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    if timestamp == LATEST:
        return partition.read_bound(isolation_level), -1
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):  # no tiered storage
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = await anyio.to_thread.run_sync(partition.log.max_timestamp)
        return (found[1], found[0]) if found else (-1, -1)
    found = await anyio.to_thread.run_sync(partition.log.offset_for_timestamp, timestamp)
    if found is None or found[0] >= partition.read_bound(isolation_level):
        return -1, -1
    return found


async def handle(ctx: RequestContext, req: Container) -> Response:
    isolation = req.get("isolation_level", 0)
    topics = []
    denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, (t.name for t in req.topics))
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition_index": p.partition_index, "error_code": ErrorCode.NONE,
                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if t.name in denied:
                parts.append({**entry, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                continue
            partition = ctx.broker.replica_manager.get_partition_or_error(
                t.name, p.partition_index, p.get("current_leader_epoch", -1))
            if isinstance(partition, ErrorCode):
                entry["error_code"] = partition
            elif p.timestamp < 0 and p.timestamp not in MIN_VERSION:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
            elif p.timestamp < 0 and ctx.version < MIN_VERSION[p.timestamp]:
                entry["error_code"] = ErrorCode.UNSUPPORTED_VERSION
            else:
                try:
                    entry["offset"], entry["timestamp"] = await _lookup(partition, p.timestamp, isolation)
                except CorruptRecordError as e:  # a stored batch that cannot be read (stored before checks)
                    log.warning("ListOffsets on %s-%d: %s", t.name, p.partition_index, e)
                    entry["error_code"] = ErrorCode.CORRUPT_MESSAGE
                if ctx.version >= 4 and p.timestamp not in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
                    entry["leader_epoch"] = partition.leader_epoch  # v1-3 have none (the codec refuses one)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
