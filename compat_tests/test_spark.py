"""PySpark against a real kshim process through kshim.spark (the "kshim-kafka" Python data source).

One local SparkSession (local[2], 127.0.0.1 only) serves the whole module; input is produced and
output checked with confluent-kafka, independently of the data source under test. Streaming
queries run with Trigger.AvailableNow and every wait on them has a deadline.

PySpark (4.2+) and pyarrow come with the extra `kshim[spark]`; without them every test here fails
with that message rather than being skipped.
"""
from __future__ import annotations

import importlib.util
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

try:
    from pyspark.sql import Row
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

    from kshim.spark import FORMAT, kafka_schema, register
    from kshim.spark import offsets as spark_offsets
    from kshim.spark.options import ReadOptions, WriteOptions
    SPARK_MISSING = None
except ImportError as exc:  # fail every test with the reason, never skip silently
    SPARK_MISSING = f"PySpark is not installed: pip install '.[spark]' ({exc})"

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 15.0         # seconds, for one client operation
QUERY_TIMEOUT = 180.0  # seconds, for one AvailableNow query run
PAGES = ("/", "/pricing", "/docs")
T0_MS = 1_700_000_040_000  # a minute boundary: 2023-11-14T22:14:00Z (event times inside click events)
NOW_MS = int(time.time() * 1000)  # record timestamps: recent, or retention.ms would delete the records


@pytest.fixture(autouse=True)
def _needs_pyspark():
    if SPARK_MISSING:
        pytest.fail(SPARK_MISSING)


@pytest.fixture(scope="module")
def clickstream():
    """examples/clickstream.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("clickstream", ROOT / "examples" / "clickstream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spark(clickstream):
    if SPARK_MISSING:
        pytest.fail(SPARK_MISSING)
    from pyspark import SparkContext

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYSPARK_PYTHON", __import__("sys").executable)
        env.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        session = clickstream.local_session("kshim-compat-tests")
        gateway = SparkContext._gateway
        register(session)
        try:
            yield session
        finally:
            session.stop()
            # the JVM pyspark launched for this module: stop it by its PID, then forget it
            proc = getattr(gateway, "proc", None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
            SparkContext._gateway = None
            SparkContext._jvm = None


# -- helpers ---------------------------------------------------------------------------------------

def produce(bootstrap: str, topic: str, records: list[dict], **conf) -> None:
    """Produce records (dicts of produce() kwargs) with acks=all; every one must be delivered."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3, **conf})
    errors: list = []
    for rec in records:
        producer.produce(topic, on_delivery=lambda err, _m: err and errors.append(err), **rec)
    assert producer.flush(TIMEOUT) == 0, "records undelivered at the deadline"
    assert errors == []


def create_topic(bootstrap: str, topic: str, partitions: int = 3, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)])
    futures[topic].result(TIMEOUT)


