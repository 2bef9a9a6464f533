"""Share consumers closing (KIP-932): confluent-kafka's ShareConsumer against a real kshim whose
records lock for 1 s, the broker settings confluent-kafka-python's own share-consumer tests give
Kafka. What a member settled just before close() stays settled, what it still held goes to the
next consumer, and its acknowledgement callback hears of no error.

librdkafka's close() sends its leave heartbeat to the group coordinator while its last
acknowledgements (a ShareAcknowledge, then the closing request with share session epoch -1) go to
the partition leader; the leave may be handled first. As in Kafka, leaving the group does not end
the share session: the acknowledgements apply, then the member's other records go back.

- A whole batch accepted, rejected, or accepted with acknowledge_offset(), then close(): `kshim ctl
  groups` shows the share partition's start offset past every record and none acquired, and the
  next consumer gets only the record produced afterwards.
- commit_async() then close() at once: the same, and the callback (close() fires it) has every
  offset and no error.
- Half a batch accepted, then close(): the next consumer gets the other half, delivery count 2,
  never the accepted half.
- The same race in a fixed order, in raw protocol: the leave heartbeat, then the closing
  ShareAcknowledge (epoch -1) accepting two records and rejecting one: answered with no error, the
  session gone after it (SHARE_SESSION_NOT_FOUND), the fourth record at the next consumer with
  delivery count 2.
Every wait has a deadline.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from compat_tests.fixture_configs import CONFLUENT_KAFKA_PYTHON_USERS, write_confluent_kafka_python
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection
from compat_tests.test_share_consumers import new_topic_and_group
from kshim.ctl.groups import share_in_flight
from wire.errors import ErrorCode

LOCK_MS = 1000
RECORDS = 4
METADATA, SHARE_HEARTBEAT, SHARE_FETCH, SHARE_ACK = 3, 76, 78, 79
ACCEPT, REJECT = 1, 3  # the protocol's acknowledge types


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    """Started with the server.properties confluent-kafka-python's suite gives Kafka (trivup's),
    unchanged: 1 s record locks among its lines."""
    data = tmp_path_factory.mktemp("kshim-data")
    path = data.parent / f"{data.name}.properties"
    port = write_confluent_kafka_python(path, data)
    proc = KshimProcess(data, "--group-initial-rebalance-delay-ms", "0", "--config-file", str(path),
                        *CONFLUENT_KAFKA_PYTHON_USERS, port=port).start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


def setup(bootstrap: str) -> tuple[str, str]:
    """A new one-partition topic holding RECORDS records in one batch, and a new group starting at
    earliest (share.auto.offset.reset, a GROUP config)."""
    topic, group = new_topic_and_group(bootstrap, "sc")
    produce(bootstrap, topic, range(RECORDS))
    return topic, group


def produce(bootstrap: str, topic: str, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "log_level": 3})
    for i in values:
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def first_batch(c: ShareConsumer) -> list:
    """The records of the first poll that returns any (the whole batch: RECORDS records)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = [m for m in c.poll(0.5) if m.error() is None]
        if batch:
            assert [m.offset() for m in batch] == list(range(RECORDS))
            return batch
    raise AssertionError("no records within 30 s")


def in_flight(kshim, group: str) -> dict:
    [row] = share_in_flight(kshim.data_dir, group, {})
    return row


def assert_settled(kshim, group: str, start: int) -> None:
    """`kshim ctl groups`: every record below `start` done with, none acquired."""
    wait_until(lambda: (row := in_flight(kshim, group))["start_offset"] == start and row["acquired"] == 0, 20,
               message=f"the share partition's start offset at {start} with nothing acquired")


def next_consumer_reads(kshim, topic: str, group: str, until: int) -> list[tuple[int, int]]:
    """(offset, delivery count) of what a new member of the group gets, up to offset `until`."""
    c = consumer(kshim.bootstrap, group, topic)
    got: list[tuple[int, int]] = []
    try:
        def reached() -> bool:
            for m in c.poll(0.3):
                if m.error() is None:
                    got.append((m.offset(), m.delivery_count()))
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            return any(offset == until for offset, _ in got)
        wait_until(reached, 30, interval=0, message=f"offset {until} at the next consumer")
    finally:
        c.close()
    return got


@pytest.mark.parametrize("how", ["accept", "reject", "acknowledge_offset", "commit_async"])
def test_what_was_settled_before_close_stays_settled(kshim, how):
    topic, group = setup(kshim.bootstrap)
    c = consumer(kshim.bootstrap, group, topic)
    heard: list[tuple[dict, object]] = []
    c.set_acknowledgement_commit_callback(lambda offsets, exc: heard.append((offsets, exc)))
    try:
        for m in first_batch(c):
            if how == "acknowledge_offset":
                c.acknowledge_offset(m.topic(), m.partition(), m.offset(), AcknowledgeType.ACCEPT)
            else:
                c.acknowledge(m, AcknowledgeType.REJECT if how == "reject" else AcknowledgeType.ACCEPT)
        if how == "commit_async":
            c.commit_async()  # and close at once: close() sends it and fires the callback
    finally:
        c.close()
    assert heard, "the acknowledgement callback never fired"
    assert [exc for _, exc in heard] == [None] * len(heard)
    assert sorted(o for offsets, _ in heard for tp_offsets in offsets.values() for o in tp_offsets) == \
        list(range(RECORDS))
    assert_settled(kshim, group, RECORDS)
    produce(kshim.bootstrap, topic, ["after"])
    assert next_consumer_reads(kshim, topic, group, RECORDS) == [(RECORDS, 1)]


def test_what_was_held_at_close_goes_to_the_next_consumer(kshim):
    topic, group = setup(kshim.bootstrap)
    c = consumer(kshim.bootstrap, group, topic)
    half = RECORDS // 2
    try:
        for m in first_batch(c)[:half]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
    finally:
        c.close()
    got = next_consumer_reads(kshim, topic, group, RECORDS - 1)
    assert sorted(got) == [(offset, 2) for offset in range(half, RECORDS)]
    assert_settled(kshim, group, RECORDS)


def test_a_closing_share_acknowledge_after_the_leave_heartbeat_applies(kshim):
    topic, group = setup(kshim.bootstrap)
    member = str(uuid.uuid4())
    with RawConnection(kshim.bootstrap) as conn:
        def heartbeat(epoch: int, topics: list[str] | None):
            return conn.request(SHARE_HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                                     "rack_id": None, "subscribed_topic_names": topics})
        wait_until(lambda: heartbeat(0, [topic]).error_code == 0, 20, message="the member in the group")
        meta = conn.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                           "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
        topic_id = meta.topics[0].topic_id

        def acks(*batches) -> list[dict]:
            return [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in batches]}]}]
        fetched = conn.request(SHARE_FETCH, 1, {
            "group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait_ms": 5000, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "topics": acks(),
            "forgotten_topics_data": []})
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for t in fetched.responses for p in t.partitions for a in p.acquired_records] == [(0, RECORDS - 1, 1)]
        assert heartbeat(-1, None).member_epoch == -1  # the leave arrives first
        closing = conn.request(SHARE_ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": -1,
                                              "topics": acks((0, 1, ACCEPT), (2, 2, REJECT))})
        assert (closing.error_code, [p.error_code for t in closing.responses for p in t.partitions]) == (0, [0])
        after = conn.request(SHARE_ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": 1,
                                            "topics": []})
        assert after.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert next_consumer_reads(kshim, topic, group, RECORDS - 1) == [(RECORDS - 1, 2)]
    assert_settled(kshim, group, RECORDS)
