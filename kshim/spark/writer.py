"""Batch and streaming writers: the columns Spark's Kafka sink takes, produced with confluent-kafka.

Columns: value (required, string or binary), key (string or binary), topic (string; the topic
option overrides it), partition (int; null lets the producer's partitioner choose), headers
(array<struct<key: string, value: binary>>). Each task produces its rows, flushes, and fails if
any record was not acknowledged (acks from the option kafka.acks, default all). Like Spark's own
sink this is at-least-once: a retried task or micro-batch may write some records twice.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kshim.spark.options import WriteOptions

_STRING_OR_BINARY = (StringType, BinaryType)


@dataclass
class Written(WriterCommitMessage):
    records: int


@dataclass(frozen=True)
class SinkColumns:
    """Where each sink column sits in a row (None: absent)."""

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None

    @classmethod
    def of(cls, schema: StructType, topic_option: str | None) -> "SinkColumns":
        index = {f.name.lower(): i for i, f in enumerate(schema.fields)}
        types = {f.name.lower(): f.dataType for f in schema.fields}

        def check(name: str, allowed: tuple, what: str) -> int | None:
            if name not in index:
                return None
            if not isinstance(types[name], allowed):
                raise ValueError(f"column {name} must be {what}, not {types[name].simpleString()}")
            return index[name]

        value = check("value", _STRING_OR_BINARY, "string or binary")
        if value is None:
            raise ValueError("the Kafka sink needs a value column (string or binary)")
        topic = check("topic", (StringType,), "string")
        if topic is None and topic_option is None:
            raise ValueError("no topic: set the option topic or add a topic column (string)")
        headers = check("headers", (ArrayType,), "array<struct<key: string, value: binary>>")
        headers_type = types.get("headers")
        if headers is not None and isinstance(headers_type, ArrayType):  # check() made sure it is
            element = headers_type.elementType
            fields = element.fields if isinstance(element, StructType) else []
            if [f.name.lower() for f in fields] != ["key", "value"] or not isinstance(fields[0].dataType, StringType) \
                    or not isinstance(fields[1].dataType, _STRING_OR_BINARY):
                raise ValueError("column headers must be array<struct<key: string, value: binary>>, "
                                 f"not {types['headers'].simpleString()}")
        return cls(value=value, key=check("key", _STRING_OR_BINARY, "string or binary"), topic=topic,
                   partition=check("partition", (IntegerType,), "int"), headers=headers)


def _bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)  # bytearray / memoryview, depending on Spark's binary conversion


def produce_rows(opts: WriteOptions, layout: SinkColumns, rows: Iterator[Row]) -> Written:
    producer = Producer(opts.producer_config())
    failures: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None and len(failures) < 5:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    count = 0
    for row in rows:
        topic = opts.topic or (row[layout.topic] if layout.topic is not None else None)
        if not topic:
            raise ValueError("a row has a null topic; set the option topic or fill the topic column")
        kwargs: dict[str, Any] = {"value": _bytes(row[layout.value]), "on_delivery": delivered}
        if layout.key is not None:
            kwargs["key"] = _bytes(row[layout.key])
        if layout.partition is not None and row[layout.partition] is not None:
            kwargs["partition"] = row[layout.partition]
        if layout.headers is not None and row[layout.headers]:
            kwargs["headers"] = [(h[0], _bytes(h[1])) for h in row[layout.headers]]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
        count += 1
        if failures:
            break  # the task fails anyway; stop producing more
    left = producer.flush(opts.flush_timeout_s)
    if failures:
        raise KafkaException(f"{len(failures)}+ records were not delivered: " + "; ".join(failures))
    if left:
        raise KafkaException(f"{left} records still undelivered after {opts.flush_timeout_s:g}s")
    return Written(count)


class KafkaBatchWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions, layout: SinkColumns) -> None:
        self.opts = opts
        self.layout = layout

    def write(self, iterator: Iterator[Row]) -> Written:
        return produce_rows(self.opts, self.layout, iterator)


class KafkaStreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows are produced and flushed before the batch commits."""

    def __init__(self, opts: WriteOptions, layout: SinkColumns) -> None:
        self.opts = opts
        self.layout = layout

    def write(self, iterator: Iterator[Row]) -> Written:
        return produce_rows(self.opts, self.layout, iterator)
