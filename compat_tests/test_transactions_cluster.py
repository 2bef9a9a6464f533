"""Transactions on a 3-broker cluster (`kshim serve --brokers 3`, session timeout and
replica.lag.time.max.ms 2 s) while brokers are SIGKILLed: the transaction coordinator mid-
transaction, a partition leader mid-transaction, and an exactly-once copy of 100,000 records in
transactions of 750 (consume-transform-produce with send_offsets_to_transaction) under repeated
kills. Nothing committed is lost, nothing is duplicated, and a read_committed consumer running
alongside sees exactly the output.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection

SESSION_TIMEOUT_MS = 2000
LAG_TIME_MS = 2000
FAILOVER_S = 20.0
REJOIN_S = 40.0
TXN_TIMEOUT_S = 60.0
FIND_COORDINATOR = 10


@pytest.fixture
def cluster(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", str(LAG_TIME_MS),
                         session_timeout_ms=SESSION_TIMEOUT_MS)) as c:
        yield c


def create_topics(cluster: Cluster, *names: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(n, partitions, 3, config={"min.insync.replicas": "2"}) for n in names])
    for f in futures.values():
        f.result(30)

    def ready() -> bool:
        parts = [p for p in cluster.status()["partitions"] if p["topic"] in names]
        return len(parts) == partitions * len(names) and all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in parts)

    wait_until(ready, 20, message=f"{names} fully replicated")


def txn_coordinator(cluster: Cluster, transactional_id: str) -> int:
    return coordinator(cluster, transactional_id, 1)


def coordinator(cluster: Cluster, key: str, key_type: int) -> int:
    """The node FindCoordinator names for a group (key type 0) or transactional id (1)."""
    def found():
        for address in cluster.bootstrap.split(","):
            try:
                with RawConnection(address) as conn:
                    answer = conn.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
            except OSError:
                continue  # a killed broker: ask the next one
            c = answer.coordinators[0]
            return (c.node_id,) if c.error_code == 0 else None  # a tuple: node 0 is an answer too
        return None
    return wait_until(found, 20, message=f"the coordinator of {key}")[0]


def transactional_id_elsewhere(cluster: Cluster, group: str, prefix: str) -> str:
    """A transactional id coordinated by another broker than the group, so that a test kills the
    coordinator it means to (placement hashes the id)."""
    group_node = coordinator(cluster, group, 0)
    for i in range(64):
        tid = f"{prefix}-{i}"
        if txn_coordinator(cluster, tid) != group_node:
            return tid
    raise AssertionError(f"every transactional id {prefix}-* is coordinated by the group's broker {group_node}")


def kill(cluster: Cluster, node: int) -> None:
    result = run_ctl(cluster.data_dir, "kill", str(node))
    assert result.returncode == 0, result.stderr
    wait_until(lambda: not cluster.broker(node)["alive"], FAILOVER_S, message=f"broker {node} fenced")


def restart(cluster: Cluster, node: int) -> None:
    result = run_ctl(cluster.data_dir, "start", str(node))
    assert result.returncode == 0, result.stderr

    def back() -> bool:
        status = cluster.status()
        alive = next(b for b in status["brokers"] if b["id"] == node)["alive"]
        return alive and all(node in p["isr"] for p in status["partitions"] if node in p["replicas"])

    wait_until(back, REJOIN_S, message=f"broker {node} back in every ISR")


SENTINEL = b"--end--"


def seal(bootstrap: str, topic: str, partitions: int = 3) -> None:
    """A plain record at the end of every partition: a reader that has it has read everything."""
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for p in range(partitions):
        producer.produce(topic, SENTINEL, partition=p)
    assert producer.flush(30) == 0


def read_committed(bootstrap: str, topic: str, partitions: int = 3, timeout: float = 60.0) -> list[bytes]:
    """Every record a read_committed consumer sees, up to the sentinels (call `seal` first)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 3})
    got: list[bytes] = []
    sealed: set[int] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

        def done() -> bool:
            for m in consumer.consume(1000, timeout=0.2):
                if m.error() is None:
                    if m.value() == SENTINEL:
                        sealed.add(m.partition())
                    else:
                        got.append(m.value())
            return len(sealed) == partitions

        wait_until(done, timeout, interval=0, message=f"the sentinels of {topic}")
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("victim", ["transaction coordinator", "partition leader"])
def test_broker_killed_mid_transaction(cluster, topic_name, victim):
    """Half the records sent, the victim SIGKILLed, the other half sent, commit: it completes
    through the new leaders and a read_committed consumer reads every record once, in order."""
    create_topics(cluster, topic_name, partitions=1)
    tid = f"kill-{topic_name}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "log_level": 3})
    producer.init_transactions(TXN_TIMEOUT_S)
    producer.begin_transaction()
    values = [b"v%04d" % i for i in range(300)]
    for v in values[:150]:
        producer.produce(topic_name, v, partition=0)
    assert producer.flush(30) == 0
    node = txn_coordinator(cluster, tid) if victim == "transaction coordinator" else \
        cluster.partition(topic_name, 0)["leader"]
    kill(cluster, node)
    for v in values[150:]:
        producer.produce(topic_name, v, partition=0)
    producer.commit_transaction(TXN_TIMEOUT_S)  # a new coordinator loaded the Ongoing state; markers follow leaders
    if victim == "transaction coordinator":
        assert txn_coordinator(cluster, tid) != node
    seal(cluster.bootstrap, topic_name, 1)
    assert read_committed(cluster.bootstrap, topic_name, 1) == values
    restart(cluster, node)


# ------------------------------------------------------------------------------------ exactly once
RECORDS = 100_000
PER_TXN = 750
KILLS_AT = (0.2, 0.45, 0.7)  # fraction of the input committed before each kill
COPY_S = 300.0


