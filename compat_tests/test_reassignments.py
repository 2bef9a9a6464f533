"""Partition reassignments on `kshim serve --brokers 3` (docs/cluster.md), driven by kafka-python's
admin client and the Java Admin client (confluent-kafka's AdminClient has no reassignment call; its
producer and consumer carry the traffic, and its describe_topics shows the result): alter, list,
cancel and Kafka's errors; and the issue's proof, a partition moved twice between brokers (each
time off its leader) under a running idempotent producer and a read_committed consumer, which lose,
duplicate and reorder nothing, while the brokers that lose their replica delete it.
"""
from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import wait_until
from compat_tests.test_admin_ops import java_admin

MOVE_DEADLINE_S = 30.0  # a new replica catches up and joins the ISR; generous for a loaded machine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("cluster"), 3, "--group-initial-rebalance-delay-ms", "0")) as c:
        yield c


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-reassign"))


@pytest.fixture
def kadmin(cluster):
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


def placed(cluster: Cluster, kadmin: KafkaAdminClient, topic: str) -> tuple[int, int, int]:
    """A new topic of one partition and two replicas: (its leader, its other replica, the third broker)."""
    kadmin.create_topics([NewTopic(topic, 1, 2)])
    p = wait_until(lambda: _led(cluster.partition(topic)), message=f"{topic}-0 has a leader")
    follower = next(r for r in p["replicas"] if r != p["leader"])
    return p["leader"], follower, next(n for n in range(3) if n not in p["replicas"])


def _led(p: dict) -> dict | None:
    return p if p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) else None


def replica_dir(cluster: Cluster, node: int, topic: str):
    return cluster.data_dir / f"broker-{node}" / f"{topic}-0"


class Isolated:
    """`kshim ctl isolate NODE` for a block: its new replica cannot catch up, so a reassignment
    onto it stays under way for as long as the test looks at it."""

    def __init__(self, cluster: Cluster, node: int) -> None:
        self.cluster, self.node = cluster, node

    def __enter__(self) -> None:
        assert run_ctl(self.cluster.data_dir, "isolate", str(self.node)).returncode == 0

    def __exit__(self, *exc) -> None:
        assert run_ctl(self.cluster.data_dir, "heal", str(self.node)).returncode == 0


# ---------------------------------------------------------------- kafka-python

def test_kafka_python_alters_lists_and_cancels(cluster, kadmin, topic_name):
    leader, follower, third = placed(cluster, kadmin, topic_name)
    tp = TopicPartition(topic_name, 0)
    with Isolated(cluster, third):
        assert kadmin.alter_partition_reassignments({tp: [follower, third]}) == {tp: None}
        # under way: the target first, then the replica being removed, as Kafka lists it
        assert kadmin.list_partition_reassignments() == {
            tp: {"replicas": [follower, third, leader], "adding_replicas": [third], "removing_replicas": [leader]}}
        assert kadmin.list_partition_reassignments({topic_name: [0, 1]}) == kadmin.list_partition_reassignments([tp])
        p = cluster.partition(topic_name)
        assert (p["adding"], p["removing"], p["leader"]) == ([third], [leader], leader)
        assert {n: s["state"] for n, s in p["replica_states"].items()} == {
            str(follower): "online", str(third): "adding", str(leader): "removing"}
        table = run_ctl(cluster.data_dir, "status", "--table").stdout
        assert f"{third}:adding/" in table and f"{leader}:removing/" in table, table
        wait_until(lambda: replica_dir(cluster, third, topic_name).is_dir(), message="the new replica created")
        # errors, each partition on its own
        out = kadmin.alter_partition_reassignments({TopicPartition(topic_name, 3): [0], tp: [follower, 9],
                                                    TopicPartition("no-such-topic", 0): [0]})
        assert {t.topic + f"-{t.partition}": e and e.__name__ for t, e in out.items()} == {
            f"{topic_name}-3": "UnknownTopicOrPartitionError", f"{topic_name}-0": "InvalidReplicationAssignmentError",
            "no-such-topic-0": "UnknownTopicOrPartitionError"}
        # cancelled: back to the original replicas; the replica that was being added is deleted
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert kadmin.list_partition_reassignments() == {}
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: kerrors.NoReassignmentInProgressError}
        p = cluster.partition(topic_name)
        assert (sorted(p["replicas"]), p["leader"], p["adding"], p["removing"]) == (
            sorted([leader, follower]), leader, [], [])
        wait_until(lambda: not replica_dir(cluster, third, topic_name).exists(), message="the cancelled replica deleted")


