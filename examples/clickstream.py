"""Click events -> clicks per page per minute -> a results topic: a PySpark Structured Streaming job
against any Kafka-protocol broker, through kshim.spark (no JVM Kafka connector needed).

    kshim serve                                                  # in one shell
    python examples/clickstream.py --bootstrap 127.0.0.1:9092 --seed 1000

Input, topic `clicks`: one JSON event per record, {"user": "user-7", "page": "/pricing", "ts": <epoch ms>},
keyed by user. Output, topic `page-counts`: per (page, one-minute event-time window), keyed
"<page>|<window start ms>", the value {"page", "window_start_ms", "window_end_ms", "clicks"}. The query
runs in complete output mode: each micro-batch writes every window with its running total, so the
latest record of a key is its current count. (Spark's update mode needs a sink capability that
Python data sources do not have in PySpark 4.3; `foreachBatch` with a batch write is the way to
write only the changed windows.)

By default the query runs with Trigger.AvailableNow: it processes what is in the topic, then stops.
Offsets and aggregation state are checkpointed (--checkpoint), so running the command again
processes only records that arrived since, and the counts continue where they stopped. --follow
keeps the query running (a micro-batch every --interval) until Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/login")
BASE_TS_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z; events are spaced from it by their index
WINDOW = "1 minute"
CLICK_SCHEMA = "user STRING, page STRING, ts LONG"


def click_event(index: int) -> dict:
    """The index-th synthetic click: the same every time, so runs are reproducible."""
    rng = random.Random(index)
    return {"user": f"user-{rng.randrange(25)}", "page": rng.choice(PAGES), "ts": BASE_TS_MS + index * 4_000}


def seed_clicks(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> range:
    """Produce `count` new click events after those already in the topic; returns their indexes."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = 0
    meta = admin.list_topics(timeout=timeout).topics.get(topic)
    if meta is not None and meta.error is None:
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "clickstream-seed", "enable.auto.commit": False})
        try:
            for p in meta.partitions:
                low, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
                existing += high - low
        finally:
            probe.close()
    indexes = range(existing, existing + count)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failed.append(err.str())

    for i in indexes:
        event = click_event(i)
        while True:
            try:
                producer.produce(topic, key=event["user"], value=json.dumps(event), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(timeout) or failed:
        raise RuntimeError(f"seeding {topic} failed: {failed[:3] or 'records undelivered at the deadline'}")
    return indexes


def local_session(app_name: str = "kshim-clickstream"):
    """A local SparkSession on 127.0.0.1 whose Python workers use this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # else Spark runs `python3` from PATH
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app_name)
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_pipeline(spark, bootstrap: str, clicks_topic: str, counts_topic: str, checkpoint: str, *,
                   isolation_level: str = "read_committed", max_offsets_per_trigger: int | None = None,
                   follow_interval: str | None = None):
    """Start the streaming query; with follow_interval None it is an AvailableNow run."""
    from pyspark.sql import functions as F

    from kshim.spark import register

    fmt = register(spark)
    reader = (spark.readStream.format(fmt)
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", clicks_topic)
              .option("startingOffsets", "earliest")        # for a new query; a restart resumes
              .option("kafka.isolation.level", isolation_level))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    clicks = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"))
              .select("click.*")
              .where(F.col("page").isNotNull() & F.col("ts").isNotNull())  # skip malformed events
              .withColumn("event_time", F.timestamp_millis("ts")))
    counts = clicks.groupBy(F.window("event_time", WINDOW), "page").agg(F.count("*").alias("clicks"))
    start_ms = F.unix_millis(F.col("window.start"))
    results = counts.select(
        F.concat_ws("|", "page", start_ms.cast("string")).alias("key"),
        F.to_json(F.struct("page", start_ms.alias("window_start_ms"),
                           F.unix_millis(F.col("window.end")).alias("window_end_ms"), "clicks")).alias("value"))
    writer = (results.writeStream.format(fmt)
              .outputMode("complete")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", counts_topic)
              .option("checkpointLocation", checkpoint)
              .queryName("clickstream"))
    if follow_interval:
        writer = writer.trigger(processingTime=follow_interval)
    else:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def current_counts(spark, bootstrap: str, counts_topic: str) -> dict[str, dict]:
    """The results topic read back in batch: the latest value of each key."""
    from kshim.spark import register

    rows = (spark.read.format(register(spark))
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", counts_topic)
            .load()
            .select("key", "value", "partition", "offset")
            .collect())
    latest: dict[str, tuple[tuple[int, int], dict]] = {}
    for row in rows:
        key = bytes(row.key).decode()
        if key not in latest or (row.partition, row.offset) > latest[key][0]:
            latest[key] = ((row.partition, row.offset), json.loads(bytes(row.value)))
    return {key: value for key, (_, value) in latest.items()}


def main(argv: list[str] | None = None, spark=None) -> int:
    """The command; `spark` lets a caller (a test) lend its own session, which is then not stopped."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--clicks-topic", default="clicks")
    parser.add_argument("--counts-topic", default="page-counts")
    parser.add_argument("--checkpoint", default="./clickstream-checkpoint",
                        help="offsets and aggregation state; delete it to start over")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="first produce N new click events")
    parser.add_argument("--isolation-level", default="read_committed", choices=("read_committed", "read_uncommitted"))
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--follow", action="store_true", help="keep running until Ctrl-C")
    parser.add_argument("--interval", default="5 seconds", help="micro-batch interval with --follow")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds an AvailableNow run may take")
    args = parser.parse_args(argv)

    if args.seed:
        seeded = seed_clicks(args.bootstrap, args.clicks_topic, args.seed)
        print(f"seeded {len(seeded)} click events into {args.clicks_topic} (events {seeded.start}..{seeded.stop - 1})")

    own_session = spark is None
    spark = spark or local_session()
    try:
        query = start_pipeline(spark, args.bootstrap, args.clicks_topic, args.counts_topic, args.checkpoint,
                               isolation_level=args.isolation_level,
                               max_offsets_per_trigger=args.max_offsets_per_trigger,
                               follow_interval=args.interval if args.follow else None)
        started = time.monotonic()
        try:
            if args.follow:
                print("running; Ctrl-C stops the query (its checkpoint keeps the progress)")
                query.awaitTermination()
            elif not query.awaitTermination(args.timeout):
                query.stop()
                print(f"the query did not finish within {args.timeout:g}s", file=sys.stderr)
                return 1
        except KeyboardInterrupt:
            query.stop()
        if query.exception() is not None:
            print(f"the query failed: {query.exception()}", file=sys.stderr)
            return 1
        processed = sum(p["numInputRows"] for p in query.recentProgress)
        batches = len(query.recentProgress)
        print(f"processed {processed} click events in {batches} micro-batch{'es' if batches != 1 else ''} "
              f"({time.monotonic() - started:.1f}s)")

        counts = current_counts(spark, args.bootstrap, args.counts_topic)
        per_page: dict[str, int] = {}
        for value in counts.values():
            per_page[value["page"]] = per_page.get(value["page"], 0) + value["clicks"]
        print(f"{args.counts_topic}: {len(counts)} (page, minute) windows, {sum(per_page.values())} clicks counted")
        for page, clicks in sorted(per_page.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {page:<10} {clicks}")
        return 0
    finally:
        if own_session:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
