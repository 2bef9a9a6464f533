"""kafka-python (unmodified, no pinned api_version) against a real kshim process over TCP.

Each test drives the client as a user would and checks what a user would check: the records a
consumer gets back (every field), the metadata a producer gets, the offsets ListOffsets answers and
what the admin client reports. Consumers here have no group: they use assign() and seek (groups
are tested in test_groups.py).
"""
from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
)

from compat_tests.kshim_process import wait_until

SEND_TIMEOUT_S = 10
CREATE_TIME, LOG_APPEND_TIME = 0, 1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- clients, closed whatever the test does -------------------------------------------------------

@pytest.fixture
def make_producer(kshim):
    made = []

    def make(**config) -> KafkaProducer:
        producer = KafkaProducer(bootstrap_servers=kshim.bootstrap, **config)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=5)


@pytest.fixture
def make_consumer(kshim):
    made = []

    def make(**config) -> KafkaConsumer:
        config.setdefault("group_id", None)
        config.setdefault("enable_auto_commit", False)
        config.setdefault("fetch_max_wait_ms", 100)
        consumer = KafkaConsumer(bootstrap_servers=kshim.bootstrap, **config)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


@pytest.fixture
def admin(kshim):
    client = KafkaAdminClient(bootstrap_servers=kshim.bootstrap)
    try:
        yield client
    finally:
        client.close()


def consume(consumer: KafkaConsumer, count: int, timeout: float = 10.0) -> list:
    """Poll until `count` records arrived (deadline `timeout`); returns them in arrival order."""
    got = []

    def enough() -> bool:
        for records in consumer.poll(timeout_ms=100).values():
            got.extend(records)
        return len(got) >= count

    wait_until(enough, timeout=timeout, message=f"{count} records (got {len(got)})")
    return got


def send_all(producer: KafkaProducer, topic: str, records: list[dict]) -> list:
    """Send every record (kwargs of producer.send), then wait for each acknowledgement."""
    futures = [producer.send(topic, **record) for record in records]
    producer.flush(timeout=SEND_TIMEOUT_S)
    return [f.get(timeout=SEND_TIMEOUT_S) for f in futures]


def topic_configs(admin: KafkaAdminClient, topic: str) -> dict[str, dict]:
    """The topic's overridden configs, as `describe_configs` reports them."""
    result = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return result["topic"][topic]


# -- produce and consume -------------------------------------------------------------------------

def test_every_record_field_round_trips(kshim, make_producer, make_consumer, topic_name):
    explicit_ts = now_ms() - 3_600_000
    sent = [
        dict(key=b"k0", value=b"plain"),
        dict(key=b"k1", value=b"with headers",
             headers=[("trace-id", b"abc123"), ("empty", b""), ("trace-id", b"dup key"), ("\u00e9t\u00e9", b"\x00\xff")]),
        dict(key=b"tombstone", value=None),
        dict(key=None, value=b"no key"),
        dict(key=b"k4", value=b"explicit timestamp", timestamp_ms=explicit_ts),
        dict(key=b"k5", value=b""),
        dict(key=b"", value=b"empty key"),
        dict(key=b"k7", value=bytes(range(256)) * 40),
    ]
    producer = make_producer()
    before = now_ms()
    metas = send_all(producer, topic_name, [dict(r, partition=1) for r in sent])
    after = now_ms()

    assert [m.partition for m in metas] == [1] * len(sent)
    assert [m.offset for m in metas] == list(range(len(sent)))

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 1)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = consume(consumer, len(sent))

    assert len(got) == len(sent)
    for meta, record, msg in zip(metas, sent, got):
        assert msg.topic == topic_name
        assert msg.partition == 1
        assert msg.offset == meta.offset
        assert msg.key == record["key"]
        assert msg.value == record["value"]
        assert msg.headers == record.get("headers", [])
        assert msg.timestamp_type == CREATE_TIME
        assert msg.timestamp == meta.timestamp
        if "timestamp_ms" in record:
            assert msg.timestamp == record["timestamp_ms"]
        else:
            assert before <= msg.timestamp <= after
    assert consumer.position(tp) == len(sent)


