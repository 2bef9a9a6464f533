"""Incremental fetch sessions (KIP-227) and Kafka 4.3's topic-id versions against a real kshim
process over TCP: the Java client (kafka-clients 4.x, which opens a session with a full fetch and
then fetches incrementally at Fetch v18) and kafka-python, and the session rules byte by byte.

The broker logs each session it opens and closes (info) and each incremental fetch (debug, on
here): that is how the tests see that the clients really fetched incrementally.
"""
from __future__ import annotations

import re
import uuid

import pytest

from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import FETCH, RawConnection
from wire.errors import ErrorCode

METADATA = 3
OPENED = re.compile(r"fetch session (\d+) opened for a consumer \((\d+) partitions\)")
INCREMENTAL = re.compile(r"fetch session (\d+): incremental fetch at epoch (\d+)")


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    """A broker of this module's own, logging each incremental fetch (debug)."""
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--partitions", "3", "--log-level", "debug").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-client"))


def sessions_since(kshim, mark: int) -> dict[int, tuple[int, list[int]]]:
    """Consumer sessions opened from log line `mark` on: {id: (partitions, epochs of its
    incremental fetches)}."""
    text = "\n".join(kshim.output[mark:])
    opened = {int(m[1]): (int(m[2]), []) for m in OPENED.finditer(text)}
    for m in INCREMENTAL.finditer(text):
        if int(m[1]) in opened:
            opened[int(m[1])][1].append(int(m[2]))
    return opened


def test_java_consumer_reads_everything_through_an_incremental_session(kshim, java, topic_name):
    n = 300
    start = len(kshim.output)
    sent = java.run("produce", kshim.bootstrap, topic_name, n).of("sent")
    assert len(sent) == n
    mark = len(kshim.output)
    # --extra-ms: the consumer goes on polling an idle topic for a while, through its session
    consumed = java.run("consume", kshim.bootstrap, topic_name, f"g-{topic_name}", n, "--extra-ms", 1500)
    records = consumed.of("record")
    assert sorted((r["partition"], r["offset"]) for r in records) == \
        sorted((s["partition"], s["offset"]) for s in sent), "a record was lost or duplicated"
    assert consumed.of("extra") == []

    sessions = sessions_since(kshim, mark)
    assert any(parts == 3 for parts, _ in sessions.values()), f"no session of the topic's 3 partitions: {sessions}"
    epochs = max((e for _, e in sessions.values()), key=len)
    assert len(epochs) >= 3 and epochs == list(range(1, len(epochs) + 1)), f"incremental fetches: {sessions}"
    # the client sent Kafka 4.3's newest versions, topic ids and all (the broker logs each request at debug)
    assert_sent(kshim, start, [("produce", 13), ("fetch", 18), ("metadata", 13)])


def assert_sent(kshim, mark: int, expected: list[tuple[str, int]]) -> None:
    sent = {(api, int(v)) for api, v in re.findall(r"request (\w+) v(\d+) from", "\n".join(kshim.output[mark:]))}
    for api, version in expected:
        assert (api, version) in sent, f"{api} v{version} not sent: {sorted(sent)}"


def test_java_kip848_consumer_commits_and_fetches_offsets_by_topic_id(kshim, java, topic_name):
    """The consumer protocol's commits are OffsetCommit v10 / OffsetFetch v10 (topic ids): a second
    consumer of the group resumes after the first one's commits."""
    n, first = 40, 15
    group = f"kip848-{topic_name}"
    props = {"group.protocol": "consumer"}
    sent = java.run("produce", kshim.bootstrap, topic_name, n).of("sent")
    mark = len(kshim.output)
    one = java.run("consume", kshim.bootstrap, topic_name, group, first, props=props)
    two = java.run("consume", kshim.bootstrap, topic_name, group, n - first, "--extra-ms", 500, props=props)
    assert two.of("extra") == []
    got = sorted((r["partition"], r["offset"]) for r in one.of("record") + two.of("record"))
    assert got == sorted((s["partition"], s["offset"]) for s in sent)
    assert_sent(kshim, mark, [("offset_commit", 10), ("offset_fetch", 10), ("consumer_group_heartbeat", 1)])
    described = java.run("admin", kshim.bootstrap, "describe-group", group)
    assert described.one("group")["group_type"] == "Consumer"


