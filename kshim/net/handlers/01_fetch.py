"""Fetch: whole record batches from partition leaders, long-polling for data. Consumers and
follower replicas (replica id >= 0) both use it. The reads, the long-poll and the followers'
progress are the ReplicaManager's (kshim/replica); this module maps the request and response.

- Fetch sessions (KIP-227) are declined: every response carries session_id 0, so clients keep
  sending full fetch requests.
- Consumers read from the leader only (others get NOT_LEADER_OR_FOLLOWER), bounded per isolation
  level: read_committed up to the last stable offset (the first offset of the earliest open
  transaction, else the high watermark) with the aborted transactions overlapping the returned
  batches, so the client drops their records; read_uncommitted up to the log end offset, or the
  high watermark where the topic sets kshim.uncommitted.read.limit=high-watermark. The
  response watermarks are the leader's.
- A follower's fetch offset tells the leader what the follower has: the leader records it
  (advancing the high watermark, which may complete acks=all produces) and answers with batches up
  to its log end and its high watermark. A follower or leader cut off with `kshim ctl isolate`
  gets nothing: the request waits out max_wait_ms and records no progress, as if lost.
- Returns whole batches; a fetch at an offset inside a batch returns that batch (clients skip the
  records before their offset). The first batch of the first partition with data is returned even
  if it exceeds max_bytes or partition_max_bytes (KIP-74); every other partition stops at its
  partition_max_bytes and the response at max_bytes.
- If fewer than min_bytes are ready (and no partition failed), the request waits until appends
  bring enough or max_wait_ms passes, while the connection goes on with later requests.
- OFFSET_OUT_OF_RANGE below the log start or above the log end; UNKNOWN_TOPIC_OR_PARTITION (by
  name, v4-12) or UNKNOWN_TOPIC_ID (v13+); current_leader_epoch newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH.
- ACLs (docs/security.md): a follower's fetch needs CLUSTER_ACTION on the cluster (else the whole
  request fails with CLUSTER_AUTHORIZATION_FAILED); a consumer's needs READ on each topic, else
  TOPIC_AUTHORIZATION_FAILED for its partitions, answered without waiting.
"""
from __future__ import annotations

from typing import Awaitable

from construct import Container

from kshim.acls import AclOperation
from kshim.net.handlers import RequestContext, Response, authz
from kshim.replica import FetchParams, FetchPartition, FetchPartitionData
from wire.errors import ErrorCode

API_KEY = 1
VERSIONS = (4, 17)


def _replica_id(ctx: RequestContext, req: Container) -> int:
    if ctx.version >= 15:
        state = req.get("replica_state")
        return state.replica_id if state else -1
    return req.replica_id


async def handle(ctx: RequestContext, req: Container) -> Response:
    by_id = ctx.version >= 13
    replica_id = _replica_id(ctx, req)
    if replica_id >= 0 and not authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "session_id": 0,
                "responses": []}
    denied: set = set()  # names, or ids from v13
    if replica_id < 0 and authz.enabled(ctx):
        keyed = {}  # what the request names the topic by -> its name (unknown ids stay UNKNOWN_TOPIC_ID)
        for t in req.topics:
            topic = ctx.broker.topics_by_id.get(t.topic_id) if by_id else None
            keyed[t.topic_id if by_id else t.topic] = topic.name if topic is not None else (None if by_id else t.topic)
        refused = authz.denied_topics(ctx, AclOperation.READ, (n for n in keyed.values() if n is not None))
        denied = {key for key, name in keyed.items() if name in refused}
    # a denied partition is answered at once, as any partition error is: no long-poll
    params = FetchParams(replica_id, req.max_wait_ms, 0 if denied else req.min_bytes, req.max_bytes,
                         req.isolation_level)
    asked = [FetchPartition(t.topic_id if by_id else t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                            p.get("current_leader_epoch", -1))
             for t in req.topics for p in t.partitions]
    allowed = [a for a in asked if a.topic not in denied]
    results = ctx.broker.replica_manager.fetch(params, allowed)
    if isinstance(results, list):
        return _response(req, _merge(asked, denied, results))
    return _when_ready(req, asked, denied, results)


def _merge(asked: list[FetchPartition], denied: set, results: list[FetchPartitionData]) -> list[FetchPartitionData]:
    """The answers in request order, TOPIC_AUTHORIZATION_FAILED where the topic was denied."""
    if not denied:
        return results
    answers = iter(results)
    refused = FetchPartitionData(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return [refused if a.topic in denied else next(answers) for a in asked]


async def _when_ready(req: Container, asked: list[FetchPartition], denied: set,
                      pending: Awaitable[list[FetchPartitionData]]) -> dict:
    return _response(req, _merge(asked, denied, await pending))


def _response(req: Container, results: list[FetchPartitionData]) -> dict:
    answers = iter(results)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": [
        {"topic": t.get("topic"), "topic_id": t.get("topic_id"),
         "partitions": [_partition(p.partition, next(answers)) for p in t.partitions]}
        for t in req.topics]}


def _partition(index: int, data: FetchPartitionData) -> dict:
    aborted = data.aborted_transactions
    return {"partition_index": index, "error_code": data.error, "high_watermark": data.high_watermark,
            "last_stable_offset": data.last_stable_offset, "log_start_offset": data.log_start_offset,
            "records": data.records,
            "aborted_transactions": None if aborted is None else [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted]}
