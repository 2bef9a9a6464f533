"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log (KIP-101, KIP-279, KIP-320).

- Followers ask it before fetching from a new leader, for their latest epoch, and truncate what
  they hold beyond the answer; consumers (v2+, replica id -1) ask it to detect log truncation
  after a leader change. Both are answered the same way.
- The answer comes from the leader's epoch cache (kshim/log/epochs.py), as Kafka's: the latest
  epoch ends at the log end offset; an older epoch ends where the next epoch in the log starts,
  answered with the largest epoch at or below the one requested; an epoch older than any left in
  the log answers itself with the log's first epoch start; a newer epoch than any, or -1, answers
  leader epoch -1 and end offset -1 (UNDEFINED) with no error.
- Only the leader answers; other brokers say NOT_LEADER_OR_FOLLOWER, and an unknown topic or
  partition is UNKNOWN_TOPIC_OR_PARTITION. current_leader_epoch (v2+) newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH (checked after leadership, as in Fetch).
- ACLs (docs/security.md): a follower's request (replica id >= 0) needs CLUSTER_ACTION, a
  client's DESCRIBE on each topic; else CLUSTER_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED
  for the partitions.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 23
VERSIONS = (2, 4)  # Kafka 4 removed v0-v1 (KIP-896)


def _answer(ctx: RequestContext, topic_name: str, p: Container) -> dict:
    entry = {"partition": p.partition, "error_code": ErrorCode.NONE, "leader_epoch": -1, "end_offset": -1}
    partition = ctx.broker.replica_manager.get_partition_or_error(topic_name, p.partition,
                                                                  p.get("current_leader_epoch", -1))
    if isinstance(partition, ErrorCode):
        entry["error_code"] = partition
        return entry
    entry["leader_epoch"], entry["end_offset"] = partition.epochs.end_offset_for(
        p.leader_epoch, partition.log_end_offset)
    return entry


def _refused(p: Container, code: ErrorCode) -> dict:
    return {"partition": p.partition, "error_code": code, "leader_epoch": -1, "end_offset": -1}


async def handle(ctx: RequestContext, req: Container) -> Response:
    if req.get("replica_id", -1) >= 0:
        code = ErrorCode.NONE if authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION) else \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        denied = {t.topic for t in req.topics} if code else set()
    else:
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, (t.topic for t in req.topics))
    topics = [{"topic": t.topic, "partitions": [_refused(p, code) if t.topic in denied else _answer(ctx, t.topic, p)
                                                for p in t.partitions]}
              for t in req.topics]
    return {"throttle_time_ms": 0, "topics": topics}