def test_kafka_python_consumer_through_sessions(kshim, topic_name):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kshim.bootstrap, acks="all")
    for i in range(50):
        producer.send(topic_name, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush(10)
    producer.close()
    mark = len(kshim.output)
    consumer = KafkaConsumer(topic_name, bootstrap_servers=kshim.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, fetch_max_wait_ms=100)
    got = sorted(r.value for r in consumer)
    consumer.close()
    assert got == sorted(b"v%d" % i for i in range(50))
    sessions = sessions_since(kshim, mark)
    epochs = max((e for _, e in sessions.values()), key=len, default=[])
    assert len(epochs) >= 3 and epochs == list(range(1, len(epochs) + 1)), f"incremental fetches: {sessions}"


def raw_fetch(session_id: int, epoch: int, topic_id: uuid.UUID | None, offset: int = 0) -> dict:
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
            "topics": [] if topic_id is None else [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def test_session_rules_on_the_wire(kshim, topic_name):
    with RawConnection(kshim.bootstrap) as conn:
        meta = conn.request(METADATA, 13, {"topics": [{"name": topic_name, "topic_id": uuid.UUID(int=0)}],
                                           "allow_auto_topic_creation": True,
                                           "include_topic_authorized_operations": False})
        assert meta.error_code == 0 and meta.topics[0].error_code == 0
        topic_id = meta.topics[0].topic_id
        assert topic_id != uuid.UUID(int=0)
        full = conn.request(FETCH, 18, raw_fetch(0, 0, topic_id))
        assert full.error_code == 0 and full.session_id != 0
        sid = full.session_id
        idle = conn.request(FETCH, 18, raw_fetch(sid, 1, None))
        assert (idle.error_code, idle.session_id, idle.responses) == (0, sid, [])  # nothing new: no partition
        stale = conn.request(FETCH, 18, raw_fetch(sid, 1, None))
        assert (stale.error_code, stale.session_id) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
        unknown = conn.request(FETCH, 18, raw_fetch(sid ^ 0x5A5A, 1, None))
        assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        names = conn.request(FETCH, 12, {**raw_fetch(sid, 2, None), "replica_id": -1})
        assert names.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        stranger = conn.request(FETCH, 18, raw_fetch(0, -1, uuid.uuid4()))
        assert stranger.session_id == 0
        assert stranger.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        closing = conn.request(FETCH, 18, raw_fetch(sid, -1, None))
        assert (closing.error_code, closing.session_id) == (0, 0)
        gone = conn.request(FETCH, 18, raw_fetch(sid, 3, None))
        assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_java_consumer_opens_a_new_session_when_a_restarted_broker_forgot_its_own(java, tmp_path, topic_name):
    """A restarted broker knows no session (sessions live in memory, as in Kafka): the consumer,
    whose connection dropped, starts over with a full fetch that opens a new session, and reads
    on from its positions; on close() it closes the session (epoch -1)."""
    proc = KshimProcess(tmp_path / "kshim-data", "--partitions", "3", "--log-level", "debug").start()
    try:
        first = java.run("produce", proc.bootstrap, topic_name, 60).of("sent")
        # assigned partitions, no group: positions stay in the consumer across the restart
        run = java.start("consume", proc.bootstrap, topic_name, "-", 120, "--assign", "--timeout-ms", 80_000,
                         timeout=90)
        wait_until(lambda: any(len(e) >= 2 for _, e in sessions_since(proc, 0).values()), 60,
                   message="the consumer fetching incrementally")
        assert proc.terminate() == 0
        mark = len(proc.output)
        proc.restart()
        second = java.run("produce", proc.bootstrap, topic_name, 60).of("sent")
        records = java.finish(run).of("record")
        assert sorted((r["partition"], r["offset"]) for r in records) == \
            sorted((s["partition"], s["offset"]) for s in first + second)
        renewed = sessions_since(proc, mark)
        assert any(epochs for _, epochs in renewed.values()), f"no new incremental session: {renewed}"
        # the broker logs the closing fetch as it answers it: the line may follow the consumer's exit
        wait_until(lambda: any(f"fetch session {sid} closed by its client" in "\n".join(proc.output[mark:])
                               for sid in sessions_since(proc, mark)), 30, message="the session closed on close()")
    finally:
        proc.kill()
