"""A broker hosts no more partitions than it can open again (docs/robustness.md): past its budget
CreateTopics and CreatePartitions fail with POLICY_VIOLATION at once, and the broker keeps
serving and restarts, even under a small open-file limit."""
from __future__ import annotations

import resource

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import PolicyViolationError

from compat_tests.kshim_process import KshimProcess
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


def test_the_default_budget_follows_the_open_file_limit(tmp_path):
    # a hard limit of 256: serve cannot raise it, so it may host (256 - 64) / 6 = 32 partitions
    broker = KshimProcess(tmp_path / "data")
    broker.preexec_fn = _fd_limit_256
    broker.start()
    try:
        a = admin(broker)
        try:
            with pytest.raises(PolicyViolationError, match="limit of 32"):
                a.create_topics([NewTopic("too-many", 40, 1)])
            a.create_topics([NewTopic("some", 20, 1)])
        finally:
            a.close()
        produce_and_consume(broker.bootstrap, "some")
        assert broker.terminate() == 0
        broker.start()  # opens every log again within its descriptors
        produce_and_consume(broker.bootstrap, "some", b"after restart")
    finally:
        broker.kill()


def test_many_segments_fit_a_small_open_file_limit(tmp_path):
    # 20 partitions of 40 one-batch segments each: 800 segment files under a hard limit of 256
    # descriptors. Older segments open on use and at most 64 stay open (an eighth of the limit,
    # at least 64), so producing, a restart and reading everything back all fit.
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
