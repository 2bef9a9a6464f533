"""The multi-broker rows of docs/consistency.md, proved with real clients against `kshim serve
--brokers 3` over TCP.

With followers, COMMITTED and UNCOMMITTED differ: a record the leader accepted is COMMITTED once
the in-sync followers have it (or, with kshim.commit.quorum=majority, a majority of the replicas).
Each test creates its own replication-factor-3 topic, disturbs brokers with `kshim ctl` (pause,
isolate, kill) and undoes all of it in a `finally`, waiting until the cluster is whole again (every
broker alive and connected, its topics' ISR complete) so the next test starts clean.

Two clusters:
- "patient": sessions and replica lag of 60 s, so paused followers stay registered and in the ISR
  for the whole test: records wait to be COMMITTED instead of the ISR shrinking around them;
- "quick": a 2 s session and 1.5 s replica lag, for the rows about the ISR shrinking and failover.

Clients bootstrap only from brokers that stay up, so none of them waits on a paused broker.
"""
from __future__ import annotations

import time
import uuid
from contextlib import suppress

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NotEnoughReplicasError

from compat_tests.cluster import Cluster, running
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import listed_isr
from kshim.ctl.status import command as ctl_command

TIMEOUT = 15.0  # seconds, for one client operation or one state change of the cluster
WHOLE_S = 30.0  # to get back to a whole cluster after a test (re-registering, catching up)
QUIET_S = 1.0  # how long a consumer polls to show that records it must not see do not come
ACKS_ALL_TIMEOUT_MS = 2000  # the produce timeout of acks=all requests meant to time out

PATIENT_LAG_MS = 60000
QUICK_SESSION_MS, QUICK_LAG_MS = 2000, 1500


# ------------------------------------------------------------------------------------------ clusters
def _cluster(tmp_path_factory, name: str, session_ms: int, lag_ms: int):
    with running(Cluster(tmp_path_factory.mktemp(name), 3, "--replica-lag-time-max-ms", str(lag_ms),
                         session_timeout_ms=session_ms)) as c:
        yield c


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """Paused followers stay in the ISR: an acks=all produce waits for them."""
    yield from _cluster(tmp_path_factory, "patient", PATIENT_LAG_MS, PATIENT_LAG_MS)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Paused or cut-off followers leave the ISR within ~2 s; a killed leader is replaced as fast."""
    yield from _cluster(tmp_path_factory, "quick", QUICK_SESSION_MS, QUICK_LAG_MS)


def run(cluster: Cluster, command: str, *nodes: int) -> None:
    """`kshim ctl <command> NODE` for each node (in-process: the same request to the controller)."""
    for node in nodes:
        ctl_command(cluster.data_dir, command, node)


def address(cluster: Cluster, *nodes: int) -> str:
    """A bootstrap list of just these brokers."""
    brokers = {b["id"]: b for b in cluster.status()["brokers"]}
    return ",".join(f"{brokers[n]['host']}:{brokers[n]['port']}" for n in nodes)


def create_topic(cluster: Cluster, name: str, configs: dict[str, str] | None = None) -> tuple[int, list[int]]:
    """A topic of 1 partition on all 3 brokers; (leader, followers) once its ISR is complete."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 3, topic_configs=configs or {})])
    finally:
        admin.close()
    p = wait_until(lambda: (p := cluster.partition(name))["leader"] >= 0 and len(p["isr"]) == 3 and p,
                   TIMEOUT, message=f"{name} led, with an ISR of 3")
    return p["leader"], [r for r in p["replicas"] if r != p["leader"]]


def whole(cluster: Cluster, topics: list[str]) -> bool:
    status = cluster.status()
    if not all(b["alive"] and not b["isolated"] and b["process"] == "running" for b in status["brokers"]):
        return False
    parts = [p for p in status["partitions"] if p["topic"] in topics]
    return all(p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts)