def test_null_header_value_is_delivered_as_none(kshim, make_consumer, topic_name):
    # kafka-python's producer refuses None header values, so a librdkafka producer writes the record.
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kshim.bootstrap})
    delivered = []
    producer.produce(topic_name, key=b"k", value=b"v", partition=0,
                     headers=[("present", b"yes"), ("null", None), ("after", b"x")],
                     on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(SEND_TIMEOUT_S) == 0
    assert delivered == [(None, 0)]

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    [msg] = consume(consumer, 1)
    assert (msg.offset, msg.key, msg.value) == (0, b"k", b"v")
    assert msg.headers == [("present", b"yes"), ("null", None), ("after", b"x")]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(make_producer, make_consumer, topic_name, codec):
    producer = make_producer(compression_type=None if codec == "none" else codec, linger_ms=50)
    sent = [dict(key=f"key-{i}".encode(), value=(f"value {i} " * 50).encode(),
                 headers=[("i", str(i).encode())], partition=2) for i in range(40)]
    metas = send_all(producer, topic_name, sent)
    assert [m.offset for m in metas] == list(range(40))

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 2)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = consume(consumer, 40)
    assert [(m.offset, m.key, m.value, m.headers) for m in got] == \
        [(i, r["key"], r["value"], r["headers"]) for i, r in enumerate(sent)]

    # From the middle of a (compressed) batch: the client skips the records before its offset.
    consumer.seek(tp, 25)
    got = consume(consumer, 15)
    assert [(m.offset, m.value) for m in got] == [(i, sent[i]["value"]) for i in range(25, 40)]


@pytest.mark.parametrize("acks", [1, "all"])
def test_acked_produce_reports_offsets(make_producer, make_consumer, topic_name, acks):
    producer = make_producer(acks=acks)
    first = [producer.send(topic_name, value=f"a{i}".encode(), partition=0).get(timeout=SEND_TIMEOUT_S)
             for i in range(3)]
    assert [(m.topic, m.partition, m.offset) for m in first] == [(topic_name, 0, i) for i in range(3)]
    batch = send_all(producer, topic_name, [dict(value=f"b{i}".encode(), partition=0) for i in range(5)])
    assert [m.offset for m in batch] == list(range(3, 8))
    other = producer.send(topic_name, value=b"p1", partition=1).get(timeout=SEND_TIMEOUT_S)
    assert (other.partition, other.offset) == (1, 0)

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 0)
    assert consumer.end_offsets([tp]) == {tp: 8}


def test_acks_0_records_still_arrive(make_producer, make_consumer, topic_name):
    producer = make_producer(acks=0)
    for i in range(20):
        producer.send(topic_name, key=b"k", value=f"fire-and-forget {i}".encode(), partition=0)
    producer.flush(timeout=SEND_TIMEOUT_S)

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = consume(consumer, 20)
    assert [(m.offset, m.value) for m in got] == [(i, f"fire-and-forget {i}".encode()) for i in range(20)]


# -- consumer positioning and ListOffsets --------------------------------------------------------

def test_assign_and_seek(make_producer, make_consumer, topic_name):
    producer = make_producer()
    send_all(producer, topic_name, [dict(value=f"v{i}".encode(), partition=0) for i in range(10)])
    consumer = make_consumer()
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])

    consumer.seek(tp, 6)
    assert [(m.offset, m.value) for m in consume(consumer, 4)] == [(i, f"v{i}".encode()) for i in range(6, 10)]

    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    assert [m.offset for m in consume(consumer, 10)] == list(range(10))

    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 10
    assert consumer.poll(timeout_ms=300) == {}  # nothing new past the end
    producer.send(topic_name, value=b"late", partition=0).get(timeout=SEND_TIMEOUT_S)
    [late] = consume(consumer, 1)
    assert (late.offset, late.value) == (10, b"late")


def test_the_broker_is_taken_for_kafka_4(make_consumer):
    """kafka-python infers the broker's version from the API versions it serves; ListOffsets v10
    is what it takes for 4.0 (with v9 at most it took kshim for 3.9)."""
    assert make_consumer().config["api_version"] >= (4, 0)


