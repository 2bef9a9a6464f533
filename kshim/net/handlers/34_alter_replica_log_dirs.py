"""AlterReplicaLogDirs: move replicas between this broker's log directories (kafka-reassign-partitions.sh
--reassignment-json-file with log_dirs, Admin.alterReplicaLogDirs, which asks each broker on its own).

- Needs ALTER on the CLUSTER; without it every partition answers CLUSTER_AUTHORIZATION_FAILED.
- Per partition (Kafka's ReplicaManager.alterReplicaLogDirs): a path that is not one of the broker's
  log dirs (absolute, as DescribeLogDirs names them) is LOG_DIR_NOT_FOUND; a dir that cannot be
  written is KAFKA_STORAGE_ERROR; a topic name too long for the future directory's name is
  INVALID_TOPIC_EXCEPTION; a replica not hosted here is REPLICA_NOT_AVAILABLE, and the dir is kept
  for it: created here later, it starts there.
- Otherwise NONE, and the move runs in the background (docs/storage.md): the replica keeps serving
  from its current dir while a copy (the future replica, which DescribeLogDirs shows) catches up;
  then the copy takes its place. Asking for the dir it is in cancels a move under way; asking for
  another dir during a move restarts the move there.
- A partition named twice: the last dir given wins, as in Kafka's map of partition to dir.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from kshim.security.acls import AclOperation
from kshim.security.authz import cluster_allowed
from wire.errors import ErrorCode

API_KEY = 34
VERSIONS = (1, 2)
MAX_NAME_BYTES = 255  # a file name's limit: the future dir is <topic>-<partition>.<32 hex>-future


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    wanted: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for topic in d.topics:
            for index in topic.partitions:
                wanted.pop((topic.name, index), None)  # re-inserted: answered in the order last given
                wanted[(topic.name, index)] = d.path
    allowed = cluster_allowed(ctx, AclOperation.ALTER)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    manager = ctx.broker.replica_manager
    for (topic, index), path in wanted.items():
        if not allowed:
            error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif len(f"{topic}-{index}.{'0' * 32}-future".encode()) > MAX_NAME_BYTES:
            error = ErrorCode.INVALID_TOPIC_EXCEPTION
        elif not Path(path).is_absolute():
            error = ErrorCode.LOG_DIR_NOT_FOUND
        else:
            error = manager.alter_log_dir(topic, index, Path(path))
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": error})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": t, "partitions": parts} for t, parts in by_topic.items()]}
