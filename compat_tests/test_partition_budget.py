"""A broker hosts no more partitions than it can open again (docs/robustness.md): past its budget
CreateTopics and CreatePartitions fail with POLICY_VIOLATION at once, and the broker keeps
serving and restarts, even under a small open-file limit."""
from __future__ import annotations

import resource
import time

import pytest
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import PolicyViolationError

from compat_tests.kshim_process import KshimProcess
from compat_tests.raw_kafka import produce_and_consume


def admin(broker: KshimProcess) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def test_a_huge_create_topics_is_refused_at_once_and_the_broker_restarts(tmp_path, topic_name):
    broker = KshimProcess(tmp_path / "data", "--max-partitions-per-broker", "500").start()
    try:
        a = admin(broker)
        try:
            started = time.monotonic()
            with pytest.raises(PolicyViolationError, match="limit of 500"):
                a.create_topics([NewTopic("huge", 8193, 1)])
            assert time.monotonic() - started < 5
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
