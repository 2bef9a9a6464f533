"""Replicas come and go without stalling the broker or leaving data behind (docs/robustness.md):
a CreateTopics or DeleteTopics of thousands of partitions opens and removes their logs off the
event loop, so other connections are answered meanwhile; a broker that was down while a topic
was deleted deletes its replica when it returns."""
from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import consume_all, listed_brokers, produce_and_consume
from compat_tests.test_connection_limits import round_trips_during

PARTITIONS = 2000
DEADLINE_S = 60


def partition_dirs(data: Path, topic: str) -> int:
    """How many of `topic`'s partition directories are in `data` (not yet renamed aside)."""
    return sum(1 for p in data.iterdir() if re.fullmatch(re.escape(topic) + r"-\d+", p.name))


def answered_during(bootstrap: str, work: Callable[[], object], in_progress: Callable[[], bool]) -> int:
    """Run `work` in a thread; how many of a bystander's round trips began and ended while
    `in_progress()` (the broker's work seen on disk, halfway) held."""
    with ThreadPoolExecutor(1) as pool:
        future: Future = pool.submit(work)
        answered = round_trips_during(bootstrap, in_progress, lambda: future.done() and not in_progress())
        future.result()
    return answered


def test_thousands_of_partitions_come_and_go_while_others_are_answered(tmp_path, topic_name):
    """The logs are opened (and, on delete, renamed aside) in worker threads, in chunks: a
    bystander begins and ends round trips while some of the partitions' directories are there and
    some not yet (or no longer). Were the work done on the event loop, a round trip begun once the
    first directory appeared would end after the last: none would count."""
    broker = KshimProcess(tmp_path / "data", "--max-partitions-per-broker", str(PARTITIONS + 100)).start()
    data = tmp_path / "data"
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=120_000)
        try:
            answered = answered_during(broker.bootstrap, lambda: admin.create_topics([NewTopic("big", PARTITIONS, 1)]),
                                       lambda: 0 < partition_dirs(data, "big") < PARTITIONS)
            assert answered > 0, "no bystander round trip began and ended while the partitions were being created"
            assert len(admin.describe_topics(["big"])[0]["partitions"]) == PARTITIONS
            produce_and_consume(broker.bootstrap, "big")
            answered = answered_during(broker.bootstrap, lambda: admin.delete_topics(["big"]),
                                       lambda: 0 < partition_dirs(data, "big") < PARTITIONS)
            assert answered > 0, "no bystander round trip began and ended while the partitions were being deleted"
        finally:
            admin.close()
        # renamed aside at once; their files go file.delete.delay.ms (60 s) later, as in Kafka
        wait_until(lambda: not [p for p in data.iterdir() if re.fullmatch(r"big-\d+", p.name)], DEADLINE_S,
                   message="the deleted partitions' directories renamed")
        assert len([p for p in data.iterdir() if p.name.startswith("big-") and p.name.endswith("-delete")]) == PARTITIONS
        produce_and_consume(broker.bootstrap, topic_name)
    finally:
        broker.kill()


def test_a_topic_deleted_while_a_broker_is_down_is_deleted_there_when_it_returns(tmp_path):
    with running(Cluster(tmp_path / "data", 3, "--replication-factor", "3")) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
        try:
            admin.create_topics([NewTopic("doomed", 2, 3)])
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
            for i in range(20):
                producer.produce("doomed", value=b"v%d" % i, partition=i % 2)
            assert producer.flush(30) == 0
            away = tmp_path / "data" / "broker-2"
            assert (away / "doomed-0").is_dir() and (away / "doomed-1").is_dir()
            assert run_ctl(cluster.data_dir, "kill", "2").returncode == 0
            wait_until(lambda: not cluster.broker(2)["alive"], DEADLINE_S, message="broker 2 fenced")
            admin.close()  # it may have picked broker 2 as its controller: ask broker 0 from now on
            # once broker 0's own image has the fence (the controller's comes first), else kafka-python
            # may pick broker 2 from its Metadata and fail on the refused connection
            bootstrap0 = f"127.0.0.1:{cluster.base_port}"
            wait_until(lambda: 2 not in listed_brokers(bootstrap0), DEADLINE_S,
                       message="broker 0's Metadata without broker 2")
            admin = KafkaAdminClient(bootstrap_servers=bootstrap0, request_timeout_ms=30_000)
            admin.delete_topics(["doomed"])
            for node in (0, 1):
                here = tmp_path / "data" / f"broker-{node}"
                wait_until(lambda: not (here / "doomed-0").exists(), DEADLINE_S,
                           message=f"broker {node} deleted its replica")
            assert (away / "doomed-0").is_dir(), "the broker that is down still has its replica"
            # `kshim ctl status` shows its replicas as deleting until it is back (the others' are done)
            wait_until(lambda: sorted((d["partition"], d["node"]) for d in cluster.status()["deleting"]) == [
                (0, 2), (1, 2)], DEADLINE_S, message="broker 2's replicas listed as deleting")
            table = run_ctl(cluster.data_dir, "status", "--table").stdout
            assert "DELETING TOPIC" in table and "doomed" in table, table
            assert run_ctl(cluster.data_dir, "start", "2").returncode == 0
            wait_until(lambda: cluster.broker(2)["alive"], DEADLINE_S, message="broker 2 back")
            # strays: renamed aside with a warning, their files deleted file.delete.delay.ms later
            wait_until(lambda: not [p for p in away.iterdir() if re.fullmatch(r"doomed-\d+", p.name)], DEADLINE_S,
                       message="broker 2 set the stray replicas aside")
            assert sorted(p.name.split(".")[0] for p in away.iterdir() if p.name.endswith("-stray")) == \
                ["doomed-0", "doomed-1"]
            warned = (away / "broker.log").read_text()
            assert "WARNING" in warned and "stray replica doomed-0" in warned
            wait_until(lambda: cluster.status()["deleting"] == [], DEADLINE_S, message="nothing left deleting")
            assert "doomed" not in admin.list_topics()
        finally:
            admin.close()


def test_a_topic_deleted_and_created_again_starts_empty(tmp_path):
    broker = KshimProcess(tmp_path / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
        try:
            for i in range(3):
                admin.create_topics([NewTopic("again", 1, 1)])
                wait_until(lambda: "again" in admin.list_topics(), DEADLINE_S, message="topic created")
                produce_and_consume(broker.bootstrap, "again", b"round %d" % i)
                assert [r.value for r in consume_all(broker.bootstrap, "again", 0)] == [b"round %d" % i]
                admin.delete_topics(["again"])
                wait_until(lambda: "again" not in admin.list_topics(), DEADLINE_S, message="topic deleted")
        finally:
            admin.close()
    finally:
        broker.kill()
