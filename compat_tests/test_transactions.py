"""Transactions with confluent-kafka (librdkafka) against one kshim broker: what read_committed and
read_uncommitted consumers see of committed, aborted and open transactions, consume-transform-
produce with send_offsets_to_transaction, zombie fencing and the transaction timeout.

Every read ends at a sentinel: a plain record written last to the same partition, so once a
consumer has it, it has seen everything before it that its isolation level lets it see.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection, list_offsets_latest
from compat_tests.test_consistency import fetch_watermarks

SENTINEL = b"--end--"
DESCRIBE_TRANSACTIONS = 65
TIMEOUT_S = 20.0


def txn_producer(bootstrap: str, transactional_id: str | None = None, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3,
                         "transactional.id": transactional_id or f"tx-{uuid.uuid4().hex[:8]}", **extra})
    producer.init_transactions(TIMEOUT_S)
    return producer


def plain_produce(bootstrap: str, topic: str, *values: bytes, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for v in values:
        producer.produce(topic, v, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)


def read_to_sentinel(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> list[bytes]:
    """Values of one partition from the start up to the sentinel (excluded)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.auto.commit": False, "log_level": 3})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])

        def done() -> bool:
            for msg in consumer.consume(100, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            return bool(got) and got[-1] == SENTINEL

        wait_until(done, TIMEOUT_S, interval=0, message=f"the sentinel of {topic}-{partition} ({isolation})")
    finally:
        consumer.close()
    return got[:-1]


def describe_transaction(bootstrap: str, transactional_id: str) -> tuple[str, int]:
    """(state, producer epoch) the coordinator holds for a transactional id (DescribeTransactions)."""
    with RawConnection(bootstrap) as conn:
        state = conn.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}).transaction_states[0]
    assert state.error_code == 0, state
    return state.transaction_state, state.producer_epoch


def test_committed_aborted_and_plain_records_by_isolation_level(kshim, topic_name):
    """A committed, B aborted (its writer fails and aborts), a plain record, C committed."""
    create_topic(kshim.bootstrap, topic_name)
    a = txn_producer(kshim.bootstrap)
    a.begin_transaction()
    for i in range(3):
        a.produce(topic_name, b"A%d" % i, partition=0)
    a.commit_transaction(TIMEOUT_S)

    b = txn_producer(kshim.bootstrap)
    b.begin_transaction()
    for i in range(3):
        b.produce(topic_name, b"B%d" % i, partition=0)
    assert b.flush(TIMEOUT_S) == 0  # in the log, then the writer fails and aborts
    b.abort_transaction(TIMEOUT_S)

    plain_produce(kshim.bootstrap, topic_name, b"plain")

    c = txn_producer(kshim.bootstrap)
    c.begin_transaction()
    c.produce(topic_name, b"C0", partition=0)
    c.commit_transaction(TIMEOUT_S)
    plain_produce(kshim.bootstrap, topic_name, SENTINEL)

    assert read_to_sentinel(kshim.bootstrap, topic_name, "read_committed") == [
        b"A0", b"A1", b"A2", b"plain", b"C0"]
    assert read_to_sentinel(kshim.bootstrap, topic_name, "read_uncommitted") == [
        b"A0", b"A1", b"A2", b"B0", b"B1", b"B2", b"plain", b"C0"]


def open_between(bootstrap: str, topic: str, *after: bytes):
    """A new topic holding a plain record (offset 0), a transaction left open at offset 1, and
    `after` as plain records behind it; returns the transaction's producer."""
    create_topic(bootstrap, topic)
    plain_produce(bootstrap, topic, b"before")
    open_txn = txn_producer(bootstrap)
    open_txn.begin_transaction()
    open_txn.produce(topic, b"open", partition=0)
    assert open_txn.flush(TIMEOUT_S) == 0
    plain_produce(bootstrap, topic, *after)
    return open_txn


def test_an_open_transaction_holds_read_committed_at_its_first_offset(kshim, topic_name):
    open_txn = open_between(kshim.bootstrap, topic_name, b"after", SENTINEL)

    # offsets: before 0, open 1, after 2, sentinel 3
    assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == 1  # the last stable offset
    assert list_offsets_latest(kshim.bootstrap, topic_name, 0) == 4
    assert read_to_sentinel(kshim.bootstrap, topic_name, "read_uncommitted") == [b"before", b"open", b"after"]

    reader = Consumer({"bootstrap.servers": kshim.bootstrap, "group.id": f"held-{topic_name}",
                       "isolation.level": "read_committed", "log_level": 3})
    try:
        reader.assign([TopicPartition(topic_name, 0, 0)])
        got: list[bytes] = []

        def read(count: int) -> bool:
            got.extend(m.value() for m in reader.consume(10, timeout=0.2) if m.error() is None)
            return len(got) >= count

        wait_until(lambda: read(1), TIMEOUT_S, interval=0, message="the record before the transaction")
        assert got == [b"before"]
        # held: the plain records after the open transaction's first offset stay invisible
        assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == 1
        assert not read(2)
        open_txn.commit_transaction(TIMEOUT_S)
        wait_until(lambda: read(4), TIMEOUT_S, interval=0, message="everything after the commit")
        assert got == [b"before", b"open", b"after", SENTINEL]
        assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == 5  # four records and the marker
    finally:
        reader.close()


