"""Fetch: whole record batches from partition leaders, long-polling for data. Consumers and
follower replicas (replica id >= 0) both use it. The reads, the long-poll and the followers'
progress are the ReplicaManager's (kshim/replica); this module maps the request and response.

- Fetch sessions (KIP-227, kshim/replica/fetch_sessions.py) from v7: a full fetch (epoch 0) may
  open a session (its id in the answer); incremental fetches (the next epochs) send only changed
  partitions and forgotten ones, and are answered only the partitions with records, an error or
  a moved high watermark or log start offset. Unknown session: FETCH_SESSION_ID_NOT_FOUND; wrong
  epoch: INVALID_FETCH_SESSION_EPOCH; topic names vs ids not those the session was opened with:
  FETCH_SESSION_TOPIC_ID_ERROR (all with no partitions). Epoch -1 closes the session and fetches
  without one. At most --max-incremental-fetch-session-cache-slots sessions (1000), evicted by
  Kafka's rules. kshim's own followers send full fetches without sessions (v12).
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
  throttle_time_ms (in its fetch session, if any, whose partitions stay as they were), its bytes
  not counted, and the connection handles no request of it until then.
- Returns whole batches; a fetch at an offset inside a batch returns that batch (clients skip the
  records before their offset). The first batch of the first partition with data is returned even
  if it exceeds max_bytes or partition_max_bytes (KIP-74); every other partition stops at its
  partition_max_bytes and the response at max_bytes.
- If fewer than min_bytes are ready (and no partition failed), the request waits until appends
  bring enough or max_wait_ms passes, while the connection goes on with later requests.
- OFFSET_OUT_OF_RANGE below the log start or above the log end; UNKNOWN_TOPIC_OR_PARTITION (by
  name, v4-12) or UNKNOWN_TOPIC_ID (v13+); current_leader_epoch newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH.
- v18 (KIP-1166): a follower's known high watermark behind the leader's answers at once instead
  of waiting out max_wait_ms, so the follower learns it without new data.
- ACLs (docs/security.md): a follower's fetch needs CLUSTER_ACTION on the cluster (else the whole
  request fails with CLUSTER_AUTHORIZATION_FAILED); a consumer's needs READ on each topic, else
  TOPIC_AUTHORIZATION_FAILED for its partitions, answered without waiting.
"""
from __future__ import annotations

import uuid
from typing import Awaitable

from construct import Container

from kshim.configs.quotas import CONSUMER_BYTE_RATE
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.throttling import charge, max_in_window, uncharge
from kshim.replica import FetchParams, FetchPartition, FetchPartitionData
from kshim.replica.fetch import release
from kshim.replica.fetch_sessions import FetchContext, new_context
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 1
VERSIONS = (4, 18)
BY_ID = 13  # topics named by id from this version
NOT_SENT = (1 << 63) - 1  # HighWatermark's default: the follower does not say


def _replica_id(ctx: RequestContext, req: Container) -> int:
    if ctx.version >= 15:
        state = req.get("replica_state")
        return state.replica_id if state else -1
    return req.replica_id


