"""Produce: append record batches to partition logs.

- acks must be 0, 1 or -1 (all); anything else gets INVALID_REQUIRED_ACKS for every partition.
- acks=0 gets no response at all (the connection keeps its response order for the others).
- acks=1 answers once the leader appended; acks=all once the records are COMMITTED. On a single
  broker the two coincide: with no followers an appended record is COMMITTED at once.
- Each partition succeeds or fails on its own. Within one partition's records, batches are
  appended one after another and an error stops the rest without rolling back what was appended.
- Batches stay opaque: header read, CRC32C checked, base offset and leader epoch patched in place.
  Bad CRC: CORRUPT_MESSAGE; over max.message.bytes: MESSAGE_TOO_LARGE; idempotence errors:
  OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH; a retried duplicate is acknowledged with
  its original offset.
- Unknown topics are auto-created when the broker allows it; unknown partitions get
  UNKNOWN_TOPIC_OR_PARTITION.
"""
from __future__ import annotations

import logging

from kshim.broker import BrokerError
from kshim.partition import AppendResult
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


async def handle(ctx, req):
    broker = ctx.broker
    acks = req.acks
    responses = []
    for topic_data in req.topic_data:
        name = topic_data.name
        partitions = []
        try:
            topic = broker.topics.get(name) or broker.auto_create(name)
            topic_error = ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except BrokerError as e:
            topic, topic_error = None, e.code
        for pd in topic_data.partition_data:
            if acks not in (0, 1, -1):
                result = AppendResult(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}")
                partitions.append(_partition_response(pd.index, result, -1))
                continue
            partition = broker.partition(name, pd.index) if topic else None
            if partition is None:
                result = AppendResult(topic_error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                partitions.append(_partition_response(pd.index, result, -1))
                continue
            result = partition.append(pd.records)
            if result.error:
                log.info("produce to %s-%d failed: %s %s", name, pd.index, result.error.name, result.message or "")
            partitions.append(_partition_response(pd.index, result, partition.log_start_offset))
        responses.append({"name": name, "partition_responses": partitions})
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}
