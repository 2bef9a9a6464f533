"""DescribeLogDirs: this broker's log directory and the replicas in it (kafka-log-dirs.sh,
Admin.describeLogDirs, which asks each broker on its own).

- A kshim broker has one log directory, its data dir: one result, named by its absolute path.
- topics null: every replica this broker hosts; else only the asked partitions it hosts (others
  are left out, as Kafka does; so are topics with none of them).
- Per replica: partition_size is the bytes of its log's segments, offset_lag how far its log end
  is behind its high watermark (0 for a leader; Kafka's definition), is_future_key false (kshim
  never moves replicas between directories).
- v4+: total_bytes and usable_bytes of the directory's file system (statvfs: usable is what an
  unprivileged process may still write). v5: is_cordoned false (no cordoned directories, KIP-1066).
- The directory unreadable (statvfs fails): KAFKA_STORAGE_ERROR for it, no replicas.
- v3+ top-level error_code: NONE.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from wire.errors import ErrorCode

API_KEY = 35
VERSIONS = (1, 5)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    directory = os.path.abspath(ctx.broker.config.data_dir)
    result: dict[str, Any] = {"log_dir": directory, "error_code": ErrorCode.NONE, "topics": [],
                              "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False}
    try:
        fs = os.statvfs(directory)
    except OSError:
        result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [result]}
    result.update(total_bytes=fs.f_blocks * fs.f_frsize, usable_bytes=fs.f_bavail * fs.f_frsize)
    asked = None if req.topics is None else {(t.topic, i) for t in req.topics for i in t.partitions}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for replica in sorted(ctx.broker.replicas(), key=lambda r: (r.topic, r.index)):
        if asked is not None and (replica.topic, replica.index) not in asked:
            continue
        by_topic.setdefault(replica.topic, []).append({
            "partition_index": replica.index, "partition_size": replica.log.size_bytes,
            "offset_lag": max(replica.high_watermark - replica.log_end_offset, 0), "is_future_key": False})
    result["topics"] = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": [result]}
