"""Several log directories (`kshim serve --log-dirs A,B`) seen and changed with the admin clients:
DescribeLogDirs, DescribeReplicaLogDirs and AlterReplicaLogDirs from the Java Admin client and
kafka-python, and a replica moved between dirs under a running idempotent producer loses,
duplicates and reorders nothing. One broker: a move is within a broker, and a single process
starts quickly (a cluster's brokers each get their own subdirectories of the dirs, tested in
tests/test_log_dirs.py).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import TopicPartitionReplica
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.test_admin_ops import java_admin

DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("logdirs")
    return [base / "a", base / "b"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, dirs):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--log-dirs", ",".join(map(str, dirs)),
                        "--group-initial-rebalance-delay-ms", "0").start()
    yield proc
    assert proc.terminate() == 0, proc.logs()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-logdirs"))


@pytest.fixture
def kadmin(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


def broker_dirs(dirs: list[Path], broker: int) -> list[str]:
    return [str(d) for d in dirs]


def current_dir(kadmin: KafkaAdminClient, broker: int, topic: str, index: int) -> tuple[str | None, bool]:
    """(the dir holding the replica, whether a future replica is moving elsewhere)."""
    [answer] = kadmin.describe_log_dirs({topic: [index]}, brokers=[broker])
    current, future = None, False
    for log_dir in answer["log_dirs"]:
        for t in log_dir["topics"]:
            for p in t["partitions"]:
                if p["is_future_key"]:
                    future = True
                else:
                    current = log_dir["log_dir"]
    return current, future


def test_the_broker_lists_both_dirs_and_spreads_replicas(cluster, dirs, kadmin, java):
    kadmin.create_topics([NewTopic("spread", 6, 1)])
    out = java_admin(java, cluster.bootstrap, ["log-dirs", "0"])
    assert sorted(line["path"] for line in out) == sorted(broker_dirs(dirs, 0))
    counts = [len([r for r in line["replicas"] if r.startswith("spread-")]) for line in out]
    assert sum(counts) == 6 and max(counts) - min(counts) <= 1  # the emptier dir takes each new one
    assert all(line["error"] is None and 0 < line["usable_bytes"] <= line["total_bytes"] for line in out)
    for i in range(6):  # each replica in exactly one dir
        assert sum(Path(d, f"spread-{i}").is_dir() for d in broker_dirs(dirs, 0)) == 1


def test_alter_replica_log_dirs_errors(cluster, dirs, kadmin, java):
    kadmin.create_topics([NewTopic("errs", 1, 1)])
    out = kadmin.alter_replica_log_dirs({
        TopicPartitionReplica("errs", 0, 0): "/no/such/dir",
        TopicPartitionReplica("errs", 7, 0): broker_dirs(dirs, 0)[0]})
    assert out[TopicPartitionReplica("errs", 0, 0)] is kerrors.LogDirNotFoundError
    assert out[TopicPartitionReplica("errs", 7, 0)] is kerrors.ReplicaNotAvailableError
    [line] = java_admin(java, cluster.bootstrap, ["alter-log-dirs", "0", "/no/such/dir", "errs:0"])
    assert line["error"] == "LogDirNotFoundException"


def test_a_move_under_a_running_producer_loses_nothing(cluster, dirs, kadmin, java):
    topic = "moving"
    kadmin.create_topics([NewTopic(topic, 1, 1, topic_configs={"segment.bytes": "1048576"})])
    holders = [0]
    sent: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def produce() -> None:
        for i in range(10_000_000):
            if stop.is_set():
                break
            value = b"%08d" % i + b"." * 300
            producer.produce(topic, value=value, partition=0,
                             on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
            sent.append(value)
            producer.poll(0)
            if i % 500 == 499:
                producer.flush(DEADLINE_S)
        assert producer.flush(DEADLINE_S) == 0

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(sent) > 20_000, DEADLINE_S, message="a few MiB produced before the move")
        moves = {}
        targets = {}
        for broker in holders:
            now, _ = current_dir(kadmin, broker, topic, 0)
            targets[broker] = next(d for d in broker_dirs(dirs, broker) if d != now)
            moves[TopicPartitionReplica(topic, 0, broker)] = targets[broker]
        out = kadmin.alter_replica_log_dirs(moves)
        assert all(error is kerrors.NoError for error in out.values()), out
        for broker in holders:
            wait_until(lambda: current_dir(kadmin, broker, topic, 0) == (targets[broker], False), DEADLINE_S,
                       message=f"broker {broker}'s replica in {targets[broker]}")
        replica_dirs = java_admin(java, cluster.bootstrap, ["replica-log-dirs", str(holders[0]), f"{topic}:0"])
        assert [(r["current"], r["future"]) for r in replica_dirs] == [(targets[holders[0]], None)]
        wait_until(lambda: len(sent) > 30_000, DEADLINE_S, message="more produced after the move")
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not errors and not thread.is_alive()
    for broker in holders:  # the source copy is deleted; only the destination holds the replica
        source = next(Path(d, f"{topic}-0") for d in broker_dirs(dirs, broker) if d != targets[broker])
        wait_until(lambda: not source.exists(), DEADLINE_S, message=f"{source} deleted")
        assert Path(targets[broker], f"{topic}-0").is_dir()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "move-check", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert len(got) == len(sent) and got == sent  # nothing lost, duplicated or reordered