def restore(cluster: Cluster, topics: list[str]) -> None:
    """Undo every pause, isolation and kill, then wait until the cluster is whole again."""
    for b in cluster.status()["brokers"]:
        if b["process"] == "paused":
            run(cluster, "resume", b["id"])
        elif b["process"] != "running":
            run(cluster, "start", b["id"])
        if b["isolated"]:
            run(cluster, "heal", b["id"])
    wait_until(lambda: whole(cluster, topics), WHOLE_S,
               message=f"every broker alive and connected, ISR of 3 for {topics}: {cluster.status()}")


# ------------------------------------------------------------------------------------------ clients
class Clients:
    """The clients of one test; all closed at its end (after its `finally` restored the cluster),
    whatever happened."""

    def __init__(self) -> None:
        self._closers = []

    def producer(self, bootstrap: str, acks: str, **conf) -> Producer:
        """confluent-kafka: its delivery reports are what a user checks."""
        p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 1, "log_level": 3, **conf})
        self._closers.append(lambda: (p.purge(), p.close()))  # a failed test may leave messages in flight
        return p

    def timing_out_producer(self, bootstrap: str) -> Producer:
        """acks=all with a short produce timeout (the broker's), no retries, and a long delivery
        timeout, so the error reported is the broker's own answer."""
        return self.producer(bootstrap, "all", **{"request.timeout.ms": ACKS_ALL_TIMEOUT_MS,
                                                   "message.timeout.ms": 10000, "retries": 0})

    def kafka_producer(self, bootstrap: str, acks, topics: list[str], **conf) -> KafkaProducer:
        """kafka-python, without retries: each error reaches the caller as the broker gave it.
        Its metadata is fetched now, while every broker still answers."""
        p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, retries=0, linger_ms=0, **conf)
        self._closers.append(lambda: p.close(timeout=5))
        for topic in topics:
            assert p.partitions_for(topic) == {0}
        return p

    def consumer(self, bootstrap: str, isolation: str) -> Consumer:
        # consumers assign partitions themselves and never commit (groups: test_groups.py)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "isolation.level": isolation, "fetch.wait.max.ms": 100,
                      # a request librdkafka sends to a paused broker (metadata, the group's
                      # coordinator) gives up after 5 s and goes elsewhere, not after 60 s
                      "socket.timeout.ms": 5000, "log_level": 3})
        self._closers.append(c.close)
        return c

    def close(self) -> None:
        for close in reversed(self._closers):
            with suppress(Exception):
                close()


@pytest.fixture
def clients():
    c = Clients()
    yield c
    c.close()


def produce_outcomes(producer: Producer, topic: str, values: list[bytes]) -> list[tuple]:
    """Produce and wait for every delivery report: (error or None, offset, seconds it took) each."""
    outcomes: list[tuple] = []
    started = time.monotonic()

    def report(err, msg):
        outcomes.append((err, msg.offset(), time.monotonic() - started))

    for v in values:
        producer.produce(topic, value=v, partition=0, on_delivery=report)
    assert producer.flush(TIMEOUT) == 0, "deliveries still outstanding"
    return outcomes


def produce(producer: Producer, topic: str, values: list[bytes]) -> list[int]:
    """Produce; every delivery must succeed. Their offsets."""
    outcomes = produce_outcomes(producer, topic, values)
    assert [error for error, _, _ in outcomes if error is not None] == []
    return [offset for _, offset, _ in outcomes]


def read(consumer: Consumer, topic: str, start: int, count: int, timeout: float = TIMEOUT) -> list[bytes]:
    """`count` records from `start`, within the deadline."""
    consumer.assign([TopicPartition(topic, 0, start)])
    got: list[bytes] = []

    def more() -> bool:
        for m in consumer.consume(max(count - len(got), 1), 0.2):
            assert m.error() is None, m.error()
            got.append(m.value())
        return len(got) >= count

    wait_until(more, timeout, message=f"{count} records of {topic} from offset {start} (got {got})")
    return got


def more_records(consumer: Consumer, seconds: float = QUIET_S) -> list[bytes]:
    """What the consumer receives in the next `seconds` (from where it is): should be nothing."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got.extend(m.value() for m in consumer.consume(10, 0.1) if m.error() is None)
    return got


def watermarks(consumer: Consumer, topic: str) -> tuple[int, int]:
    """ListOffsets earliest and latest, asked of the leader under the consumer's isolation level."""
    return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT, cached=False)