class Copier:
    """Consume-transform-produce: input records -> "out-" + value, offsets committed in the same
    transaction. Abortable errors abort and rewind to the committed offsets; a fatal one starts a
    new producer with the same transactional id (which fences the old)."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, tid: str) -> None:
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.tid = tid
        self.group = group
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        self.consumer.subscribe([source])
        self.producer = self._new_producer()
        self.committed = 0  # input records covered by committed transactions
        self.aborts = 0
        self.restarts = 0

    def _new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid, "log_level": 3,
                             "transaction.timeout.ms": 30000})
        producer.init_transactions(TXN_TIMEOUT_S)
        return producer

    def _rewind(self) -> None:
        assignment = self.consumer.assignment()
        if assignment:
            for tp in self.consumer.committed(assignment, TXN_TIMEOUT_S):
                self.consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    def step(self) -> None:
        batch = [m for m in self.consumer.consume(PER_TXN, timeout=0.5) if m.error() is None]
        if not batch:
            return
        try:
            self.producer.begin_transaction()
            for m in batch:
                self.producer.produce(self.sink, b"out-" + m.value(), partition=m.partition())
            self.producer.send_offsets_to_transaction(self.consumer.position(self.consumer.assignment()),
                                                      self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
            self._commit()
            self.committed += len(batch)
        except KafkaException as e:
            if not (e.args[0].txn_requires_abort() and self._abort()):
                self.restarts += 1  # fatal, or the abort failed: a new instance fences this one
                self.producer = self._new_producer()
            self._rewind()

    def _abort(self) -> bool:
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
        except KafkaException:
            return False
        self.aborts += 1
        return True

    def _commit(self) -> None:
        for _ in range(20):
            try:
                self.producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
        raise AssertionError("commit_transaction kept failing with retriable errors")

    def close(self) -> None:
        self.consumer.close()


class Watcher(threading.Thread):
    """A read_committed consumer of the output, running alongside the copy."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{topic}", "log_level": 3,
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        self.seen: list[bytes] = []
        self.sealed: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set() and len(self.sealed) < 3:
                for m in self.consumer.consume(1000, timeout=0.2):
                    if m.error() is None:
                        if m.value() == SENTINEL:
                            self.sealed.add(m.partition())
                        else:
                            self.seen.append(m.value())
        finally:
            self.consumer.close()


class Chaos(threading.Thread):
    """Kills each victim once the copy has committed KILLS_AT of the input, waits for the failover
    and starts it again, on its own thread while the copier keeps running."""

    def __init__(self, cluster: Cluster, copier: Copier, victims: list[int]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.copier, self.victims = cluster, copier, victims
        self.killed: list[int] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            for at, node in zip(KILLS_AT, self.victims):
                while self.copier.committed < at * RECORDS:
                    if self.stop.wait(0.05):
                        return
                kill(self.cluster, node)
                restart(self.cluster, node)
                self.killed.append(node)
        except BaseException as e:  # noqa: BLE001 (reported by the test thread)
            self.error = e


def load_input(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """`count` plain numbered records spread over partitions 0-2; returns their values."""
    inputs = [b"%06d" % i for i in range(count)]
    loader = Producer({"bootstrap.servers": bootstrap, "log_level": 3, "linger.ms": 20})
    for i, v in enumerate(inputs):
        loader.produce(topic, v, partition=i % 3)
        if i % 5_000 == 0:
            loader.poll(0)
    assert loader.flush(60) == 0
    return inputs


def test_exactly_once_copy_under_broker_kills(cluster, topic_name):
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topics(cluster, source, sink)
    inputs = load_input(cluster.bootstrap, source, RECORDS)

    watcher = Watcher(cluster.bootstrap, sink)
    watcher.start()
    group = f"eos-{topic_name}"
    tid = transactional_id_elsewhere(cluster, group, f"copier-{topic_name}")
    copier = Copier(cluster.bootstrap, source, sink, group, tid)
    # The transaction coordinator, then the third broker, then the first again; never the group's
    # coordinator: librdkafka's send_offsets_to_transaction can hang for good once the group
    # coordinator it cached is gone from Metadata (confluentinc/librdkafka#5511, #5456), as it is
    # from a real Kafka's.
    group_coordinator, transaction_coordinator = coordinator(cluster, group, 0), txn_coordinator(cluster, tid)
    [third] = {0, 1, 2} - {group_coordinator, transaction_coordinator}
    victims = [transaction_coordinator, third, transaction_coordinator]
    chaos = Chaos(cluster, copier, victims)
    chaos.start()
    deadline = time.monotonic() + COPY_S
    try:
        while copier.committed < RECORDS:
            assert time.monotonic() < deadline, f"copied {copier.committed} of {RECORDS} in {COPY_S}s"
            assert chaos.error is None, chaos.error
            copier.step()
        chaos.join(REJOIN_S + FAILOVER_S)
        assert chaos.error is None, chaos.error
        assert chaos.killed == victims, chaos.killed
    finally:
        chaos.stop.set()
        copier.close()
        if copier.committed < RECORDS:
            watcher.stop.set()

    expected = sorted(b"out-" + v for v in inputs)
    seal(cluster.bootstrap, sink)
    final = read_committed(cluster.bootstrap, sink, timeout=120)
    assert len(final) == RECORDS and sorted(final) == expected, "output differs from the input"
    wait_until(lambda: len(watcher.sealed) == 3, 60, message="the watcher reached the sentinels")
    watcher.join(10)
    assert len(watcher.seen) == RECORDS and sorted(watcher.seen) == expected  # no duplicate, nothing aborted
    print(f"exactly-once copy: {RECORDS} records, {copier.aborts} aborts, {copier.restarts} producer restarts, "
          f"killed {chaos.killed}")