async def handle(ctx: RequestContext, req: Container) -> Response:
    by_id = ctx.version >= BY_ID
    replica_id = _replica_id(ctx, req)
    if replica_id >= 0 and not authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "session_id": 0,
                "responses": []}
    asked = [FetchPartition(t.topic_id if by_id else t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                            p.get("current_leader_epoch", -1), p.get("high_watermark", NOT_SENT))
             for t in req.topics for p in t.partitions]
    forgotten = [(t.topic_id if by_id else t.topic, index)
                 for t in req.get("forgotten_topics_data") or () for index in t.partitions]
    replicas = ctx.broker.replica_manager
    context = new_context(replicas.fetch_sessions, ctx.version, req.get("session_id", 0), req.get("session_epoch", -1),
                          replica_id >= 0, asked, forgotten)
    if context.error:
        return {"throttle_time_ms": 0, "error_code": context.error, "session_id": 0, "responses": []}
    denied = _denied(ctx, by_id, context.asked) if replica_id < 0 else set()
    max_bytes = req.max_bytes
    if replica_id >= 0:
        ctx.quota_exempt = True  # replication is no client's traffic
    elif (most := max_in_window(ctx, CONSUMER_BYTE_RATE)) is not None:
        # no answer larger than the quota allows in a window, as Kafka caps it
        max_bytes = max(1, min(max_bytes, int(most))) if max_bytes > 0 else max(1, int(most))
    # a denied partition is answered at once, as any partition error is: no long-poll
    # records as file regions: the server sendfiles them (plaintext) or preads them (TLS)
    params = FetchParams(replica_id, req.max_wait_ms, 0 if denied else req.min_bytes, max_bytes,
                         req.isolation_level, file_regions=True)
    allowed = [a for a in context.asked if a.topic not in denied]
    results = replicas.fetch(params, allowed)
    if isinstance(results, list):
        return _response(ctx, context, by_id, _merge(context.asked, denied, results))
    return _when_ready(ctx, context, by_id, denied, results)


def _denied(ctx: RequestContext, by_id: bool, asked: list[FetchPartition]) -> set:
    """The topics (names, or ids from v13) this principal may not READ; unknown ids stay UNKNOWN_TOPIC_ID."""
    if not authz.enabled(ctx):
        return set()
    keyed: dict = {}
    for a in asked:
        if isinstance(a.topic, uuid.UUID):
            topic = ctx.broker.topics_by_id.get(a.topic)
            keyed[a.topic] = topic.name if topic is not None else None
        else:
            keyed[a.topic] = a.topic
    refused = authz.denied_topics(ctx, AclOperation.READ, {n for n in keyed.values() if isinstance(n, str)})
    return {key for key, name in keyed.items() if name in refused}


def _merge(asked: list[FetchPartition], denied: set, results: list[FetchPartitionData]) -> list[FetchPartitionData]:
    """The answers in the order asked, TOPIC_AUTHORIZATION_FAILED where the topic was denied."""
    if not denied:
        return results
    answers = iter(results)
    refused = FetchPartitionData(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return [refused if a.topic in denied else next(answers) for a in asked]


async def _when_ready(ctx: RequestContext, context: FetchContext, by_id: bool, denied: set,
                      pending: Awaitable[list[FetchPartitionData]]) -> dict:
    return _response(ctx, context, by_id, _merge(context.asked, denied, await pending))


def _response(ctx: RequestContext, context: FetchContext, by_id: bool, results: list[FetchPartitionData]) -> dict:
    if not ctx.quota_exempt:
        size = sum(len(r.records) for r in results if r.records is not None)
        throttle = charge(ctx, CONSUMER_BYTE_RATE, size)
        if throttle:
            # over the quota: the data is not sent (nor counted), as Kafka answers a throttled fetch:
            # empty, in the incremental session if any (which opens none and changes no partition)
            uncharge(ctx, CONSUMER_BYTE_RATE, size)
            release(results)  # their file regions' descriptors
            session_id = context.session.id if context.session is not None else 0
            return {"throttle_time_ms": throttle, "error_code": ErrorCode.NONE, "session_id": session_id,
                    "responses": []}
    session_id, answered = context.respond(results)
    topics: list[dict] = []
    for asked, data in answered:  # consecutive partitions of one topic share its entry, as Kafka writes them
        if not topics or topics[-1]["key"] != asked.topic:
            topics.append({"key": asked.topic, "partitions": []})
        topics[-1]["partitions"].append(_partition(asked.index, data))
    key = "topic_id" if by_id else "topic"
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": session_id,
            "responses": [{key: t["key"], "partitions": t["partitions"]} for t in topics]}


def _partition(index: int, data: FetchPartitionData) -> dict:
    aborted = data.aborted_transactions
    return {"partition_index": index, "error_code": data.error, "high_watermark": data.high_watermark,
            "last_stable_offset": data.last_stable_offset, "log_start_offset": data.log_start_offset,
            "records": data.records,
            "aborted_transactions": None if aborted is None else [
                {"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted]}
