"""The rows of docs/consistency.md that hold on a single broker, proved with confluent-kafka.

With no followers, a record the leader appended is COMMITTED at once: acks=1 and acks=all answer
after the same append, and read_committed and read_uncommitted consumers see the same records
and the same watermarks.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

TIMEOUT = 15.0


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
    """acks=1 and acks=all: once answered, read_committed consumers already see the records."""
    values = [b"r%d" % i for i in range(50)]
    producer = _producer(kshim.bootstrap, acks)
    assert _produce(producer, topic_name, values) == list(range(50))
    committed = _consumer(kshim.bootstrap, "read_committed")
    uncommitted = _consumer(kshim.bootstrap, "read_uncommitted")
    try:
        assert _read(committed, topic_name, 50) == values
        assert _read(uncommitted, topic_name, 50) == values
        tp = TopicPartition(topic_name, 0)
        # the high watermark both isolation levels report covers every acknowledged record
        assert committed.get_watermark_offsets(tp, TIMEOUT) == (0, 50)
        assert uncommitted.get_watermark_offsets(tp, TIMEOUT) == (0, 50)
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
        assert _read(consumer, topic_name, 2000) == values
    finally:
        consumer.close()
