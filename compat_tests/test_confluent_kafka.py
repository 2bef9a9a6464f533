"""Unmodified confluent-kafka (librdkafka) against a real kshim process over TCP.

Each test uses its own topic on the module's broker (started with --partitions 3) and checks what
a user of the client would check: delivery reports, what a consumer reads back, watermarks, and
what the admin client reports. Every wait has a deadline.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

TIMEOUT = 15.0  # seconds, for any single client operation


# -- clients -------------------------------------------------------------------------------------

class Clients:
    """Creates clients for one test and closes every one of them at teardown."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []

    def producer(self, **conf) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "log_level": 3, **conf})
        self._producers.append(p)
        return p

    def consumer(self, **conf) -> Consumer:
        # consumers assign partitions themselves and never commit (groups: test_groups.py).
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3, **conf})
        self._consumers.append(c)
        return c

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})

    def close(self) -> None:
        for c in self._consumers:
            c.close()
        for p in self._producers:
            p.flush(5)
            p.close()


@pytest.fixture
def clients(kshim):
    made = Clients(kshim.bootstrap)
    yield made
    made.close()


class Deliveries:
    """A delivery callback that keeps every report."""

    def __init__(self) -> None:
        self.reports: list[tuple[KafkaError | None, object]] = []

    def __call__(self, err, msg) -> None:
        self.reports.append((err, msg))

    def errors(self) -> list:
        return [err for err, _ in self.reports if err is not None]


def produce_all(producer: Producer, topic: str, records, **kwargs) -> Deliveries:
    """Produce every record (dicts of produce() kwargs), flush, and check all were delivered."""
    dr = Deliveries()
    n = 0
    for rec in records:
        while True:
            try:
                producer.produce(topic, on_delivery=dr, **kwargs, **rec)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
        n += 1
    assert producer.flush(TIMEOUT) == 0, "records still undelivered after flush"
    assert len(dr.reports) == n
    assert dr.errors() == []
    return dr