# ------------------------------------------------------------------------------------------ patient
def test_acks_1_records_are_uncommitted_while_the_followers_are_paused(patient, topic_name, clients):
    """acks=1 answers once the leader appended: with both followers paused (still in the ISR) the
    records are UNCOMMITTED: read_uncommitted sees them, read_committed does not, and ListOffsets
    latest differs per isolation level. Once the followers catch up they are COMMITTED."""
    leader, followers = create_topic(patient, topic_name)
    up = address(patient, leader)
    assert produce(clients.producer(up, "all"), topic_name, [b"c0", b"c1"]) == [0, 1]
    acks_1 = clients.producer(up, "1")
    committed = clients.consumer(up, "read_committed")
    uncommitted = clients.consumer(up, "read_uncommitted")
    try:
        run(patient, "pause", *followers)
        assert produce(acks_1, topic_name, [b"u0", b"u1", b"u2"]) == [2, 3, 4]

        assert read(uncommitted, topic_name, 0, 5) == [b"c0", b"c1", b"u0", b"u1", b"u2"]
        assert read(committed, topic_name, 0, 2) == [b"c0", b"c1"]
        assert more_records(committed) == []
        assert watermarks(uncommitted, topic_name) == (0, 5)  # the leader's log end offset
        assert watermarks(committed, topic_name) == (0, 2)  # the high watermark
        assert sorted(patient.partition(topic_name)["isr"]) == [0, 1, 2]  # paused, but still in sync

        run(patient, "resume", *followers)
        assert read(committed, topic_name, 2, 3) == [b"u0", b"u1", b"u2"]
        assert watermarks(committed, topic_name) == (0, 5)
        assert more_records(committed, 0.3) == []
    finally:
        restore(patient, [topic_name])


def test_acks_all_times_out_while_in_sync_followers_are_paused_then_commits(patient, topic_name, clients):
    """acks=all waits for the in-sync followers; with both paused the produce does not succeed
    within its timeout. The record is nevertheless in the leader's log (read_uncommitted sees it):
    the outcome is unknown and the record may still appear later, and it does: after the followers
    resume it is COMMITTED and read_committed consumers see it, once."""
    leader, followers = create_topic(patient, topic_name)
    up = address(patient, leader)
    assert produce(clients.producer(up, "all"), topic_name, [b"c0"]) == [0]
    producer = clients.timing_out_producer(up)
    committed = clients.consumer(up, "read_committed")
    uncommitted = clients.consumer(up, "read_uncommitted")
    try:
        run(patient, "pause", *followers)
        [(error, _offset, waited)] = produce_outcomes(producer, topic_name, [b"unknown-outcome"])
        # the broker's own answer (code 7), at the request's timeout; not the client giving up
        assert error is not None and error.code() == KafkaError.REQUEST_TIMED_OUT, error
        assert waited >= ACKS_ALL_TIMEOUT_MS / 1000 * 0.9, f"failed after {waited:.2f}s instead of waiting"

        assert read(uncommitted, topic_name, 0, 2) == [b"c0", b"unknown-outcome"]
        assert read(committed, topic_name, 0, 1) == [b"c0"]
        assert more_records(committed) == []
        assert watermarks(committed, topic_name) == (0, 1)

        run(patient, "resume", *followers)
        assert read(committed, topic_name, 1, 1) == [b"unknown-outcome"]
        assert more_records(committed, 0.3) == []
        assert watermarks(committed, topic_name) == (0, 2)  # exactly once
    finally:
        restore(patient, [topic_name])


