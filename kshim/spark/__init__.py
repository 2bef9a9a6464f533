"""kshim.spark: Kafka topics as a PySpark (4.2+) Python data source, batch and streaming.

Spark's own Kafka connector is a JVM package fetched from Maven; this source needs only PyPI
(pyspark, pyarrow, confluent-kafka) and works against any Kafka-protocol broker, kshim or Kafka:

    from kshim.spark import register
    register(spark)                                  # format name "kshim-kafka"
    df = (spark.readStream.format("kshim-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())

Options, columns and offsets follow Spark's Kafka source and sink; see docs/spark.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

try:  # PySpark 4.2 brought admission control and AvailableNow to Python streaming sources
    from kshim.spark.source import FORMAT, KafkaDataSource, kafka_schema
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(f"kshim.spark needs PySpark 4.2+, pyarrow and confluent-kafka: pip install 'kshim[spark]' "
                      f"({exc})") from exc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "KafkaDataSource", "kafka_schema", "register"]


def register(spark: "SparkSession") -> str:
    """Register the data source with a SparkSession; returns its format name, "kshim-kafka"."""
    spark.dataSource.register(KafkaDataSource)
    return FORMAT
