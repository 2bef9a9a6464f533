"""A broker's partitions are bounded by a memory budget, not by descriptors (docs/robustness.md):
past the budget CreateTopics and CreatePartitions fail with POLICY_VIOLATION at once, and the
broker keeps serving and restarts; under a small open-file limit it hosts far more partitions than
descriptors (segment files are opened on use and closed least recently used first)."""
from __future__ import annotations

import os
import resource

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import PolicyViolationError

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import consume_all, produce_and_consume


def admin(broker: KshimProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def test_a_huge_create_topics_is_refused_at_once_and_the_broker_restarts(tmp_path, topic_name):
    broker = KshimProcess(tmp_path / "data", "--max-partitions-per-broker", "500").start()
    try:
        a = admin(broker)
        try:
            with pytest.raises(PolicyViolationError, match="limit of 500"):
                a.create_topics([NewTopic("huge", 8193, 1)])
            # refused before anything was made, not after opening what fits
            assert not list((tmp_path / "data").glob("huge-*"))
            a.create_topics([NewTopic("fits", 400, 1)])
            with pytest.raises(PolicyViolationError):
                a.create_partitions({"fits": NewPartitions(501)})
            a.create_partitions({"fits": NewPartitions(450)})
            assert "huge" not in a.list_topics()
        finally:
            a.close()
        produce_and_consume(broker.bootstrap, topic_name)
        assert broker.terminate() == 0
        broker.start()
        produce_and_consume(broker.bootstrap, topic_name, b"after restart")
    finally:
        broker.kill()


def _fd_limit_256() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


PARTITIONS = 600  # each with its active segment's 3 files: 1,800 files under 256 descriptors
VALUE = 5000  # two records per partition: the second takes an index entry (index.interval.bytes 4096)


def _produce(bootstrap: str, topic: str, tag: bytes, acked: list | None = None) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "retries": 0})

    def done(err, msg) -> None:
        if err is None and acked is not None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
    for i in range(PARTITIONS):
        p.produce(topic, tag + b"-%03d-" % i + b"x" * VALUE, partition=i, on_delivery=done)
        p.poll(0)
    return p


def _values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every partition's records, read back from the start by one consumer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # one ListOffsets for them all
    listed = admin.list_offsets({TopicPartition(topic, i): OffsetSpec.latest() for i in range(PARTITIONS)},
                                request_timeout=60)
    ends = {tp.partition: f.result(timeout=60).offset for tp, f in listed.items()}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "budget-check", "enable.auto.commit": False,
                  "fetch.message.max.bytes": 1 << 20})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {i: [] for i in range(PARTITIONS)}
    try:
        def complete() -> bool:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                got[m.partition()].append(m.value().rstrip(b"x"))
            return all(len(got[i]) == ends[i] for i in range(PARTITIONS))
        wait_until(complete, timeout=90, message="every record read back")
    finally:
        c.close()
    return got


def test_far_more_partitions_than_descriptors(tmp_path):
    """Segment descriptors are a cache (kshim/log/open_files.py): under a hard limit of 256
    descriptors a broker hosts 600 partitions whose active segments hold 1,800 files, produces to
    (fsyncing every append) and reads from all of them, and a kill -9 in the middle of a produce
    loses no acknowledged record."""
    broker = KshimProcess(tmp_path / "data", "--max-open-segment-files", "64")
    broker.preexec_fn = _fd_limit_256
    broker.start()
    try:
        a = admin(broker)
        try:
            # flush.messages 1: each append's fsync often finds its descriptor evicted since the write
            a.create_topics([NewTopic("wide", PARTITIONS, 1, topic_configs={"flush.messages": "1"})])
        finally:
            a.close()
        for tag in (b"one", b"two"):
            assert _produce(broker.bootstrap, "wide", tag).flush(60) == 0
        assert len(os.listdir(f"/proc/{broker.pid}/fd")) < 256
        assert _values(broker.bootstrap, "wide") == {i: [b"one-%03d-" % i, b"two-%03d-" % i]
                                                     for i in range(PARTITIONS)}
        acked: list = []
        p = _produce(broker.bootstrap, "wide", b"three", acked)
        wait_until(lambda: p.poll(0.05) >= 0 and len(acked) >= PARTITIONS // 3, timeout=60,
                   message="a third of the third round acknowledged")
        broker.kill()  # in the middle of the produce
        p.flush(0)
        broker.start()
        got = _values(broker.bootstrap, "wide")
        for partition, offset, value in acked:
            assert got[partition][offset] == value.rstrip(b"x"), (partition, offset)
        assert all(got[i][:2] == [b"one-%03d-" % i, b"two-%03d-" % i] for i in range(PARTITIONS))
        assert broker.terminate() == 0
        broker.start()  # a clean restart opens the logs within the descriptors too
        assert _values(broker.bootstrap, "wide") == got
    finally:
        broker.kill()


def test_the_budget_error_names_the_memory_budget(tmp_path):
    broker = KshimProcess(tmp_path / "data", "--max-partitions-per-broker", "50").start()
    try:
        a = admin(broker)
        try:
            with pytest.raises(PolicyViolationError, match=r"limit of 50: a memory budget of 32 KiB per partition"):
                a.create_topics([NewTopic("too-many", 60, 1)])
        finally:
            a.close()
    finally:
        broker.kill()


def test_many_segments_fit_a_small_open_file_limit(tmp_path):
    # 20 partitions of 40 one-batch segments each: 800 segment files under a hard limit of 256
    # descriptors. Segments open on use and at most 3/4 of the limit stay open, so producing, a
    # restart and reading everything back all fit.
    broker = KshimProcess(tmp_path / "data")
    broker.preexec_fn = _fd_limit_256
    broker.start()
    try:
        a = admin(broker)
        try:
            a.create_topics([NewTopic("segmented", 20, 1, topic_configs={"segment.bytes": "1024"})])
        finally:
            a.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0,
                                 max_in_flight_requests_per_connection=1)
        try:
            for i in range(40):
                for p in range(20):
                    producer.send("segmented", value=b"%04d" % i + b"." * 1500, partition=p).get(timeout=15)
        finally:
            producer.close()
        segments = sum(1 for _ in (tmp_path / "data").glob("segmented-*/*.log"))
        assert segments >= 800, segments
        assert broker.terminate() == 0
        broker.start()
        for p in (0, 7, 19):
            got = [r.value[:4] for r in consume_all(broker.bootstrap, "segmented", p)]
            assert got == [b"%04d" % i for i in range(40)], (p, got[:3])
        produce_and_consume(broker.bootstrap, "segmented")
    finally:
        broker.kill()