def test_offsets_for_times(make_producer, make_consumer, topic_name):
    base = now_ms() - 600_000
    producer = make_producer(linger_ms=20)
    # two batches of three records, timestamps 1 s apart: lookups land inside batches
    first = send_all(producer, topic_name, [dict(value=b"x", partition=0, timestamp_ms=base + i * 1000)
                                            for i in range(3)])
    second = send_all(producer, topic_name, [dict(value=b"y", partition=0, timestamp_ms=base + i * 1000)
                                             for i in range(3, 6)])
    assert [m.offset for m in first + second] == list(range(6))

    consumer = make_consumer()
    tp, empty = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    def lookup(ts):
        found = consumer.offsets_for_times({tp: ts})[tp]
        return None if found is None else (found.offset, found.timestamp)

    assert lookup(base - 5000) == (0, base)               # before the first: the first record
    assert lookup(base) == (0, base)                      # exact match
    assert lookup(base + 1) == (1, base + 1000)           # between records, inside the first batch
    assert lookup(base + 1500) == (2, base + 2000)
    assert lookup(base + 2500) == (3, base + 3000)        # between the two batches
    assert lookup(base + 4000) == (4, base + 4000)
    assert lookup(base + 4999) == (5, base + 5000)
    assert lookup(base + 5001) is None                    # after the last
    assert consumer.offsets_for_times({empty: base}) == {empty: None}

    assert consumer.beginning_offsets([tp, empty]) == {tp: 0, empty: 0}
    assert consumer.end_offsets([tp, empty]) == {tp: 6, empty: 0}

    # what a user does with the answer: seek there and read
    consumer.assign([tp])
    consumer.seek(tp, consumer.offsets_for_times({tp: base + 3500})[tp].offset)
    msg = consume(consumer, 1)[0]
    assert (msg.offset, msg.timestamp, msg.value) == (4, base + 4000, b"y")


# -- admin ---------------------------------------------------------------------------------------

def test_create_topic_with_partitions_and_configs(admin, make_consumer, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 5, "replication_factor": 1,
                                      "configs": {"retention.ms": "3600000", "max.message.bytes": "200000"}}})
    assert topic_name in admin.list_topics()
    [described] = admin.describe_topics([topic_name])
    assert described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2, 3, 4]
    assert all(p["leader_id"] >= 0 for p in described["partitions"])

    configs = topic_configs(admin, topic_name)
    assert {name: c["value"] for name, c in configs.items()} == \
        {"retention.ms": "3600000", "max.message.bytes": "200000"}
    assert {c["config_source"] for c in configs.values()} == {"DYNAMIC_TOPIC_CONFIG"}

    consumer = make_consumer()
    assert consumer.partitions_for_topic(topic_name) == {0, 1, 2, 3, 4}


def test_create_existing_topic_fails(admin, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 2}})
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({topic_name: {"num_partitions": 4}})
    [described] = admin.describe_topics([topic_name])
    assert len(described["partitions"]) == 2  # the original is untouched


@pytest.mark.parametrize("configs", [{"retention.ms": "soon"}, {"no.such.config": "1"},
                                     {"message.timestamp.type": "WallClock"}])
def test_create_topic_with_invalid_config_fails(admin, topic_name, configs):
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics({topic_name: {"num_partitions": 1, "configs": configs}})
    assert topic_name not in admin.list_topics()


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "legacy"])
def test_alter_configs(admin, topic_name, incremental):
    admin.create_topics({topic_name: {"num_partitions": 1, "configs": {"retention.ms": "3600000"}}})
    result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name,
                                                 {"max.message.bytes": "5000"})], incremental=incremental)
    assert result == {"topic": {topic_name: "OK"}}
    configs = topic_configs(admin, topic_name)
    assert {name: c["value"] for name, c in configs.items()} == \
        {"retention.ms": "3600000", "max.message.bytes": "5000"}

    bad = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name,
                                              {"max.message.bytes": "lots"})], incremental=incremental)
    assert bad["topic"][topic_name].startswith("[Error 40] InvalidConfigurationError")
    assert "max.message.bytes" in bad["topic"][topic_name]  # the broker says which config is wrong
    assert topic_configs(admin, topic_name)["max.message.bytes"]["value"] == "5000"