# ---------------------------------------------------------------- the Java Admin client

def test_java_admin_alters_lists_and_cancels(cluster, kadmin, java, topic_name):
    leader, follower, third = placed(cluster, kadmin, topic_name)
    t = topic_name
    with Isolated(cluster, third):
        out = java_admin(java, cluster.bootstrap,
                         ["reassign", "keep-rf", f"{t}:0={leader}:{follower}:{third}"],
                         ["reassign", f"{t}:0={leader}:9"], ["reassign", f"{t}:0={leader}:{leader}"],
                         ["reassign", f"{t}:0=cancel"], ["reassign", f"{t}:4={leader}"],
                         ["reassign", "keep-rf", f"{t}:0={follower}:{third}"],
                         ["list-reassignments"], ["list-reassignments", f"{t}:0"],
                         ["reassign", f"{t}:0=cancel"], ["list-reassignments"])
    key = f"{t}-0"
    assert [line["results"] for line in out[:6]] == [
        {key: "InvalidReplicationFactorException"}, {key: "InvalidReplicaAssignmentException"},
        {key: "InvalidReplicaAssignmentException"}, {key: "NoReassignmentInProgressException"},
        {f"{t}-4": "UnknownTopicOrPartitionException"}, {key: None}]
    ongoing = {key: {"replicas": [follower, third, leader], "adding": [third], "removing": [leader]}}
    assert out[6]["reassignments"] == ongoing and out[7]["reassignments"] == ongoing
    assert out[8]["results"] == {key: None} and out[9]["reassignments"] == {}


# ---------------------------------------------------------------- the proof: a move under traffic

