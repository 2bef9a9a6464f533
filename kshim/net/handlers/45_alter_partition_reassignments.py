"""AlterPartitionReassignments: move partitions' replicas between brokers (kafka-reassign-partitions.sh,
Admin.alterPartitionReassignments), as Kafka's controller does it (KIP-455; docs/cluster.md).

- Each partition is answered on its own, in request order. A list of replicas starts (or replaces)
  a reassignment: the partition's replicas become the target followed by those being removed,
  the new ones are created on their brokers, fetch from the leader and join the ISR once caught
  up; when every target replica is in the ISR the controller drops the removed replicas (their
  brokers delete them) and, if the leader was removed, the first target replica in the ISR leads.
  A target that only reorders the replicas, or whose replicas are all in the ISR already,
  completes at once. Null replicas cancel the reassignment: back to the original replicas.
- Errors per partition, as Kafka's: an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; an
  empty list, a broker twice or a broker that is not registered INVALID_REPLICA_ASSIGNMENT;
  cancelling with none in progress NO_REASSIGNMENT_IN_PROGRESS (a cancel that would need an
  unclean election INVALID_REPLICA_ASSIGNMENT, unless the topic allows one); v1's
  allow_replication_factor_change=false and a target of another size than the original replicas
  INVALID_REPLICATION_FACTOR (KIP-860). The answer echoes allow_replication_factor_change.
- The answer comes once this broker has applied the image that starts (or completes, or cancels)
  them; the movement itself goes on afterwards (ListPartitionReassignments, `kshim ctl status`).
  timeout_ms is not needed for that and is ignored.
- ACLs (docs/security.md): ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED as the top-level
  error and every partition's. The controller unreachable: its error, the same way.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.controller.messages import Reassignment
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 45
VERSIONS = (0, 1)


def _answer(req: Container, code: ErrorCode, message: str | None,
            results: list[tuple[int, str | None]] | None = None) -> dict[str, Any]:
    """The response: each asked partition's result, in request order (or the top-level error for all)."""
    answers = iter(results or [])
    responses = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            part_code, part_message = next(answers) if results is not None else (int(code), message)
            parts.append({"partition_index": p.partition_index, "error_code": part_code,
                          "error_message": part_message})
        responses.append({"name": topic.name, "partitions": parts})
    return {"throttle_time_ms": 0, "allow_replication_factor_change": bool(req.get("allow_replication_factor_change", True)),
            "error_code": code, "error_message": message, "responses": responses}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    try:
        authz.check_cluster(ctx, AclOperation.ALTER)
        asked = [Reassignment(topic.name, p.partition_index, None if p.replicas is None else tuple(p.replicas))
                 for topic in req.topics for p in topic.partitions]
        results = await ctx.broker.alter_partition_reassignments(
            asked, allow_replication_factor_change=bool(req.get("allow_replication_factor_change", True)))
    except BrokerError as e:
        return _answer(req, e.code, e.message)
    return _answer(req, ErrorCode.NONE, None, [(r.error_code, r.message) for r in results])