def test_majority_quorum_commits_with_one_follower_paused(patient, topic_name, clients):
    """kshim.commit.quorum=majority: with one of the two followers paused (still in the ISR), the
    leader and the other follower are a majority, so acks=all answers at once and read_committed
    sees the record. The default isr quorum, in the same situation, blocks until the timeout."""
    majority, isr = topic_name, topic_name + "-isr"
    leader_m, _ = create_topic(patient, majority, {"kshim.commit.quorum": "majority"})
    leader_i, _ = create_topic(patient, isr)
    paused = next(n for n in (0, 1, 2) if n not in (leader_m, leader_i))  # a follower of both
    up = address(patient, *sorted({leader_m, leader_i}))
    warm = clients.producer(up, "all")
    assert produce(warm, majority, [b"m0"]) == [0] and produce(warm, isr, [b"i0"]) == [0]
    patient_producer = clients.producer(up, "all", **{"request.timeout.ms": 10000})
    timing_out = clients.timing_out_producer(up)
    committed = clients.consumer(up, "read_committed")
    try:
        run(patient, "pause", paused)
        [(error, offset, took)] = produce_outcomes(patient_producer, majority, [b"m1"])
        assert error is None and offset == 1, error
        assert took < 3.0, f"acks=all took {took:.2f}s with a majority in sync"
        assert read(committed, majority, 0, 2) == [b"m0", b"m1"]
        assert watermarks(committed, majority) == (0, 2)
        assert paused in patient.partition(majority)["isr"]  # committed without it, not by dropping it

        [(error, _offset, waited)] = produce_outcomes(timing_out, isr, [b"i1"])
        assert error is not None and error.code() == KafkaError.REQUEST_TIMED_OUT, error
        assert waited >= ACKS_ALL_TIMEOUT_MS / 1000 * 0.9
        assert watermarks(committed, isr) == (0, 1)
    finally:
        restore(patient, [majority, isr])


def test_high_watermark_read_limit_hides_uncommitted_records_from_read_uncommitted(patient, topic_name, clients):
    """kshim.uncommitted.read.limit=high-watermark (Kafka's own behaviour): with both followers
    paused, an acks=1 record is not visible to read_uncommitted consumers either, and ListOffsets
    latest is the high watermark for both isolation levels, until the followers catch up."""
    leader, followers = create_topic(patient, topic_name, {"kshim.uncommitted.read.limit": "high-watermark"})
    up = address(patient, leader)
    assert produce(clients.producer(up, "all"), topic_name, [b"c0"]) == [0]
    acks_1 = clients.producer(up, "1")
    uncommitted = clients.consumer(up, "read_uncommitted")
    committed = clients.consumer(up, "read_committed")
    try:
        run(patient, "pause", *followers)
        assert produce(acks_1, topic_name, [b"u0", b"u1"]) == [1, 2]
        assert read(uncommitted, topic_name, 0, 1) == [b"c0"]
        assert more_records(uncommitted) == []
        assert watermarks(uncommitted, topic_name) == (0, 1)
        assert watermarks(committed, topic_name) == (0, 1)

        run(patient, "resume", *followers)
        assert read(uncommitted, topic_name, 1, 2) == [b"u0", b"u1"]
        assert watermarks(uncommitted, topic_name) == (0, 3)
    finally:
        restore(patient, [topic_name])


# ------------------------------------------------------------------------------------------ quick
def test_acks_all_gets_not_enough_replicas_once_the_isr_shrank(quick, topic_name, clients):
    """min.insync.replicas=2 and both followers paused: once the ISR is just the leader, an acks=all
    produce fails at once with NOT_ENOUGH_REPLICAS and nothing is appended; acks=1 still works.
    Resumed followers rejoin the ISR once they have caught up, and acks=all works again."""
    leader, followers = create_topic(quick, topic_name, {"min.insync.replicas": "2"})
    up = address(quick, leader)
    assert produce(clients.producer(up, "all"), topic_name, [b"c0"]) == [0]
    acks_all = clients.kafka_producer(up, "all", [topic_name], request_timeout_ms=10000)
    acks_1 = clients.kafka_producer(up, 1, [topic_name])
    uncommitted = clients.consumer(up, "read_uncommitted")
    try:
        run(quick, "pause", *followers)
        # the leader's own view, which answers the produce below, not only the controller's
        wait_until(lambda: quick.partition(topic_name)["isr"] == [leader] and listed_isr(up, topic_name) == [leader],
                   TIMEOUT, message=f"the ISR of {topic_name} shrunk to the leader {leader}")

        # refused at once: without retries, a produce left waiting would end as REQUEST_TIMED_OUT
        with pytest.raises(NotEnoughReplicasError):
            acks_all.send(topic_name, b"refused", partition=0).get(timeout=TIMEOUT)
        assert watermarks(uncommitted, topic_name) == (0, 1)  # nothing appended

        assert acks_1.send(topic_name, b"a1", partition=0).get(timeout=TIMEOUT).offset == 1
        assert read(uncommitted, topic_name, 0, 2) == [b"c0", b"a1"]

        run(quick, "resume", *followers)
        wait_until(lambda: sorted(quick.partition(topic_name)["isr"]) == [0, 1, 2]
                   and listed_isr(up, topic_name) == [0, 1, 2], WHOLE_S,
                   message=f"the resumed followers {followers} back in the ISR of {topic_name}")
        assert acks_all.send(topic_name, b"a2", partition=0).get(timeout=TIMEOUT).offset == 2
    finally:
        restore(quick, [topic_name])


