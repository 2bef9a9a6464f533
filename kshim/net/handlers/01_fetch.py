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
- consumer_byte_rate (client quotas; followers are exempt): a response is at most what the quota
  allows in one window; one that takes the client over its quota is answered empty with
  throttle_time_ms, its bytes not counted, and the connection handles no request of it until then.
- Returns whole batches; a fetch at an offset inside a batch returns that batch (clients skip the
  records before their offset). The first batch of the first partition with data is returned even
  if it exceeds max_bytes or partition_max_bytes (KIP-74); every other partition stops at its
  partition_max_bytes and the response at max_bytes.
- If fewer than min_bytes are ready (and no partition failed), the request waits until appends
  bring enough or max_wait_ms passes, while the connection goes on with later requests.
- OFFSET_OUT_OF_RANGE below the log start or above the log end; UNKNOWN_TOPIC_OR_PARTITION (by
  name, v4-12) or UNKNOWN_TOPIC_ID (v13+); current_leader_epoch newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH.
"""
from __future__ import annotations

from typing import Awaitable

from construct import Container

from kshim.configs.quotas import CONSUMER_BYTE_RATE
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.throttling import charge, max_in_window, uncharge
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
    max_bytes = req.max_bytes
    if replica_id >= 0:
        ctx.quota_exempt = True  # replication is no client's traffic
    elif (most := max_in_window(ctx, CONSUMER_BYTE_RATE)) is not None:
        # no answer larger than the quota allows in a window, as Kafka caps it
        max_bytes = max(1, min(max_bytes, int(most))) if max_bytes > 0 else max(1, int(most))
    params = FetchParams(replica_id, req.max_wait_ms, req.min_bytes, max_bytes, req.isolation_level)
    asked = [FetchPartition(t.topic_id if by_id else t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                            p.get("current_leader_epoch", -1))
             for t in req.topics for p in t.partitions]
    results = ctx.broker.replica_manager.fetch(params, asked)
    if isinstance(results, list):
        return _response(ctx, req, results)
    return _when_ready(ctx, req, results)


async def _when_ready(ctx: RequestContext, req: Container, pending: Awaitable[list[FetchPartitionData]]) -> dict:
    return _response(ctx, req, await pending)


def _response(ctx: RequestContext, req: Container, results: list[FetchPartitionData]) -> dict:
    if not ctx.quota_exempt:
        size = sum(len(r.records) for r in results)
        throttle = charge(ctx, CONSUMER_BYTE_RATE, size)
        if throttle:
            # over the quota: the data is not sent (nor counted), as Kafka answers a throttled fetch
            uncharge(ctx, CONSUMER_BYTE_RATE, size)
            return {"throttle_time_ms": throttle, "error_code": ErrorCode.NONE, "session_id": 0, "responses": []}
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
