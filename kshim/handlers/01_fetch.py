"""Fetch: whole record batches from partition logs, long-polling for data.

- Fetch sessions (KIP-227) are declined: every response carries session_id 0, so clients keep
  sending full fetch requests.
- Reads are bounded per isolation level: read_committed up to the last stable offset (the high
  watermark until transactions exist), read_uncommitted up to the log end offset.
- Returns whole batches; a fetch at an offset inside a batch returns that batch (clients skip the
  records before their offset). The first batch found is returned even if it exceeds max_bytes or
  partition_max_bytes (KIP-74), so a large batch can never stall a consumer; after that, a
  partition stops at its partition_max_bytes and the response at max_bytes.
- If fewer than min_bytes are ready, the request waits on an append event (no polling) until data
  arrives or max_wait_ms passes, then reads again. It never waits past max_wait_ms.
- OFFSET_OUT_OF_RANGE below the log start or above the log end; UNKNOWN_TOPIC_OR_PARTITION (by
  name, v4-12) or UNKNOWN_TOPIC_ID (v13+); current_leader_epoch newer than ours is
  UNKNOWN_LEADER_EPOCH, older is FENCED_LEADER_EPOCH.
"""
from __future__ import annotations

import anyio

from kshim.partition import OffsetOutOfRange
from wire.errors import ErrorCode

API_KEY = 1
VERSIONS = (4, 17)


def _resolve(ctx, topic_req):
    broker = ctx.broker
    if ctx.version >= 13:
        topic = broker.topics_by_id.get(topic_req.topic_id)
        return topic, ErrorCode.UNKNOWN_TOPIC_ID
    return broker.topics.get(topic_req.topic), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _read_all(ctx, req, plan) -> tuple[list[dict], int]:
    """One pass over every requested partition; returns (topic responses, bytes of records)."""
    budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    responses = []
    for topic_req, topic, missing_code in plan:
        parts = []
        for p in topic_req.partitions:
            entry = {"partition_index": p.partition, "error_code": ErrorCode.NONE, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "records": b"",
                     "aborted_transactions": [] if req.isolation_level == 1 else None}
            partition = topic.partitions[p.partition] if topic and 0 <= p.partition < len(topic.partitions) else None
            if partition is None:
                entry["error_code"] = missing_code if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(entry)
                continue
            entry["high_watermark"] = partition.high_watermark
            entry["last_stable_offset"] = partition.last_stable_offset
            entry["log_start_offset"] = partition.log_start_offset
            epoch = p.get("current_leader_epoch", -1)
            if epoch >= 0 and epoch != partition.leader_epoch:
                entry["error_code"] = (ErrorCode.UNKNOWN_LEADER_EPOCH if epoch > partition.leader_epoch
                                       else ErrorCode.FENCED_LEADER_EPOCH)
                parts.append(entry)
                continue
            limit = min(p.partition_max_bytes, budget - total)
            if limit <= 0 and total > 0:
                parts.append(entry)  # response is full: this partition gets no data this time
                continue
            try:
                data = partition.read(p.fetch_offset, max(limit, 1), req.isolation_level)
            except OffsetOutOfRange:
                entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                parts.append(entry)
                continue
            entry["records"] = data
            total += len(data)
            parts.append(entry)
        responses.append({"topic": topic_req.get("topic"), "topic_id": topic_req.get("topic_id"), "partitions": parts})
    return responses, total


async def handle(ctx, req):
    plan = []
    for topic_req in req.topics:
        topic, missing_code = _resolve(ctx, topic_req)
        plan.append((topic_req, topic, missing_code))
    responses, total = _read_all(ctx, req, plan)
    if total >= req.min_bytes or req.max_wait_ms <= 0 or _has_errors(responses):
        return _response(responses)
    return _wait_and_read(ctx, req, plan)


def _has_errors(responses) -> bool:
    return any(p["error_code"] for t in responses for p in t["partitions"])


async def _wait_and_read(ctx, req, plan):
    partitions = [topic.partitions[p.partition] for topic_req, topic, _code in plan if topic
                  for p in topic_req.partitions if 0 <= p.partition < len(topic.partitions)]
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
            responses, total = _read_all(ctx, req, plan)
            if total >= req.min_bytes or _has_errors(responses):
                return _response(responses)
    responses, _ = _read_all(ctx, req, plan)
    return _response(responses)


def _response(responses) -> dict:
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}
