"""ListPartitionReassignments: the reassignments under way (kafka-reassign-partitions.sh --list,
Admin.listPartitionReassignments), as the controller has them.

- topics null: every partition being reassigned. Otherwise the asked partitions that are being
  reassigned; topics and partitions that do not exist or are not reassigning are left out (Kafka
  does the same, without an error).
- Each partition: its replicas (the target's, then those being removed), the replicas being added
  and those being removed.
- ACLs (docs/security.md): DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED as the
  top-level error. The controller unreachable: its error, the same way. timeout_ms is ignored.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 46
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    asked: dict[str, list[int]] | None = None
    if req.topics is not None:
        asked = {}
        for topic in req.topics:
            asked.setdefault(topic.name, []).extend(topic.partition_indexes)
    try:
        authz.check_cluster(ctx, AclOperation.DESCRIBE)
        ongoing = await ctx.broker.list_partition_reassignments(asked)
    except BrokerError as e:
        # as Kafka's error response: the asked partitions, without replicas
        topics = [{"name": name, "partitions": [{"partition_index": i, "replicas": [], "adding_replicas": [],
                                                  "removing_replicas": []} for i in indexes]}
                  for name, indexes in (asked or {}).items()]
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "topics": topics}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for o in ongoing:
        by_topic.setdefault(o.topic, []).append({"partition_index": o.partition, "replicas": list(o.replicas),
                                                 "adding_replicas": list(o.adding),
                                                 "removing_replicas": list(o.removing)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}