def test_list_offsets_and_fetch_watermarks_follow_the_same_bound_per_isolation_level(kshim, topic_name):
    """With a transaction open from offset 1 and plain records after it: read_committed's
    ListOffsets latest and a Fetch's last stable offset are both 1, read_uncommitted's latest and
    the high watermark are the log end, 4; after the commit all agree on 5 (the marker included)."""
    open_txn = open_between(kshim.bootstrap, topic_name, b"after-1", b"after-2")

    assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == 1
    assert list_offsets_latest(kshim.bootstrap, topic_name, 0) == 4
    assert fetch_watermarks(kshim.bootstrap, topic_name, 1) == (4, 1)
    assert fetch_watermarks(kshim.bootstrap, topic_name, 0) == (4, 1)
    open_txn.commit_transaction(TIMEOUT_S)
    assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == list_offsets_latest(kshim.bootstrap, topic_name, 0) == 5
    assert fetch_watermarks(kshim.bootstrap, topic_name, 1) == (5, 5)


def test_consume_transform_produce_commits_offsets_with_the_output(kshim, topic_name):
    """Input -> upper-cased output in transactions of 10 with send_offsets_to_transaction; one
    transaction is aborted midway and redone. The output holds each input once, and the group's
    committed offset is the input's end."""
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"ctp-{topic_name}"
    create_topic(kshim.bootstrap, source)
    create_topic(kshim.bootstrap, sink)
    inputs = [b"rec-%03d" % i for i in range(50)]
    plain_produce(kshim.bootstrap, source, *inputs)

    producer = txn_producer(kshim.bootstrap)
    consumer = Consumer({"bootstrap.servers": kshim.bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([source])
    processed = 0
    aborted_once = False
    deadline = time.monotonic() + 60
    try:
        while processed < len(inputs):
            assert time.monotonic() < deadline, f"only {processed} of {len(inputs)} processed"
            batch = [m for m in consumer.consume(10, timeout=0.5) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, m.value().upper(), partition=0)
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), TIMEOUT_S)
            if not aborted_once and processed >= 20:
                aborted_once = True
                assert producer.flush(TIMEOUT_S) == 0  # the output is in the log, then the transaction fails
                producer.abort_transaction(TIMEOUT_S)
                # rewind to the committed offsets, as a real pipeline does after an abort
                for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(TIMEOUT_S)
            processed += len(batch)
    finally:
        consumer.close()
    plain_produce(kshim.bootstrap, sink, SENTINEL)
    assert read_to_sentinel(kshim.bootstrap, sink, "read_committed") == [v.upper() for v in inputs]
    assert len(read_to_sentinel(kshim.bootstrap, sink, "read_uncommitted")) > len(inputs)  # the aborted batch

    check = Consumer({"bootstrap.servers": kshim.bootstrap, "group.id": group, "log_level": 3})
    try:
        committed = check.committed([TopicPartition(source, 0)], TIMEOUT_S)
        assert committed[0].offset == len(inputs)
    finally:
        check.close()


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name)
    tid = f"zombie-{topic_name}"
    zombie = txn_producer(kshim.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie", partition=0)
    assert zombie.flush(TIMEOUT_S) == 0

    successor = txn_producer(kshim.bootstrap, tid)  # bumps the epoch: the open transaction is aborted
    successor.begin_transaction()
    successor.produce(topic_name, b"successor", partition=0)
    successor.commit_transaction(TIMEOUT_S)

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    plain_produce(kshim.bootstrap, topic_name, SENTINEL)
    assert read_to_sentinel(kshim.bootstrap, topic_name, "read_committed") == [b"successor"]


def test_a_transaction_left_open_is_aborted_at_its_timeout(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name)
    tid = f"idle-{topic_name}"
    idle = txn_producer(kshim.bootstrap, tid, **{"transaction.timeout.ms": 2000})
    idle.begin_transaction()
    idle.produce(topic_name, b"abandoned", partition=0)
    assert idle.flush(TIMEOUT_S) == 0
    state, epoch = describe_transaction(kshim.bootstrap, tid)
    assert state == "Ongoing"
    plain_produce(kshim.bootstrap, topic_name, b"later", SENTINEL)
    assert list_offsets_latest(kshim.bootstrap, topic_name, 1) == 0  # held by the open transaction
    # the coordinator aborts it after 2 s: read_committed moves on, without the abandoned record
    assert read_to_sentinel(kshim.bootstrap, topic_name, "read_committed") == [b"later"]
    # ... and fences its producer: the abort bumped the epoch, so the old one is refused as fenced
    wait_until(lambda: describe_transaction(kshim.bootstrap, tid)[0] == "CompleteAbort", TIMEOUT_S,
               message="the timed-out transaction to complete its abort")
    assert describe_transaction(kshim.bootstrap, tid)[1] == epoch + 1
    with pytest.raises(KafkaException) as raised:
        idle.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
