"""DescribeLogDirs: this broker's log directories and the replicas in each (kafka-log-dirs.sh,
Admin.describeLogDirs and describeReplicaLogDirs, which ask each broker on its own).

- One result per log dir (`--log-dirs`, else the data dir), named by its absolute path, in the
  order configured.
- topics null: every replica this broker hosts; else only the asked partitions it hosts (others
  are left out, as Kafka does; so are topics with none of them).
- Per replica: partition_size is the bytes of its log's segments, offset_lag how far its log end
  is behind its high watermark (0 for a leader; Kafka's definition), is_future_key false.
- A replica moving to another dir (AlterReplicaLogDirs) is also listed under its destination with
  is_future_key true: partition_size the bytes copied so far, offset_lag how far the copy is
  behind the current replica's log end (Kafka's future replica).
- v4+: total_bytes and usable_bytes of the directory's file system (statvfs: usable is what an
  unprivileged process may still write). v5: is_cordoned false (no cordoned directories, KIP-1066).
- A directory unreadable (statvfs fails): KAFKA_STORAGE_ERROR for it, no replicas; the other dirs
  are answered as usual.
- Needs DESCRIBE on the CLUSTER: without it, no results and (v3+) CLUSTER_AUTHORIZATION_FAILED.
- v3+ top-level error_code: NONE.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from kshim.security.acls import AclOperation
from kshim.security.authz import cluster_allowed
from wire.errors import ErrorCode

API_KEY = 35
VERSIONS = (1, 5)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    if not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    manager = ctx.broker.replica_manager
    asked = None if req.topics is None else {(t.topic, i) for t in req.topics for i in t.partitions}
    per_dir: dict[str, dict[str, list[dict[str, Any]]]] = {str(d): {} for d in manager.log_dirs}
    for replica in sorted(ctx.broker.replicas(), key=lambda r: (r.topic, r.index)):
        if asked is not None and (replica.topic, replica.index) not in asked:
            continue
        per_dir.setdefault(str(manager.log_dir_of(replica)), {}).setdefault(replica.topic, []).append({
            "partition_index": replica.index, "partition_size": replica.size_bytes,
            "offset_lag": max(replica.high_watermark - replica.log_end_offset, 0), "is_future_key": False})
        move = manager.moves.get((replica.topic, replica.index))
        if move is not None:
            per_dir.setdefault(str(move.destination), {}).setdefault(replica.topic, []).append({
                "partition_index": replica.index, "partition_size": move.copier.size_bytes,
                "offset_lag": max(replica.log_end_offset - move.copied_end_offset, 0), "is_future_key": True})
    results = []
    for directory, topics in per_dir.items():
        result: dict[str, Any] = {"log_dir": directory, "error_code": ErrorCode.NONE, "topics": [],
                                  "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False}
        try:
            fs = os.statvfs(directory)
        except OSError:
            result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            result.update(total_bytes=fs.f_blocks * fs.f_frsize, usable_bytes=fs.f_bavail * fs.f_frsize,
                          topics=[{"name": name, "partitions": parts} for name, parts in topics.items()])
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}
