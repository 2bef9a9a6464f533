"""The rows of docs/consistency.md that hold on a single broker, proved with confluent-kafka.

With no followers, a record the leader appended is COMMITTED at once: acks=1 and acks=all answer
after the same append, and read_committed and read_uncommitted consumers see the same records
and the same watermarks. "At once" is checked right after each answer, with no retry: ListOffsets
and a Fetch's watermarks already cover the acknowledged records.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.raw_kafka import FETCH, RawConnection, list_offsets_latest
from wire.records import encode_batch

TIMEOUT = 15.0
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def fetch_watermarks(bootstrap: str, topic: str, isolation_level: int, partition: int = 0) -> tuple[int, int]:
    """(high watermark, last stable offset) a consumer's Fetch from offset 0 reports, without waiting."""
    with RawConnection(bootstrap) as conn:
        response = conn.request(FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]})
    p = response.responses[0].partitions[0]
    assert p.error_code == 0, p
    return p.high_watermark, p.last_stable_offset


def _producer(bootstrap: str, acks: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "log_level": 3})


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": isolation, "log_level": 3})


def _produce(producer: Producer, topic: str, values: list[bytes]) -> list[int]:
    offsets: list[int] = []

    def delivered(err, msg):
        assert err is None, err
        offsets.append(msg.offset())

    for v in values:
        producer.produce(topic, value=v, partition=0, on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return offsets


def _read(consumer: Consumer, topic: str, count: int) -> list[bytes]:
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(got), 0.2):
            assert m.error() is None, m.error()
            got.append(m.value())
    return got


@pytest.mark.parametrize("acks", ["1", "all"])
def test_acknowledged_records_are_committed_at_once_on_one_broker(kshim, topic_name, acks):
    """acks=1 and acks=all: as soon as a produce is answered, both isolation levels' ListOffsets
    latest and Fetch watermarks cover it (checked at once, in several rounds, never retried), and
    read_committed consumers see every record."""
    producer = _producer(kshim.bootstrap, acks)
    values: list[bytes] = []
    for round_ in range(5):
        batch = [b"r%d-%d" % (round_, i) for i in range(10)]
        assert _produce(producer, topic_name, batch) == list(range(len(values), len(values) + 10))
        values += batch
        end = len(values)
        assert list_offsets_latest(kshim.bootstrap, topic_name, READ_COMMITTED) == end
        assert list_offsets_latest(kshim.bootstrap, topic_name, READ_UNCOMMITTED) == end
        assert fetch_watermarks(kshim.bootstrap, topic_name, READ_COMMITTED) == (end, end)
    committed = _consumer(kshim.bootstrap, "read_committed")
    uncommitted = _consumer(kshim.bootstrap, "read_uncommitted")
    try:
        assert _read(committed, topic_name, 50) == values
        assert _read(uncommitted, topic_name, 50) == values
    finally:
        committed.close()
        uncommitted.close()


def test_records_of_one_partition_keep_the_order_the_leader_received(kshim, topic_name):
    """Offsets are unique and increasing in the order the leader appended the batches."""
    producer = _producer(kshim.bootstrap, "1")
    values = [b"%05d" % i for i in range(2000)]
    offsets = _produce(producer, topic_name, values)
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    consumer = _consumer(kshim.bootstrap, "read_committed")
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        read: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(read) < len(values) and time.monotonic() < deadline:
            read += [(m.offset(), m.value()) for m in consumer.consume(500, 0.2) if m.error() is None]
    finally:
        consumer.close()
    # each record is where its producer was told it is, in the order it was sent
    assert read == list(zip(offsets, values))


def test_a_retried_idempotent_batch_gets_its_original_offset(kshim, topic_name):
    """The same idempotent batch sent twice (a retry whose first answer was lost) is acknowledged
    at its first offset both times and stored once."""
    tp = (topic_name, 0)
    _produce(_producer(kshim.bootstrap, "1"), topic_name, [b"before"])
    with RawConnection(kshim.bootstrap) as conn:
        pid = conn.init_producer_id().producer_id
        batch = encode_batch([(None, b"once-%d" % i) for i in range(3)], producer_id=pid, producer_epoch=0,
                             base_sequence=0)
        first, retry = conn.produce({tp: batch}), conn.produce({tp: batch})
        assert (first[tp].error_code, first[tp].base_offset) == (0, 1)
        assert (retry[tp].error_code, retry[tp].base_offset) == (0, 1)
    assert list_offsets_latest(kshim.bootstrap, topic_name, READ_UNCOMMITTED) == 4
    consumer = _consumer(kshim.bootstrap, "read_uncommitted")
    try:
        assert _read(consumer, topic_name, 4) == [b"before", b"once-0", b"once-1", b"once-2"]
    finally:
        consumer.close()
