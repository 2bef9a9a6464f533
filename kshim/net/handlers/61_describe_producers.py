"""DescribeProducers: the producers a partition leader knows (idempotent and transactional), for
tooling such as `kafka-transactions.sh describe-producers` and finding hanging transactions.

- Per partition: producer id and epoch, last sequence and timestamp, the epoch of the coordinator
  whose marker it saw last, and the first offset of its open transaction (-1 if none).
- Answered by the partition's leader only: NOT_LEADER_OR_FOLLOWER elsewhere;
  UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
- ACLs (docs/security.md): READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

from typing import Any

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 61
VERSIONS = (0, 0)


def _partition(ctx: RequestContext, topic: str, index: int) -> dict:
    out: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE, "error_message": None, "active_producers": []}
    replica = ctx.broker.replica_manager.get_partition_or_error(topic, index)
    if isinstance(replica, ErrorCode):
        out["error_code"] = replica
        return out
    out["active_producers"] = [
        {"producer_id": e.producer_id, "producer_epoch": e.epoch, "last_sequence": e.last_seq,
         "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
         "current_txn_start_offset": e.txn_first_offset}
        for e in sorted(replica.producers.producers.values(), key=lambda e: e.producer_id)]
    return out


def _refused(index: int) -> dict:
    return {"partition_index": index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "error_message": None,
            "active_producers": []}


async def handle(ctx: RequestContext, req: Container) -> Response:
    denied = authz.denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [_refused(i) if t.name in denied else _partition(ctx, t.name, i)
                                        for i in t.partition_indexes]}
        for t in req.topics]}
