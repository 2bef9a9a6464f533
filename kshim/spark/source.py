"""The data source Spark instantiates: the schema, and readers and writers built from options."""
from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kshim.spark.options import ReadOptions, WriteOptions, include_headers
from kshim.spark.reader import KafkaBatchReader, KafkaStreamReader
from kshim.spark.writer import KafkaBatchWriter, KafkaStreamWriter, SinkColumns

FORMAT = "kshim-kafka"

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (headers only with includeHeaders=true, as in Spark)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class KafkaDataSource(DataSource):
    """Kafka topics of any Kafka-protocol broker (kshim or Kafka) as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return kafka_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        if overwrite:
            # Spark's Kafka sink allows only append and errorifexists: a topic cannot be replaced
            raise ValueError("save mode overwrite is not supported for Kafka; use append")
        opts = WriteOptions.parse(self.options)
        return KafkaBatchWriter(opts, SinkColumns.of(schema, opts.topic))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        # complete output mode asks to overwrite; Kafka can only append the batch (as Spark's sink does)
        opts = WriteOptions.parse(self.options)
        return KafkaStreamWriter(opts, SinkColumns.of(schema, opts.topic))