class Traffic:
    """An idempotent acks=all producer (or a plain acks=1 one) writing 0, 1, 2... to partition 0 and
    a read_committed consumer reading it, each in its own thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, acks: str = "all") -> None:
        self.bootstrap, self.topic, self.acks = bootstrap, topic, acks
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.read: list[int] = []
        self.stop_producing, self.stop_reading = threading.Event(), threading.Event()
        self.left_unflushed = -1
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def __enter__(self) -> "Traffic":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_producing.set()
        self.stop_reading.set()
        for t in self.threads:
            t.join(60)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": self.acks == "all",
                             "acks": self.acks, "linger.ms": 5 if self.acks == "all" else 0, "log_level": 3})

        def delivered(err, msg) -> None:
            if err is None:
                self.acked.append(int(msg.value()))
            else:
                self.failed.append(err.name())

        n = 0
        while not self.stop_producing.is_set():
            for _ in range(20):
                producer.produce(self.topic, value=b"%d" % n, partition=0, on_delivery=delivered)
                n += 1
            producer.poll(0.01)  # serves the delivery callbacks; paces the producer a little
        self.left_unflushed = producer.flush(60)

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-reader",
                             "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 3})
        consumer.assign([CTopicPartition(self.topic, 0, 0)])
        try:
            while not self.stop_reading.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        self.read.append(int(msg.value()))
        finally:
            consumer.close()

    def acked_more(self, count: int) -> None:
        target = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= target or self.failed, MOVE_DEADLINE_S,
                   message=f"{count} more records acked")
        assert not self.failed, self.failed


def moved(cluster: Cluster, topic: str, replicas: list[int]) -> dict:
    """The partition once its reassignment to `replicas` completed."""
    return wait_until(lambda: (p := cluster.partition(topic))["replicas"] == replicas and not p["adding"]
                      and not p["removing"] and p["leader"] == replicas[0] and p, MOVE_DEADLINE_S,
                      message=f"{topic}-0 moved to {replicas}")


def test_a_partition_moves_under_an_idempotent_producer_and_a_read_committed_consumer(cluster, kadmin, topic_name):
    a, b, c = placed(cluster, kadmin, topic_name)  # a leads
    tp = TopicPartition(topic_name, 0)
    with Traffic(cluster.bootstrap, topic_name) as traffic:
        traffic.acked_more(300)
        # [a, b] -> [b, c]: c is created and catches up; a, the leader, is removed: b leads
        epoch = cluster.partition(topic_name)["leader_epoch"]
        assert kadmin.alter_partition_reassignments({tp: [b, c]}) == {tp: None}
        first = moved(cluster, topic_name, [b, c])
        assert first["isr"] == [b, c] and first["leader_epoch"] > epoch
        wait_until(lambda: not replica_dir(cluster, a, topic_name).exists(), MOVE_DEADLINE_S,
                   message=f"broker {a} deleted its replica")
        traffic.acked_more(300)
        # [b, c] -> [c, a]: a gets a new replica from scratch; b, the leader now, is removed: c leads
        assert kadmin.alter_partition_reassignments({tp: [c, a]}) == {tp: None}
        second = moved(cluster, topic_name, [c, a])
        wait_until(lambda: not replica_dir(cluster, b, topic_name).exists(), MOVE_DEADLINE_S,
                   message=f"broker {b} deleted its replica")
        traffic.acked_more(300)
        traffic.stop_producing.set()
        traffic.threads[0].join(90)
        assert traffic.left_unflushed == 0 and not traffic.failed, traffic.failed
        acked = list(traffic.acked)
        wait_until(lambda: len(traffic.read) >= len(acked), MOVE_DEADLINE_S, message="every acked record read")
    # every acked record read exactly once, in the order produced; nothing read that was not acked
    assert acked == sorted(acked) and len(set(acked)) == len(acked)
    assert traffic.read == acked, (len(traffic.read), len(acked))
    # the clients see the new placement (Metadata), confluent-kafka's admin client included
    cadmin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # held: its futures die with it
    desc = cadmin.describe_topics(TopicCollection([topic_name]))[topic_name].result(30)
    part = desc.partitions[0]
    assert ([r.id for r in part.replicas], part.leader.id, sorted(r.id for r in part.isr)) == (
        [c, a], c, sorted([c, a]))
    assert second["leader_epoch"] > first["leader_epoch"]


def test_an_unreplicated_partition_moves_under_an_acks_1_producer_losing_nothing_acknowledged(cluster, kadmin,
                                                                                              topic_name):
    """Each move completes off the leader with records arriving: the leader hands over (takes no
    appends until the target holds its whole log), so no acks=1 record it acknowledged stays behind
    on it, though no process crashed."""
    kadmin.create_topics([NewTopic(topic_name, 1, 1)])
    first = wait_until(lambda: _led(cluster.partition(topic_name)), message=f"{topic_name}-0 has a leader")
    tp = TopicPartition(topic_name, 0)
    at = first["leader"]
    with Traffic(cluster.bootstrap, topic_name, acks="1") as traffic:
        traffic.acked_more(300)
        for _ in range(4):
            at = (at + 1) % 3
            assert kadmin.alter_partition_reassignments({tp: [at]}) == {tp: None}
            moved(cluster, topic_name, [at])
            traffic.acked_more(300)
        traffic.stop_producing.set()
        traffic.threads[0].join(90)
        assert traffic.left_unflushed == 0 and not traffic.failed, traffic.failed
        acked = set(traffic.acked)
        try:
            wait_until(lambda: acked <= set(traffic.read), MOVE_DEADLINE_S, message="every acked record read")
        except AssertionError:
            pass  # said below: which ones
    lost = sorted(acked - set(traffic.read))
    assert not lost, f"{len(lost)} acknowledged records lost: {lost[:20]}"