def test_former_leader_loses_its_uncommitted_suffix_after_failover(quick, topic_name, clients):
    """The leader's replication is cut off (both followers isolated) and it takes acks=1 records
    nobody else has (UNCOMMITTED); then it is killed. A follower becomes leader and takes acks=all
    records; the old leader, started again, truncates its divergent suffix and catches up. Even
    when it leads again, consumers see every acks=all record exactly once and none of the lost
    UNCOMMITTED ones."""
    leader, followers = create_topic(quick, topic_name)
    before = [b"before-%d" % i for i in range(3)]
    lost = [b"lost-%d" % i for i in range(3)]
    after = [b"after-%d" % i for i in range(3)]
    assert produce(clients.producer(quick.bootstrap, "all"), topic_name, before) == [0, 1, 2]
    acks_1 = clients.kafka_producer(address(quick, leader), 1, [topic_name])
    epoch = quick.partition(topic_name)["leader_epoch"]
    try:
        # The cut-off followers leave the ISR after the replica lag (1.5 s) unless the leader dies
        # first: these steps take milliseconds, and the leader then cannot change the ISR any more.
        started = time.monotonic()
        run(quick, "isolate", *followers)
        offsets = [acks_1.send(topic_name, v, partition=0).get(timeout=TIMEOUT).offset for v in lost]
        run(quick, "kill", leader)
        took = time.monotonic() - started
        assert offsets == [3, 4, 5]
        isr = quick.partition(topic_name)["isr"]
        assert sorted(isr) == [0, 1, 2], (f"the leader shrank the ISR to {isr} before it was killed; "
                                          f"isolate, produce and kill took {took:.2f}s")

        run(quick, "heal", *followers)
        p = wait_until(lambda: (p := quick.partition(topic_name))["leader"] in followers and p, TIMEOUT,
                       message=f"a new leader for {topic_name} among {followers}")
        new_leader = p["leader"]
        assert p["leader_epoch"] > epoch and leader not in p["isr"]

        survivors = address(quick, *followers)
        assert produce(clients.producer(survivors, "all", **{"enable.idempotence": True}), topic_name,
                       after) == [3, 4, 5]

        run(quick, "start", leader)

        def in_sync():
            p = quick.partition(topic_name)
            ends = {o["log_end_offset"] for o in p["replica_offsets"].values()}
            return len(p["replica_offsets"]) == 3 and ends == {6} and sorted(p["isr"]) == [0, 1, 2]

        wait_until(in_sync, WHOLE_S, message=f"all replicas of {topic_name} at log end 6, ISR of 3")
        committed = clients.consumer(quick.bootstrap, "read_committed")
        assert read(committed, topic_name, 0, 6) == before + after
        assert more_records(committed, 0.3) == []

        # Same log end offset is not the same log: make the old leader lead again and read from it.
        run(quick, "kill", new_leader)
        wait_until(lambda: quick.partition(topic_name)["leader"] == leader, TIMEOUT,
                   message=f"the old leader {leader} leading {topic_name} again")
        from_old = clients.consumer(address(quick, leader), "read_uncommitted")
        assert read(from_old, topic_name, 0, 6) == before + after
        assert more_records(from_old, 0.3) == []
        assert watermarks(from_old, topic_name) == (0, 6)
    finally:
        restore(quick, [topic_name])
