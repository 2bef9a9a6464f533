"""Fetch: whole record batches from partition leaders, long-polling for data. Consumers and
follower replicas (replica id >= 0) both use it.

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
- If fewer than min_bytes are ready, the request waits on an append event (no polling) until data
  arrives or max_wait_ms passes.
- OFFSET_OUT_OF_RANGE below the log start or above the log end; UNKNOWN_TOPIC_OR_PARTITION (by
  name, v4-12) or UNKNOWN_TOPIC_ID (v13+); current_leader_epoch newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH.
"""
from __future__ import annotations

import anyio

from kshim.clock import SYSTEM
from kshim.partition import OffsetOutOfRange
from wire import records
from wire.errors import ErrorCode

API_KEY = 1
VERSIONS = (4, 17)


def _replica_id(ctx, req) -> int:
    if ctx.version >= 15:
        state = req.get("replica_state")
        return state.replica_id if state else -1
    return req.replica_id


def _resolve(ctx, topic_req):
    broker = ctx.broker
    if ctx.version >= 13:
        return broker.topics_by_id.get(topic_req.topic_id), ErrorCode.UNKNOWN_TOPIC_ID
    return broker.topics.get(topic_req.topic), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _read_all(ctx, req, plan, replica_id: int, record_progress: bool) -> tuple[list[dict], int]:
    """One pass over every requested partition; returns (topic responses, bytes of records)."""
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    now = SYSTEM.wall_ms()
    responses = []
    for topic_req, topic, missing_code in plan:
        parts = []
        for p in topic_req.partitions:
            entry = {"partition_index": p.partition, "error_code": ErrorCode.NONE, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "records": b"",
                     "aborted_transactions": [] if req.isolation_level == 1 else None}
            parts.append(entry)
            if topic is None or not 0 <= p.partition < len(topic.partitions):
                entry["error_code"] = missing_code if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            partition = ctx.broker.partition(topic.name, p.partition)
            if partition is None or not partition.is_leader:
                entry["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            entry["error_code"] = partition.leader_epoch_error(p.get("current_leader_epoch", -1))
            if entry["error_code"]:
                continue
            if replica_id >= 0 and record_progress and p.fetch_offset <= partition.log_end_offset:
                partition.record_follower_fetch(replica_id, p.fetch_offset, now)
            entry["high_watermark"] = partition.high_watermark
            entry["last_stable_offset"] = partition.last_stable_offset
            entry["log_start_offset"] = partition.log_start_offset
            limit = min(p.partition_max_bytes, budget - total)
            if limit <= 0 and total > 0:
                continue  # the response is full: this partition gets no data this time
            first = total == 0  # KIP-74: only the first partition with data may exceed the limits
            try:
                if replica_id >= 0:
                    data = partition.read_for_follower(p.fetch_offset, max(limit, 1), first) if record_progress else b""
                else:
                    data = partition.read(p.fetch_offset, max(limit, 1), req.isolation_level, first)
            except OffsetOutOfRange:
                entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            entry["records"] = data
            total += len(data)
            if data and req.isolation_level == 1:
                entry["aborted_transactions"] = partition.aborted_transactions(p.fetch_offset, _end_of(data))
        responses.append({"topic": topic_req.get("topic"), "topic_id": topic_req.get("topic_id"), "partitions": parts})
    return responses, total


def _end_of(data: bytes) -> int:
    """The offset after the last batch of a read."""
    end = -1
    for _pos, header in records.iter_batches(data):
        end = header.next_offset
    return end


def _cut_off(ctx, replica_id: int) -> bool:
    """Replication traffic to or from an isolated broker is dropped (`kshim ctl isolate`)."""
    brokers = ctx.broker.image.brokers
    me = brokers.get(ctx.broker.node_id)
    them = brokers.get(replica_id)
    return bool((me and me.isolated) or (them and them.isolated))


async def handle(ctx, req):
    plan = [(topic_req, *_resolve(ctx, topic_req)) for topic_req in req.topics]
    replica_id = _replica_id(ctx, req)
    record_progress = replica_id < 0 or not _cut_off(ctx, replica_id)
    responses, total = _read_all(ctx, req, plan, replica_id, record_progress)
    if total >= req.min_bytes or req.max_wait_ms <= 0 or _has_errors(responses):
        return _response(responses)
    return _wait_and_read(ctx, req, plan, replica_id, record_progress)


def _has_errors(responses) -> bool:
    return any(p["error_code"] for t in responses for p in t["partitions"])


async def _wait_and_read(ctx, req, plan, replica_id: int, record_progress: bool):
    partitions = [ctx.broker.partition(topic.name, p.partition) for topic_req, topic, _code in plan if topic
                  for p in topic_req.partitions]
    partitions = [p for p in partitions if p is not None]
    with anyio.move_on_after(req.max_wait_ms / 1000):
        while True:
            event = anyio.Event()
            for partition in partitions:
                partition.add_waiter(event)
            try:
                await event.wait()
            finally:
                for partition in partitions:
                    partition.remove_waiter(event)
            if not record_progress or (replica_id >= 0 and _cut_off(ctx, replica_id)):
                record_progress = False
                continue  # cut off (now or since): sit out the wait, as a lost request would
            responses, total = _read_all(ctx, req, plan, replica_id, record_progress)
            if total >= req.min_bytes or _has_errors(responses):
                return _response(responses)
    responses, _ = _read_all(ctx, req, plan, replica_id, record_progress and not _cut_off(ctx, replica_id))
    return _response(responses)


def _response(responses) -> dict:
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
