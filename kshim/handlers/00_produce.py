"""Produce: append record batches to the partition leaders' logs.

- acks must be 0, 1 or -1 (all); anything else gets INVALID_REQUIRED_ACKS for every partition.
- acks=0 gets no response at all (the connection keeps its response order for the others); if
  any partition failed, the connection is closed instead, as Kafka does: that is the only way an
  acks=0 producer learns to refresh its metadata (after a leader moved, say).
- acks=1 answers once the leader appended.
- acks=all: NOT_ENOUGH_REPLICAS (19) without appending when the ISR is smaller than
  min.insync.replicas; otherwise it answers once the high watermark covers the records
  (COMMITTED), waiting on an event while the connection goes on with later requests. At the
  request timeout it answers REQUEST_TIMED_OUT (7) and keeps the records: the outcome is unknown,
  they may still be committed and delivered. If the ISR fell below min.insync.replicas while
  waiting it answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (20); if this broker stopped leading,
  NOT_LEADER_OR_FOLLOWER.
- Each partition succeeds or fails on its own. Within one partition's records, batches are
  appended one after another and an error stops the rest without rolling back what was appended.
- Batches stay opaque: header read, CRC32C checked, base offset and leader epoch patched in place.
  Bad CRC: CORRUPT_MESSAGE; over max.message.bytes: MESSAGE_TOO_LARGE; idempotence errors:
  OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH; a retried duplicate is acknowledged with
  its original offset.
- Unknown topics are auto-created when the broker allows it; a partition this broker does not
  lead gets NOT_LEADER_OR_FOLLOWER, and the client finds the leader through Metadata.
"""
from __future__ import annotations

import logging

from kshim.clock import SYSTEM
from kshim.errors import BrokerError
from kshim.partition import AppendResult
from kshim.protocol import ProtocolError
from wire.errors import ErrorCode

API_KEY = 0
VERSIONS = (3, 11)

log = logging.getLogger("kshim.produce")


def _partition_response(index: int, result: AppendResult, log_start_offset: int) -> dict:
    return {
        "index": index,
        "error_code": result.error,
        "base_offset": result.base_offset if result.error == ErrorCode.NONE else -1,
        "log_append_time_ms": result.log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": result.message,
    }


def _failed(index: int, code: ErrorCode, message: str | None = None) -> dict:
    return _partition_response(index, AppendResult(code, message), -1)


async def handle(ctx, req):
    broker = ctx.broker
    acks = req.acks
    responses = []
    waits = []  # (response entry, partition, last offset) for acks=all
    for topic_data in req.topic_data:
        name = topic_data.name
        partitions = []
        try:
            topic = broker.topics.get(name) or await broker.auto_create(name)
            topic_error = ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except BrokerError as e:
            topic, topic_error = None, e.code
        for pd in topic_data.partition_data:
            if acks not in (0, 1, -1):
                partitions.append(_failed(pd.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}"))
                continue
            if topic is None or not 0 <= pd.index < len(topic.partitions):
                partitions.append(_failed(pd.index, topic_error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partition = broker.partition(name, pd.index)
            if partition is None or not partition.is_leader:
                partitions.append(_failed(pd.index, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                          f"broker {broker.node_id} does not lead {name}-{pd.index}"))
                continue
            if acks == -1 and len(partition.isr) < partition.min_insync_replicas:
                partitions.append(_failed(pd.index, ErrorCode.NOT_ENOUGH_REPLICAS,
                                          f"ISR {list(partition.isr)} is smaller than min.insync.replicas="
                                          f"{partition.min_insync_replicas}"))
                continue
            result = partition.append(pd.records)
            if result.error:
                log.info("produce to %s-%d failed: %s %s", name, pd.index, result.error.name, result.message or "")
            entry = _partition_response(pd.index, result, partition.log_start_offset)
            partitions.append(entry)
            if acks == -1 and result.error == ErrorCode.NONE and result.last_offset >= 0:
                waits.append((entry, partition, result.last_offset))
        responses.append({"name": name, "partition_responses": partitions})
    if acks == 0:
        failed = [(t["name"], p["index"], p["error_code"]) for t in responses for p in t["partition_responses"]
                  if p["error_code"]]
        if failed:
            raise ProtocolError(f"acks=0 produce failed for {failed[:3]}: closing so the producer refreshes metadata")
        return None
    response = {"responses": responses, "throttle_time_ms": 0}
    if not waits:
        return response
    return _await_commit(response, waits, req.timeout_ms / 1000)


async def _await_commit(response: dict, waits: list, timeout_s: float) -> dict:
    """acks=all: hold the answer until each partition's records are COMMITTED or time runs out."""
    deadline = SYSTEM.monotonic() + max(timeout_s, 0)
    for entry, partition, last_offset in waits:
        committed = await partition.wait_committed(last_offset, max(deadline - SYSTEM.monotonic(), 0))
        if committed and len(partition.isr) < partition.min_insync_replicas:
            code, message = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
                f"appended, but the ISR {list(partition.isr)} fell below min.insync.replicas="
                f"{partition.min_insync_replicas}")
        elif committed:
            continue
        elif not partition.is_leader:
            code, message = ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership moved before the records were committed"
        else:
            code, message = ErrorCode.REQUEST_TIMED_OUT, (
                "not all in-sync replicas had the records before the timeout; they may still be committed")
        entry["error_code"], entry["error_message"], entry["base_offset"] = code, message, -1
    return response
