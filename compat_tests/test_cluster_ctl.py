"""`kshim serve --brokers 3` as real processes, driven with `kshim ctl` and kafka-python.

What the control plane does, seen from outside: every broker registers and the cluster reports
ready; a topic with replication factor 3 is served through the bootstrap list; killing a leader
fences it after the session timeout and elects a new leader from the ISR with a higher epoch;
`ctl start` brings it back; a paused broker is fenced and registers again once resumed;
isolation shows in the status; SIGTERM stops every broker. Nothing here depends on records
reaching followers (replication is tested on its own).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, free_port_block, pid_exists, run_ctl, running
from compat_tests.kshim_process import wait_until

DEADLINE_S = 15.0  # for fencing: the session timeout, plus a session check, plus slack for a busy machine
SEND_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("cluster"), 3)) as c:
        yield c


def create_topic(cluster: Cluster, name: str, partitions: int, replication_factor: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication_factor)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> list[tuple[int, int]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=5, linger_ms=5)
    try:
        futures = [producer.send(topic, v, partition=partition) for v in values]
        producer.flush(SEND_TIMEOUT_S)
        return [(md.partition, md.offset) for md in (f.get(SEND_TIMEOUT_S) for f in futures)]
    finally:
        producer.close(timeout=5)


def consume(bootstrap: str, topic: str, starts: dict[int, int], count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
    try:
        consumer.assign([TopicPartition(topic, p) for p in starts])
        for p, offset in starts.items():
            consumer.seek(TopicPartition(topic, p), offset)
        got: list[bytes] = []

        def more() -> bool:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
            return len(got) >= count

        wait_until(more, SEND_TIMEOUT_S, message=f"{count} records from {topic}")
        return got
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------ tests
def test_status_shows_every_broker(cluster):
    result = run_ctl(cluster.data_dir, "status")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["cluster_id"] and status["supervisor"]["pid"] == cluster.process.pid
    assert status["controller"]["state"] == "running" and pid_exists(status["controller"]["pid"])
    brokers = status["brokers"]
    assert [b["id"] for b in brokers] == [0, 1, 2]
    assert [b["port"] for b in brokers] == [cluster.base_port + i for i in range(3)]
    assert all(b["alive"] and not b["isolated"] and b["host"] == "127.0.0.1" for b in brokers)
    assert len({b["pid"] for b in brokers}) == 3 and all(pid_exists(b["pid"]) for b in brokers)
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{cluster.base_port + i}" for i in range(3))
    table = run_ctl(cluster.data_dir, "status", "--table")
    assert table.returncode == 0, table.stderr
    for b in brokers:
        assert f"127.0.0.1:{b['port']}" in table.stdout and str(b["pid"]) in table.stdout


def test_replicated_topic_is_served_through_the_bootstrap_list(cluster, topic_name):
    create_topic(cluster, topic_name, 3, 3)
    partitions = [p for p in cluster.status()["partitions"] if p["topic"] == topic_name]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert sorted(p["replicas"]) == [0, 1, 2] and p["leader"] == p["replicas"][0]
        assert p["isr"] == p["replicas"] and p["leader_epoch"] == 0
    assert len({p["leader"] for p in partitions}) == 3  # leaders spread over the brokers
    values = [b"v%d" % i for i in range(30)]
    produced = produce(cluster.bootstrap, topic_name, values)
    starts = {p: min(o for q, o in produced if q == p) for p, _ in produced}
    assert sorted(consume(cluster.bootstrap, topic_name, starts, len(values))) == sorted(values)
    # the leaders report their log end offsets through their heartbeats
    wait_until(lambda: sum(p["replica_offsets"].get(str(p["leader"]), {}).get("log_end_offset", 0)
                           for p in cluster.status()["partitions"] if p["topic"] == topic_name) == len(values),
               message="log end offsets in the status")


def test_killed_leader_is_replaced_from_the_isr_and_start_brings_it_back(cluster, topic_name):
    create_topic(cluster, topic_name, 1, 3)
    before = cluster.partition(topic_name)
    leader = before["leader"]
    old_pid = cluster.broker(leader)["pid"]
    result = run_ctl(cluster.data_dir, "kill", str(leader))
    assert result.returncode == 0, result.stderr
    assert not pid_exists(old_pid)

    def failed_over():
        p = cluster.partition(topic_name)
        return not cluster.broker(leader)["alive"] and p["leader"] not in (leader, -1) and p

    after = wait_until(failed_over, DEADLINE_S, message=f"broker {leader} fenced and a new leader")
    assert after["leader"] in before["isr"] and after["leader_epoch"] > before["leader_epoch"]
    assert leader not in after["isr"]
    assert cluster.broker(leader)["process"].startswith("killed")

    again = run_ctl(cluster.data_dir, "kill", str(leader))
    assert again.returncode == 1 and f"broker {leader} is not running" in again.stderr

    # clients go on with the new leader
    values = [b"after-%d" % i for i in range(5)]
    produced = produce(cluster.bootstrap, topic_name, values, partition=0)
    assert consume(cluster.bootstrap, topic_name, {0: produced[0][1]}, len(values)) == values

    result = run_ctl(cluster.data_dir, "start", str(leader))
    assert result.returncode == 0, result.stderr
    back = cluster.broker(leader)
    assert back["alive"] and back["process"] == "running" and back["pid"] != old_pid and pid_exists(back["pid"])
    again = run_ctl(cluster.data_dir, "start", str(leader))
    assert again.returncode == 1 and "already running" in again.stderr


def test_paused_broker_is_fenced_and_registers_again_once_resumed(cluster):
    node = 2
    epoch = cluster.broker(node)["epoch"]
    assert run_ctl(cluster.data_dir, "pause", str(node)).returncode == 0
    try:
        wait_until(lambda: not cluster.broker(node)["alive"], DEADLINE_S, message=f"broker {node} fenced")
        assert cluster.broker(node)["process"] == "paused"
    finally:
        resumed = run_ctl(cluster.data_dir, "resume", str(node))
    assert resumed.returncode == 0, resumed.stderr
    back = wait_until(lambda: (b := cluster.broker(node))["alive"] and b, DEADLINE_S, message=f"broker {node} back")
    assert back["epoch"] > epoch and back["process"] == "running"


def test_isolate_and_heal_show_in_the_status(cluster):
    assert run_ctl(cluster.data_dir, "isolate", "1").returncode == 0
    try:
        assert [b["isolated"] for b in cluster.status()["brokers"]] == [False, True, False]
    finally:
        assert run_ctl(cluster.data_dir, "heal", "1").returncode == 0
    assert not any(b["isolated"] for b in cluster.status()["brokers"])


def test_ctl_errors(cluster, tmp_path):
    for command in ("kill", "start", "pause", "resume", "isolate", "heal"):
        result = run_ctl(cluster.data_dir, command, "7")
        assert result.returncode == 1 and "no broker 7" in result.stderr, (command, result.stderr)
    result = run_ctl(cluster.data_dir, "resume", "0")
    assert result.returncode == 1 and "not paused" in result.stderr
    result = run_ctl(tmp_path, "status")
    assert result.returncode == 1 and "no kshim is running" in result.stderr
    # a second cluster on the same data dir is refused; so is --port 0
    second = subprocess.run([sys.executable, "-m", "kshim", "serve", "--brokers", "3", "--port",
                             str(free_port_block(3)), "--data-dir", str(cluster.data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1 and "is in use by kshim serve --brokers 3" in second.stderr, second.stderr
    port0 = subprocess.run([sys.executable, "-m", "kshim", "serve", "--brokers", "2", "--port", "0",
                            "--data-dir", str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert port0.returncode == 2 and "--port 0 is not supported with --brokers" in port0.stderr


def test_one_broker_cluster_stops_on_sigterm(tmp_path):
    with running(Cluster(tmp_path / "one", 1)) as c:
        status = c.status()
        assert [(b["id"], b["alive"]) for b in status["brokers"]] == [(0, True)]
        assert status["supervisor"]["pid"] == c.process.pid
        assert len({c.process.pid, status["controller"]["pid"], status["brokers"][0]["pid"]}) == 3
        create_topic(c, "solo", 1, 1)
        produced = produce(c.bootstrap, "solo", [b"x"])
        assert consume(c.bootstrap, "solo", {0: produced[0][1]}, 1) == [b"x"]
