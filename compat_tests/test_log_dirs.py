"""Several log directories per broker (`kshim serve --brokers 3 --log-dirs A,B`: broker i keeps its
replicas in A/broker-i and B/broker-i) seen and changed with the admin clients: DescribeLogDirs,
DescribeReplicaLogDirs and AlterReplicaLogDirs from the Java Admin client and kafka-python, and a
replica moved between dirs under a running idempotent producer loses, duplicates and reorders
nothing.
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

from compat_tests.cluster import Cluster, running
from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import wait_until
from compat_tests.test_admin_ops import java_admin, replicas

DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> list[Path]:
    base = tmp_path_factory.mktemp("logdirs")
    return [base / "a", base / "b"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, dirs):
    with running(Cluster(tmp_path_factory.mktemp("cluster"), 3, "--log-dirs", ",".join(map(str, dirs)),
                         "--group-initial-rebalance-delay-ms", "0")) as c:
        yield c


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-logdirs"))


@pytest.fixture
def kadmin(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


def broker_dirs(dirs: list[Path], broker: int) -> list[str]:
    return [str(d / f"broker-{broker}") for d in dirs]


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


def test_each_broker_lists_both_dirs_and_spreads_replicas(cluster, dirs, kadmin, java):
    kadmin.create_topics([NewTopic("spread", 6, 2)])
    holders = replicas(cluster, "spread")
    out = java_admin(java, cluster.bootstrap, ["log-dirs", "0", "1", "2"])
    for broker in range(3):
        mine = [line for line in out if line["broker"] == broker]
        assert sorted(line["path"] for line in mine) == sorted(broker_dirs(dirs, broker))
        counts = [len([r for r in line["replicas"] if r.startswith("spread-")]) for line in mine]
        hosted = sum(1 for rs in holders if broker in rs)
        assert sum(counts) == hosted and max(counts) - min(counts) <= 1  # the emptier dir takes each new one
        assert all(line["error"] is None and 0 < line["usable_bytes"] <= line["total_bytes"] for line in mine)


def test_alter_replica_log_dirs_errors(cluster, dirs, kadmin, java):
    kadmin.create_topics([NewTopic("errs", 1, 1)])
    [[holder]] = replicas(cluster, "errs")
    other = next(b for b in range(3) if b != holder)
    out = kadmin.alter_replica_log_dirs({
        TopicPartitionReplica("errs", 0, holder): "/no/such/dir",
        TopicPartitionReplica("errs", 0, other): broker_dirs(dirs, other)[0]})
    assert out[TopicPartitionReplica("errs", 0, holder)] is kerrors.LogDirNotFoundError
    assert out[TopicPartitionReplica("errs", 0, other)] is kerrors.ReplicaNotAvailableError
    [line] = java_admin(java, cluster.bootstrap, ["alter-log-dirs", str(holder), "/no/such/dir", "errs:0"])
    assert line["error"] == "LogDirNotFoundException"


def test_a_move_under_a_running_producer_loses_nothing(cluster, dirs, kadmin, java):
    topic = "moving"
    kadmin.create_topics([NewTopic(topic, 1, 2, topic_configs={"segment.bytes": "1048576"})])
    [holders] = replicas(cluster, topic)
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
        for broker in holders:  # the leader's replica and the follower's, at once
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
