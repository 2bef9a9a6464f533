"""Executor side: read one partition's offset range [start, end) into Arrow record batches.

The range end is exclusive and was taken on the driver (the high watermark, or under
read_committed the last stable offset). Under read_committed a range holds offsets that are never
delivered: records of aborted transactions and transaction markers. So the read ends when the
consumer's position passes the end, never after a count of records:

- a record at or past the end (the next record after a gap) ends it;
- an end-of-partition event at or past the end ends it (librdkafka reports the offset it reached,
  which moves past markers and aborted records that were never delivered);
- position() at or past the end ends it.

Every wait is bounded: no progress for kafkaConsumer.pollTimeoutMs fails the task, as in Spark.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from pyspark.sql.datasource import InputPartition

from kshim.spark.options import ReadOptions

ROWS_PER_BATCH = 10_000
POLL_STEP_S = 0.5  # one consume() call; the progress deadline is checked between calls

_HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))
_BASE_FIELDS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]

# librdkafka's timestamp types -> Kafka's TimestampType ids, which Spark's source reports
_TIMESTAMP_TYPE = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}

# client-wide trouble the consumer recovers from by itself (a broker restarting, a leader moving)
_TRANSIENT = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT}


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka schema, as Spark expects batches from a Python source."""
    return pa.schema(_BASE_FIELDS + ([("headers", _HEADERS)] if include_headers else []))


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: one Kafka partition's offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int


class _Columns:
    def __init__(self, include_headers: bool) -> None:
        self.schema = arrow_schema(include_headers)
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.cols: list[list] = [[] for _ in self.schema]

    def __len__(self) -> int:
        return len(self.cols[0])

    def add(self, msg) -> None:
        ts_type, ts_ms = msg.timestamp()
        row = [msg.key(), msg.value(), msg.topic(), msg.partition(), msg.offset(),
               ts_ms * 1000, _TIMESTAMP_TYPE.get(ts_type, -1)]
        if self.include_headers:
            headers = msg.headers()
            # Spark's source gives null, not an empty array, for a record without headers
            row.append([{"key": k, "value": v} for k, v in headers] if headers else None)
        for col, value in zip(self.cols, row):
            col.append(value)

    def take(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(self.cols, self.schema)], schema=self.schema)
        self.clear()
        return batch


def read_range(opts: ReadOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    if rng.end <= rng.start:
        return
    consumer = Consumer(opts.consumer_config())
    tp = TopicPartition(rng.topic, rng.partition)
    columns = _Columns(opts.include_headers)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        reached = rng.start  # the offset the read has provably passed
        deadline = time.monotonic() + opts.poll_timeout_s
        while reached < rng.end:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"no progress reading {rng.topic}-{rng.partition} offsets [{rng.start}, {rng.end}) for "
                    f"{opts.poll_timeout_s:g}s; stuck at offset {reached} (option kafkaConsumer.pollTimeoutMs)")
            before = reached
            # consume() waits until it has num_messages or the timeout passed: ask for no more than
            # the range can still hold, so a range without gaps returns as soon as it is complete
            want = min(ROWS_PER_BATCH, rng.end - reached)
            for msg in consumer.consume(num_messages=want, timeout=min(POLL_STEP_S, left)):
                err = msg.error()
                offset = msg.offset()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        reached = max(reached, offset if offset is not None else reached)
                        if not opts.fail_on_data_loss:
                            reached = rng.end  # the partition ends short of the range: accept the loss
                        continue
                    if err.code() in _TRANSIENT or (err.retriable() and not err.fatal()):
                        continue  # the client reconnects and retries; the deadline bounds it
                    raise KafkaException(err)
                assert offset is not None  # a record always has its offset
                if offset >= rng.end:
                    reached = max(reached, offset)
                    break
                columns.add(msg)
                reached = max(reached, offset + 1)
            if reached < rng.end:
                position = consumer.position([tp])[0].offset
                if position >= 0:
                    reached = max(reached, position)
            if reached > before:
                deadline = time.monotonic() + opts.poll_timeout_s
            if len(columns) >= ROWS_PER_BATCH:
                yield columns.take()
        if len(columns):
            yield columns.take()
    finally:
        try:
            consumer.close()
        except KafkaException:
            pass  # close() can re-raise an error already handled or raised above; do not mask that