def consume_n(consumer: Consumer, n: int, timeout: float = TIMEOUT) -> list:
    """Exactly n records, or fail at the deadline; errors fail the test."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"consumed {len(got)} of {n} records before the deadline"
        for msg in consumer.consume(num_messages=min(n - len(got), 10_000), timeout=min(left, 1.0)):
            assert msg.error() is None, msg.error()
            got.append(msg)
    return got


def assert_nothing_more(consumer: Consumer, wait: float = 1.0) -> None:
    """No further record arrives within `wait` seconds (a bounded check for duplicates)."""
    extra = [m for m in consumer.consume(num_messages=100, timeout=wait) if m.error() is None]
    assert extra == [], [(m.partition(), m.offset()) for m in extra]


def wait_for_topic(admin: AdminClient, topic: str, partitions: int | None = None) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        md = admin.list_topics(timeout=TIMEOUT)
        t = md.topics.get(topic)
        if t is not None and t.error is None and (partitions is None or len(t.partitions) == partitions):
            return
        assert time.monotonic() < deadline, f"topic {topic} not visible with {partitions} partitions"
        time.sleep(0.05)


def create_topic(admin: AdminClient, topic: str, partitions: int = 1, **config: str) -> None:
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)])
    fut[topic].result(timeout=TIMEOUT)
    wait_for_topic(admin, topic, partitions)


def kafka_error(excinfo) -> int:
    """The error code of a KafkaException raised by a future."""
    err = excinfo.value.args[0]
    assert isinstance(err, KafkaError), excinfo.value
    return err.code()


def describe_topic_configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(timeout=TIMEOUT)


# -- produce / consume ---------------------------------------------------------------------------

def test_keys_headers_null_values_and_timestamps(clients, topic_name):
    ts = int(time.time() * 1000) - 3_600_000  # an hour ago: clearly not the broker's clock
    records = [
        {"key": b"k1", "value": b"v1", "headers": [("h1", b"a"), ("h1", b"b"), ("h2", None)], "timestamp": ts},
        {"key": b"tombstone", "value": None, "timestamp": ts + 1},
        {"key": None, "value": b"no key", "timestamp": ts + 2},
        {"key": b"", "value": b"", "timestamp": ts + 3},
        {"key": b"k\x00\xff", "value": bytes(range(256)), "headers": {"bin": b"\x00\x01"}, "timestamp": ts + 4},
    ]
    p = clients.producer()
    dr = produce_all(p, topic_name, records, partition=0)
    assert [m.offset() for _, m in dr.reports] == [0, 1, 2, 3, 4]

    c = clients.consumer()
    c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    got = consume_n(c, 5)
    assert [m.offset() for m in got] == [0, 1, 2, 3, 4]
    assert [m.key() for m in got] == [b"k1", b"tombstone", None, b"", b"k\x00\xff"]
    assert [m.value() for m in got] == [b"v1", None, b"no key", b"", bytes(range(256))]
    assert got[0].headers() == [("h1", b"a"), ("h1", b"b"), ("h2", None)]
    assert got[1].headers() is None
    assert got[4].headers() == [("bin", b"\x00\x01")]
    assert [m.timestamp() for m in got] == [(TIMESTAMP_CREATE_TIME, ts + i) for i in range(5)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_codec_round_trip(clients, topic_name, codec):
    n = 2000
    values = [(f"record {i} " + "compressible " * 8).encode() for i in range(n)]
    values[7] = None  # a null value inside a compressed batch
    p = clients.producer(**{"compression.type": codec, "linger.ms": 20})
    dr = produce_all(p, topic_name, ({"key": str(i).encode(), "value": v} for i, v in enumerate(values)),
                     partition=1)
    assert sorted(m.offset() for _, m in dr.reports) == list(range(n))

    c = clients.consumer()
    c.assign([TopicPartition(topic_name, 1, 0)])
    got = consume_n(c, n)
    assert [m.offset() for m in got] == list(range(n))
    assert [m.key() for m in got] == [str(i).encode() for i in range(n)]
    assert [m.value() for m in got] == values
    assert c.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=TIMEOUT) == (0, n)


def test_log_append_time_topic_stamps_records(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 1, **{"message.timestamp.type": "LogAppendTime"})
    old = int(time.time() * 1000) - 86_400_000
    before = int(time.time() * 1000)
    produce_all(clients.producer(), topic_name, [{"value": b"x", "timestamp": old}] * 3, partition=0)
    after = int(time.time() * 1000)

    c = clients.consumer()
    c.assign([TopicPartition(topic_name, 0, 0)])
    for m in consume_n(c, 3):
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000, (before, ts, after)


def test_assign_at_offset_seek_and_watermarks(clients, topic_name):
    p = clients.producer()
    produce_all(p, topic_name, ({"value": f"m{i}".encode()} for i in range(20)), partition=2)

    c = clients.consumer()
    assert c.get_watermark_offsets(TopicPartition(topic_name, 2), timeout=TIMEOUT) == (0, 20)
    assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT) == (0, 0)

    c.assign([TopicPartition(topic_name, 2, 15)])
    got = consume_n(c, 5)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"m{i}".encode()) for i in range(15, 20)]

    c.seek(TopicPartition(topic_name, 2, 3))
    got = consume_n(c, 4)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"m{i}".encode()) for i in range(3, 7)]

    # a consumer assigned at the end skips what is there and reads what is produced afterwards.
    # When it has resolved the end offset is not observable, so keep producing until one arrives.
    tail = clients.consumer()
    tail.assign([TopicPartition(topic_name, 2, OFFSET_END)])
    deadline = time.monotonic() + TIMEOUT
    first = None
    while first is None:
        assert time.monotonic() < deadline, "no record produced after assign(OFFSET_END) arrived"
        produce_all(p, topic_name, [{"value": b"late"}], partition=2)
        msgs = tail.consume(num_messages=1, timeout=0.3)
        first = msgs[0] if msgs else None
    assert first.error() is None
    assert first.offset() >= 20 and first.value() == b"late"


def test_offsets_for_times(clients, topic_name):
    t0 = int(time.time() * 1000) - 100_000
    p = clients.producer(**{"linger.ms": 0})
    # one record per request so the timestamps live in separate batches as well as within one
    for i in range(10):
        produce_all(p, topic_name, [{"value": str(i).encode(), "timestamp": t0 + i * 1000}], partition=0)

    c = clients.consumer()
    query = [TopicPartition(topic_name, 0, t) for t in (t0 - 5000, t0, t0 + 2500, t0 + 9000, t0 + 9001)]
    answers = [c.offsets_for_times([tp], timeout=TIMEOUT)[0] for tp in query]
    assert [a.error for a in answers] == [None] * 5
    # first offset whose timestamp is >= the one asked; none at all is -1 (OFFSET_END)
    assert [a.offset for a in answers] == [0, 0, 3, 9, OFFSET_END]

    # the answer is usable to start consuming at that time
    c.assign([TopicPartition(topic_name, 0, answers[2].offset)])
    [first] = consume_n(c, 1)
    assert first.value() == b"3" and first.timestamp() == (TIMESTAMP_CREATE_TIME, t0 + 3000)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(clients, topic_name, acks):
    n = 50
    p = clients.producer(**{"acks": acks, "linger.ms": 5})
    dr = produce_all(p, topic_name, ({"value": f"a{i}".encode()} for i in range(n)), partition=0)
    offsets = [m.offset() for _, m in dr.reports]
    if acks == "0":
        # librdkafka gets no response, so it cannot know the offset: reported as invalid (None)
        assert offsets == [None] * n
    else:
        assert offsets == list(range(n))

    c = clients.consumer()
    c.assign([TopicPartition(topic_name, 0, 0)])
    got = consume_n(c, n)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"a{i}".encode()) for i in range(n)]


def test_100k_records_over_3_partitions_exactly_once_in_order(clients, topic_name):
    n = 100_000
    padding = b"." * 88
    p = clients.producer(**{"linger.ms": 50, "batch.size": 1_000_000, "batch.num.messages": 10_000,
                            "queue.buffering.max.messages": 200_000})
    dr = Deliveries()
    for i in range(n):
        p.produce(topic_name, key=b"key-%d" % (i % 64), value=b"%010d" % i + padding, on_delivery=dr)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "records still undelivered after flush"
    assert dr.errors() == [] and len(dr.reports) == n

    # what the producer was told: per partition, offsets 0.. in produce order
    produced: dict[int, list[int]] = {0: [], 1: [], 2: []}
    offset_of: dict[int, tuple[int, int]] = {}
    for _, m in dr.reports:
        i = int(m.value()[:10])
        offset_of[i] = (m.partition(), m.offset())
    for i in range(n):
        produced[offset_of[i][0]].append(i)
    assert all(produced[part] for part in produced), {k: len(v) for k, v in produced.items()}
    for part, seqs in produced.items():
        assert [offset_of[i][1] for i in seqs] == list(range(len(seqs))), f"partition {part} offsets"

    c = clients.consumer(**{"fetch.max.bytes": 10_000_000, "max.partition.fetch.bytes": 2_000_000})
    c.assign([TopicPartition(topic_name, part, 0) for part in range(3)])
    got = consume_n(c, n, timeout=60)
    assert_nothing_more(c, wait=0.5)

    consumed: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    for m in got:
        consumed[m.partition()].append((m.offset(), int(m.value()[:10])))
        assert m.key() == b"key-%d" % (int(m.value()[:10]) % 64)
        assert len(m.value()) == 98
    for part in range(3):
        offsets = [o for o, _ in consumed[part]]
        assert offsets == list(range(len(produced[part]))), f"partition {part}: gaps or duplicates"
        assert [i for _, i in consumed[part]] == produced[part], f"partition {part}: not in produce order"
        assert c.get_watermark_offsets(TopicPartition(topic_name, part), timeout=TIMEOUT) == (0, len(produced[part]))


def test_idempotent_producer(clients, topic_name):
    n = 20_000
    p = clients.producer(**{"enable.idempotence": True, "acks": "all", "linger.ms": 10,
                            "max.in.flight.requests.per.connection": 5, "batch.num.messages": 500})
    dr = produce_all(p, topic_name, ({"key": b"k%d" % (i % 16), "value": b"%d" % i} for i in range(n)))

    per_partition: dict[int, list[tuple[int, int]]] = {}
    for _, m in dr.reports:
        per_partition.setdefault(m.partition(), []).append((int(m.value()), m.offset()))
    expected: dict[int, list[int]] = {}
    for part, pairs in per_partition.items():
        pairs.sort()
        assert [o for _, o in pairs] == list(range(len(pairs))), f"partition {part} delivery offsets"
        expected[part] = [i for i, _ in pairs]

    c = clients.consumer()
    c.assign([TopicPartition(topic_name, part, 0) for part in range(3)])
    got = consume_n(c, n)
    assert_nothing_more(c, wait=0.5)
    consumed: dict[int, list[int]] = {}
    for m in got:
        consumed.setdefault(m.partition(), []).append(int(m.value()))
    assert consumed == expected  # once each, in produce order per partition


def test_produce_auto_creates_topic_with_broker_default_partitions(clients, topic_name):
    admin = clients.admin()
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics
    p = clients.producer()
    dr = produce_all(p, topic_name, ({"key": b"k%d" % i, "value": b"v"} for i in range(30)))
    assert {m.partition() for _, m in dr.reports} <= {0, 1, 2}
    md = admin.list_topics(timeout=TIMEOUT).topics[topic_name]
    assert md.error is None
    assert sorted(md.partitions) == [0, 1, 2]


# -- admin ---------------------------------------------------------------------------------------

def test_admin_create_topic_with_configs(clients, topic_name):
    admin = clients.admin()
    fut = admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1,
                                        config={"retention.ms": "3600000", "max.message.bytes": "200000"})])
    assert fut[topic_name].result(timeout=TIMEOUT) is None
    wait_for_topic(admin, topic_name, 2)

    configs = describe_topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not configs["retention.ms"].is_default
    assert configs["max.message.bytes"].value == "200000"
    assert configs["retention.bytes"].value == "-1"
    assert configs["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # the max.message.bytes override is enforced on produce
    p = clients.producer(**{"message.max.bytes": 1_000_000})
    dr = Deliveries()
    p.produce(topic_name, value=b"x" * 300_000, partition=0, on_delivery=dr)
    assert p.flush(TIMEOUT) == 0
    [(err, _)] = dr.reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_admin_create_topic_validate_only_creates_nothing(clients, topic_name):
    admin = clients.admin()
    fut = admin.create_topics([NewTopic(topic_name, num_partitions=4, replication_factor=1)], validate_only=True)
    assert fut[topic_name].result(timeout=TIMEOUT) is None
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics

    # validation still reports what creation would
    bad = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1,
                                        config={"retention.ms": "soon"})], validate_only=True)
    with pytest.raises(KafkaException) as exc:
        bad[topic_name].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.INVALID_CONFIG


def test_admin_create_duplicate_topic_fails(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 1)
    fut = admin.create_topics([NewTopic(topic_name, num_partitions=5, replication_factor=1)])
    with pytest.raises(KafkaException) as exc:
        fut[topic_name].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == 1


@pytest.mark.parametrize("config", [{"retention.ms": "not-a-number"}, {"segment.bytes": "1"},
                                    {"no.such.config": "1"}])
def test_admin_create_topic_invalid_config_fails(clients, topic_name, config):
    admin = clients.admin()
    fut = admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1, config=config)])
    with pytest.raises(KafkaException) as exc:
        fut[topic_name].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.INVALID_CONFIG
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics


def test_admin_describe_and_alter_configs(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 1, **{"retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"max.message.bytes": "500000"})

    # alter_configs (deprecated in the client) replaces the whole set: retention.ms goes back to default
    with pytest.warns(DeprecationWarning):
        futs = admin.alter_configs([res])
    assert futs[res].result(timeout=TIMEOUT) is None
    configs = describe_topic_configs(admin, topic_name)
    assert configs["max.message.bytes"].value == "500000"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # validate_only changes nothing
    probe = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"max.message.bytes": "1000"})
    with pytest.warns(DeprecationWarning):
        futs = admin.alter_configs([probe], validate_only=True)
    assert futs[probe].result(timeout=TIMEOUT) is None
    assert describe_topic_configs(admin, topic_name)["max.message.bytes"].value == "500000"

    # an invalid value is refused and changes nothing
    bad = ConfigResource(ResourceType.TOPIC, topic_name, set_config={"retention.ms": "-7"})
    with pytest.warns(DeprecationWarning):
        futs = admin.alter_configs([bad])
    with pytest.raises(KafkaException) as exc:
        futs[bad].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.INVALID_CONFIG
    assert describe_topic_configs(admin, topic_name)["max.message.bytes"].value == "500000"


def test_admin_incremental_alter_configs(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 1, **{"retention.ms": "3600000", "max.message.bytes": "500000"})
    res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert admin.incremental_alter_configs([res])[res].result(timeout=TIMEOUT) is None

    configs = describe_topic_configs(admin, topic_name)
    assert configs["retention.ms"].value == "3600000"  # untouched
    assert configs["retention.bytes"].value == "123456789"
    assert configs["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.SET),
    ])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([bad])[bad].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.INVALID_CONFIG
    assert describe_topic_configs(admin, topic_name)["retention.ms"].value == "3600000"  # all or nothing

    unknown = ConfigResource(ResourceType.TOPIC, f"missing-{topic_name}", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([unknown])[unknown].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_create_partitions(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 2)
    fut = admin.create_partitions([NewPartitions(topic_name, 5)])
    assert fut[topic_name].result(timeout=TIMEOUT) is None
    wait_for_topic(admin, topic_name, 5)

    # the new partitions take records
    dr = produce_all(clients.producer(), topic_name, [{"value": b"new"}], partition=4)
    assert [(m.partition(), m.offset()) for _, m in dr.reports] == [(4, 0)]

    shrink = admin.create_partitions([NewPartitions(topic_name, 3)])
    with pytest.raises(KafkaException) as exc:
        shrink[topic_name].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.INVALID_PARTITIONS
    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic_name].partitions) == 5


def test_admin_delete_topics(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 1)
    produce_all(clients.producer(), topic_name, [{"value": b"gone soon"}], partition=0)
    assert admin.delete_topics([topic_name])[topic_name].result(timeout=TIMEOUT) is None
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics

    again = admin.delete_topics([topic_name])
    with pytest.raises(KafkaException) as exc:
        again[topic_name].result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_describe_cluster(clients, kshim):
    admin = clients.admin()  # keep a reference: a collected client fails its pending futures
    desc = admin.describe_cluster().result(timeout=TIMEOUT)
    assert desc.cluster_id
    [node] = desc.nodes
    assert f"{node.host}:{node.port}" == kshim.bootstrap
    assert desc.controller is not None and desc.controller.id == node.id


def test_admin_delete_records(clients, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 2)
    p = clients.producer()
    produce_all(p, topic_name, ({"value": f"r{i}".encode()} for i in range(10)), partition=0)
    produce_all(p, topic_name, ({"value": f"s{i}".encode()} for i in range(6)), partition=1)

    futs = admin.delete_records([TopicPartition(topic_name, 0, 4), TopicPartition(topic_name, 1, OFFSET_END)])
    low = {tp.partition: f.result(timeout=TIMEOUT).low_watermark for tp, f in futs.items()}
    assert low == {0: 4, 1: 6}

    c = clients.consumer()
    assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT) == (4, 10)
    assert c.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=TIMEOUT) == (6, 6)
    c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
    got = consume_n(c, 6)
    assert [(m.offset(), m.value()) for m in got] == [(i, f"r{i}".encode()) for i in range(4, 10)]

    beyond = admin.delete_records([TopicPartition(topic_name, 0, 11)])
    with pytest.raises(KafkaException) as exc:
        next(iter(beyond.values())).result(timeout=TIMEOUT)
    assert kafka_error(exc) == KafkaError.OFFSET_OUT_OF_RANGE


def test_admin_list_topics(clients, kshim, topic_name):
    admin = clients.admin()
    create_topic(admin, topic_name, 3)
    md = admin.list_topics(timeout=TIMEOUT)
    [broker] = md.brokers.values()
    assert f"{broker.host}:{broker.port}" == kshim.bootstrap
    assert md.controller_id == broker.id
    topic = md.topics[topic_name]
    assert topic.error is None
    assert sorted(topic.partitions) == [0, 1, 2]
    for part in topic.partitions.values():
        assert part.error is None
        assert part.leader == broker.id
        assert part.replicas == [broker.id] and part.isrs == [broker.id]

    single = admin.list_topics(topic_name, timeout=TIMEOUT)
    assert list(single.topics) == [topic_name]