def read_topic(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list:
    """Every record of every partition below its end (HWM, or LSO for read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "log_level": 3})
    try:
        meta = consumer.list_topics(topic, timeout=TIMEOUT).topics[topic]
        tps = [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(tps)
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=TIMEOUT, cached=False)[1] for tp in tps}
        done = {p for p, end in ends.items() if end == 0}
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(done) < len(tps):
            assert time.monotonic() < deadline, f"reading {topic}: partitions {set(ends) - done} not at their end"
            for msg in consumer.consume(100, 0.5):
                if msg.error():
                    assert msg.error().code() == msg.error()._PARTITION_EOF, msg.error()
                    if msg.offset() >= ends[msg.partition()]:
                        done.add(msg.partition())
                    continue
                got.append(msg)
        return sorted(got, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def run_available_now(query) -> list[dict]:
    """Wait for an AvailableNow query to finish; returns its progress reports."""
    if not query.awaitTermination(QUERY_TIMEOUT):
        query.stop()
        pytest.fail(f"the query did not finish within {QUERY_TIMEOUT}s")
    assert query.exception() is None, query.exception()
    return query.recentProgress


def clicks(first: int, count: int) -> list[dict]:
    """Click events i = first..first+count-1, 13 s apart: several per one-minute window."""
    return [{"user": f"u{i % 4}", "page": PAGES[i % len(PAGES)], "ts": T0_MS + i * 13_000}
            for i in range(first, first + count)]


def expected_counts(events: list[dict]) -> dict[str, dict]:
    windows = Counter((e["page"], e["ts"] - e["ts"] % 60_000) for e in events)
    return {f"{page}|{start}": {"page": page, "window_start_ms": start, "window_end_ms": start + 60_000,
                                "clicks": n} for (page, start), n in windows.items()}


def latest_per_key(messages) -> dict[str, dict]:
    latest = {}
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        latest[msg.key().decode()] = json.loads(msg.value())
    return latest


# -- the example pipeline --------------------------------------------------------------------------

def test_clickstream_pipeline_counts_then_resumes_from_its_checkpoint(spark, clickstream, kshim, tmp_path,
                                                                      topic_name):
    clicks_topic, counts_topic = f"{topic_name}-clicks", f"{topic_name}-counts"
    checkpoint = str(tmp_path / "checkpoint")
    first, more = clicks(0, 30), clicks(30, 14)  # `more` also lands in the last window of `first`
    produce(kshim.bootstrap, clicks_topic, [{"key": e["user"], "value": json.dumps(e)} for e in first])

    progress = run_available_now(clickstream.start_pipeline(
        spark, kshim.bootstrap, clicks_topic, counts_topic, checkpoint))
    assert sum(p["numInputRows"] for p in progress) == len(first)
    written = read_topic(kshim.bootstrap, counts_topic)
    assert latest_per_key(written) == expected_counts(first)
    assert len(written) == len(expected_counts(first))  # one micro-batch, complete mode: each window once

    # a restarted query resumes at the checkpointed offsets, with the checkpointed counts
    produce(kshim.bootstrap, clicks_topic, [{"key": e["user"], "value": json.dumps(e)} for e in more])
    progress = run_available_now(clickstream.start_pipeline(
        spark, kshim.bootstrap, clicks_topic, counts_topic, checkpoint))
    assert sum(p["numInputRows"] for p in progress) == len(more)
    rewritten = read_topic(kshim.bootstrap, counts_topic)
    assert len(rewritten) == len(written) + len(expected_counts(first + more))
    assert latest_per_key(rewritten) == expected_counts(first + more)

    # nothing new: a third run reads nothing and writes nothing
    progress = run_available_now(clickstream.start_pipeline(
        spark, kshim.bootstrap, clicks_topic, counts_topic, checkpoint))
    assert sum(p["numInputRows"] for p in progress) == 0
    assert len(read_topic(kshim.bootstrap, counts_topic)) == len(rewritten)


def test_clickstream_command_seeds_and_runs(spark, clickstream, kshim, tmp_path, topic_name, capsys):
    clicks_topic, counts_topic = f"{topic_name}-clicks", f"{topic_name}-counts"
    argv = ["--bootstrap", kshim.bootstrap, "--clicks-topic", clicks_topic, "--counts-topic", counts_topic,
            "--checkpoint", str(tmp_path / "checkpoint"), "--max-offsets-per-trigger", "25"]

    assert clickstream.main([*argv, "--seed", "40"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "seeded 40 click events" in out and "processed 40 click events in 2 micro-batches" in out
    assert latest_per_key(read_topic(kshim.bootstrap, counts_topic)) == \
        expected_counts([clickstream.click_event(i) for i in range(40)])

    assert clickstream.main([*argv, "--seed", "10"], spark=spark) == 0
    out = capsys.readouterr().out
    assert "seeded 10 click events" in out and "processed 10 click events in 1 micro-batch " in out
    assert latest_per_key(read_topic(kshim.bootstrap, counts_topic)) == \
        expected_counts([clickstream.click_event(i) for i in range(50)])


# -- reading ---------------------------------------------------------------------------------------

def test_batch_read_offset_ranges_columns_and_headers(spark, kshim, topic_name):
    records = []
    for p in range(3):
        for i in range(4):
            records.append({"partition": p, "key": f"k{p}{i}", "value": f"v{p}{i}", "timestamp": NOW_MS + 10 * p + i,
                            "headers": [("h1", b"x"), ("h2", None)] if i == 1 else None})
    produce(kshim.bootstrap, topic_name, records)

    df = (spark.read.format(FORMAT)
          .option("kafka.bootstrap.servers", kshim.bootstrap)
          .option("subscribe", topic_name)
          .option("includeHeaders", "true")
          .option("startingOffsets", json.dumps({topic_name: {"0": 1, "1": -2, "2": 3}}))
          .option("endingOffsets", json.dumps({topic_name: {"0": 3, "1": -1, "2": 4}}))
          .load())
    assert df.schema == kafka_schema(include_headers=True)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]

    got = sorted(
        (bytes(r.key).decode(), bytes(r.value).decode(), r.topic, r.partition, r.offset,
         round(r.timestamp.timestamp() * 1000), r.timestampType,
         None if r.headers is None else [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers])
        for r in df.collect())
    wanted = [(f"k{p}{i}", f"v{p}{i}", topic_name, p, i, NOW_MS + 10 * p + i, 0,
               [("h1", b"x"), ("h2", None)] if i == 1 else None)
              for p, i in [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (2, 3)]]
    assert got == wanted

    # without includeHeaders: Spark's seven columns; default offsets earliest..latest
    plain = spark.read.format(FORMAT).option("kafka.bootstrap.servers", kshim.bootstrap) \
        .option("subscribe", topic_name).load()
    assert plain.schema == kafka_schema(include_headers=False)
    assert plain.count() == 12


def test_batch_read_refuses_offsets_missing_a_partition(spark, kshim, topic_name):
    produce(kshim.bootstrap, topic_name, [{"partition": p, "value": b"x"} for p in range(3)])
    with pytest.raises(Exception, match="missing"):
        (spark.read.format(FORMAT).option("kafka.bootstrap.servers", kshim.bootstrap)
         .option("subscribe", topic_name)
         .option("startingOffsets", json.dumps({topic_name: {"0": 0}})).load().collect())


def test_max_offsets_per_trigger_splits_an_available_now_run(spark, kshim, tmp_path, topic_name):
    produce(kshim.bootstrap, topic_name,
            [{"partition": 0, "value": f"a{i}"} for i in range(12)]
            + [{"partition": 1, "value": f"b{i}"} for i in range(6)])
    sink = f"sink_{uuid.uuid4().hex[:8]}"
    query = (spark.readStream.format(FORMAT)
             .option("kafka.bootstrap.servers", kshim.bootstrap)
             .option("subscribe", topic_name)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "5")
             .load()
             .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
             .writeStream.format("memory").queryName(sink)
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    progress = run_available_now(query)
    assert [p["numInputRows"] for p in progress] == [5, 5, 5, 3]
    # the checkpointed offsets are Spark-Kafka-style JSON
    assert json.loads(progress[-1]["sources"][0]["endOffset"]) == {topic_name: {"0": 12, "1": 6, "2": 0}}
    rows = spark.sql(f"SELECT value, partition, offset FROM {sink}").collect()
    assert sorted((r.partition, r.offset, r.value) for r in rows) == \
        [(0, i, f"a{i}") for i in range(12)] + [(1, i, f"b{i}") for i in range(6)]


def test_isolation_levels_with_a_transactional_producer(spark, fresh_kshim, tmp_path, topic_name):
    bootstrap = fresh_kshim.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic_name}", "log_level": 3})
    producer.init_transactions(TIMEOUT)

    def transaction(prefix: str, n: int, outcome: str | None) -> None:
        producer.begin_transaction()
        for i in range(n):
            producer.produce(topic_name, value=f"{prefix}{i}", partition=i % 2)
        # on the broker before the outcome: abort_transaction() would drop records still queued
        assert producer.flush(TIMEOUT) == 0
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT)
        elif outcome == "abort":
            producer.abort_transaction(TIMEOUT)  # else left open

    transaction("c", 5, "commit")
    transaction("a", 3, "abort")
    transaction("d", 4, "commit")
    transaction("o", 2, None)  # open: read_committed must stop at the last stable offset, not hang
    committed = sorted([f"c{i}" for i in range(5)] + [f"d{i}" for i in range(4)])

    def batch(isolation: str) -> list[str]:
        return sorted(r.value for r in spark.read.format(FORMAT)
                      .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic_name)
                      .option("kafka.isolation.level", isolation).option("kafkaConsumer.pollTimeoutMs", "20000")
                      .load().selectExpr("CAST(value AS STRING) AS value").collect())

    assert batch("read_committed") == committed
    assert batch("read_uncommitted") == sorted(committed + [f"a{i}" for i in range(3)] + ["o0", "o1"])

    # a streaming query (file sink: it restarts from its checkpoint) reads up to the LSO, then on
    # once the open transaction commits
    out = str(tmp_path / "out")

    def stream_committed() -> list[dict]:
        return run_available_now(
            spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic_name).option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed").option("kafkaConsumer.pollTimeoutMs", "20000")
            .load().selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())

    assert sum(p["numInputRows"] for p in stream_committed()) == len(committed)
    assert sorted(r.value for r in spark.read.parquet(out).collect()) == committed
    producer.commit_transaction(TIMEOUT)  # the open one: its records become readable
    assert sum(p["numInputRows"] for p in stream_committed()) == 2
    assert sorted(r.value for r in spark.read.parquet(out).collect()) == sorted(committed + ["o0", "o1"])
    producer.close()


# -- writing ---------------------------------------------------------------------------------------

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])) \
    if SPARK_MISSING is None else None


def test_batch_write_takes_the_kafka_sink_columns(spark, kshim, topic_name):
    other = f"{topic_name}-other"
    schema = StructType([StructField("topic", StringType()), StructField("key", StringType()),
                         StructField("value", BinaryType()), StructField("partition", IntegerType()),
                         StructField("headers", HEADERS)])
    rows = [(topic_name, "k1", b"v1", 2, [Row(key="h", value=b"1")]),
            (topic_name, None, b"v2", 0, None),
            (other, "k3", b"v3", 1, [Row(key="a", value=None), Row(key="b", value=b"2")])]
    spark.createDataFrame(rows, schema).write.format(FORMAT) \
        .option("kafka.bootstrap.servers", kshim.bootstrap).mode("append").save()

    got = [(m.partition(), m.key(), m.value(), m.headers()) for m in read_topic(kshim.bootstrap, topic_name)]
    assert got == [(0, None, b"v2", None), (2, b"k1", b"v1", [("h", b"1")])]
    got = [(m.partition(), m.key(), m.value(), m.headers()) for m in read_topic(kshim.bootstrap, other)]
    assert got == [(1, b"k3", b"v3", [("a", None), ("b", b"2")])]

    # the topic option overrides the topic column; string values are written as UTF-8
    third = f"{topic_name}-third"
    spark.createDataFrame([(other, "k", "ünïcode")], "topic string, key string, value string").write \
        .format(FORMAT).option("kafka.bootstrap.servers", kshim.bootstrap).option("topic", third) \
        .mode("append").save()
    assert [(m.key(), m.value()) for m in read_topic(kshim.bootstrap, third)] == [(b"k", "ünïcode".encode())]


def test_write_fails_the_task_when_the_broker_refuses_a_record(spark, kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, **{"max.message.bytes": "1024"})
    df = spark.createDataFrame([("small",), ("x" * 4096,)], "value string")
    with pytest.raises(Exception, match="(?i)too large"):
        df.write.format(FORMAT).option("kafka.bootstrap.servers", kshim.bootstrap) \
            .option("topic", topic_name).mode("append").save()


def test_writer_refuses_a_frame_without_a_value_or_topic(spark, kshim, topic_name):
    with pytest.raises(Exception, match="value column"):
        spark.createDataFrame([("k",)], "key string").write.format(FORMAT) \
            .option("kafka.bootstrap.servers", kshim.bootstrap).option("topic", topic_name).mode("append").save()
    with pytest.raises(Exception, match="no topic"):
        spark.createDataFrame([("v",)], "value string").write.format(FORMAT) \
            .option("kafka.bootstrap.servers", kshim.bootstrap).mode("append").save()


# -- options and offsets (no Spark job) -------------------------------------------------------------

def test_rate_limit_splits_the_budget_in_proportion_and_never_exceeds_it():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    end = {("t", 0): 90, ("t", 1): 130, ("t", 2): 7}
    limited = spark_offsets.rate_limit(start, end, 10)
    assert sum(limited[tp] - start[tp] for tp in start) == 10
    assert limited == {("t", 0): 8, ("t", 1): 102, ("t", 2): 7}  # 90:30 lag -> 7.5 : 2.5, largest fractions first
    assert spark_offsets.rate_limit(start, end, 1000) == end
    assert spark_offsets.rate_limit(start, end, 1) == {("t", 0): 1, ("t", 1): 100, ("t", 2): 7}


def test_offsets_json_is_sparks_shape_and_normalized():
    offsets = {("b", 10): 5, ("b", 2): 1, ("a", 0): 3}
    assert json.dumps(spark_offsets.to_json(offsets)) == '{"a": {"0": 3}, "b": {"2": 1, "10": 5}}'
    assert spark_offsets.from_json(spark_offsets.to_json(offsets)) == offsets
    assert spark_offsets.resolve({"t": {"0": -2, "1": -1, "2": 4}}, [("t", 0), ("t", 1), ("t", 2)],
                                 {("t", 0): 1, ("t", 1): 0, ("t", 2): 0}, {("t", 0): 9, ("t", 1): 8, ("t", 2): 9},
                                 "startingOffsets") == {("t", 0): 1, ("t", 1): 8, ("t", 2): 4}


def test_options_follow_sparks_kafka_source_rules():
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a, b,a"}
    opts = ReadOptions.parse({**base, "kafka.isolation.level": "read_committed", "kafka.client.id": "x",
                              "maxOffsetsPerTrigger": "7"}, streaming=True)
    assert opts.topics == ("a", "b") and opts.starting == "latest" and opts.max_offsets_per_trigger == 7
    assert opts.consumer_config()["isolation.level"] == "read_committed"
    assert opts.consumer_config()["client.id"] == "x" and opts.consumer_config()["enable.auto.commit"] is False
    assert ReadOptions.parse(base, streaming=False).isolation_level == "read_uncommitted"  # Spark's default
    bad = [
        ({**base, "startingOffsets": "latest"}, False, "not allowed for batch"),
        ({**base, "endingOffsets": "earliest"}, False, "not allowed for batch"),
        ({**base, "kafka.auto.offset.reset": "earliest"}, True, "startingOffsets"),
        ({**base, "kafka.isolation.level": "serializable"}, True, "isolation.level"),
        ({**base, "assign": '{"a": [0]}'}, True, "exactly one"),
        ({"subscribe": "a"}, True, "bootstrap.servers"),
        ({**base, "startingOffsets": "{not json"}, True, "startingOffsets"),
    ]
    for options, streaming, message in bad:
        with pytest.raises(ValueError, match=message):
            ReadOptions.parse(options, streaming=streaming)
    assert WriteOptions.parse({"kafka.bootstrap.servers": "h:1"}).producer_config()["acks"] == "all"
    assert WriteOptions.parse({"kafka.bootstrap.servers": "h:1", "kafka.acks": "1"}).producer_config()["acks"] == "1"