def test_create_partitions(admin, make_producer, make_consumer, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 3}})
    admin.create_partitions({topic_name: 6})
    [described] = admin.describe_topics([topic_name])
    assert sorted(p["partition_index"] for p in described["partitions"]) == list(range(6))

    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: 4})

    meta = make_producer().send(topic_name, value=b"new partition", partition=5).get(timeout=SEND_TIMEOUT_S)
    assert (meta.partition, meta.offset) == (5, 0)
    consumer = make_consumer()
    tp = TopicPartition(topic_name, 5)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    [msg] = consume(consumer, 1)
    assert msg.value == b"new partition"


def test_delete_topics(admin, make_producer, topic_name):
    keep = topic_name + "-keep"
    admin.create_topics({topic_name: {"num_partitions": 2}, keep: {"num_partitions": 1}})
    make_producer().send(topic_name, value=b"doomed", partition=0).get(timeout=SEND_TIMEOUT_S)
    assert {topic_name, keep} <= set(admin.list_topics())

    admin.delete_topics([topic_name])
    topics = admin.list_topics()
    assert topic_name not in topics
    assert keep in topics


def test_delete_records_moves_beginning_offset(admin, make_producer, make_consumer, topic_name):
    send_all(make_producer(), topic_name, [dict(value=f"v{i}".encode(), partition=0) for i in range(10)])
    tp = TopicPartition(topic_name, 0)
    result = admin.delete_records({tp: 4})
    assert result[tp]["low_watermark"] == 4

    consumer = make_consumer()
    assert consumer.beginning_offsets([tp]) == {tp: 4}
    assert consumer.end_offsets([tp]) == {tp: 10}
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    assert [(m.offset, m.value) for m in consume(consumer, 6)] == [(i, f"v{i}".encode()) for i in range(4, 10)]

    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 11})
    assert consumer.beginning_offsets([tp]) == {tp: 4}


# -- topic configs that change what produce does -------------------------------------------------

@pytest.mark.parametrize("codec", [None, "gzip"])
def test_log_append_time_topic_stamps_records(admin, make_producer, make_consumer, topic_name, codec):
    admin.create_topics({topic_name: {"num_partitions": 1,
                                      "configs": {"message.timestamp.type": "LogAppendTime"}}})
    producer = make_producer(compression_type=codec, linger_ms=20)
    client_ts = now_ms() - 86_400_000
    before = now_ms()
    metas = send_all(producer, topic_name, [dict(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0,
                                                 timestamp_ms=client_ts) for i in range(5)])
    after = now_ms()

    consumer = make_consumer()
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = consume(consumer, 5)
    assert [(m.offset, m.key, m.value) for m in got] == [(i, f"k{i}".encode(), f"v{i}".encode()) for i in range(5)]
    for meta, msg in zip(metas, got):
        assert msg.timestamp_type == LOG_APPEND_TIME
        assert before <= msg.timestamp <= after, (before, msg.timestamp, after)
        assert meta.timestamp == msg.timestamp  # the producer learns the broker's time too


def test_record_over_max_message_bytes_is_rejected(admin, make_producer, make_consumer, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 1, "configs": {"max.message.bytes": "2000"}}})
    producer = make_producer(max_request_size=1_000_000, retries=0)
    small = producer.send(topic_name, value=b"s" * 100, partition=0).get(timeout=SEND_TIMEOUT_S)
    assert small.offset == 0

    with pytest.raises(MessageSizeTooLargeError):
        producer.send(topic_name, value=b"L" * 10_000, partition=0).get(timeout=SEND_TIMEOUT_S)

    tp = TopicPartition(topic_name, 0)
    assert make_consumer().end_offsets([tp]) == {tp: 1}  # nothing of the big record was stored
    after = producer.send(topic_name, value=b"s" * 100, partition=0).get(timeout=SEND_TIMEOUT_S)
    assert after.offset == 1
