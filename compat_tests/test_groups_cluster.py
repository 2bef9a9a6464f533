"""Consumer groups on `kshim serve --brokers 3` when the group coordinator is SIGKILLed.

A group lives on the leader of `__consumer_offsets` partition abs(java hashCode(group)) % 10;
committed offsets are records of that partition, replicated (acks=all) like any other. Killing
the coordinator must lose no acknowledged commit: once a new leader of that partition is elected
(broker session timeout 2 s) and has loaded it, the group's members find it, rejoin, get their
partitions again and go on from the committed offsets.

- confluent-kafka: two members (subscribe) of a group on a topic of 6 partitions, replication
  factor 3, consume and commit synchronously after each batch. The coordinator is killed while
  each member holds consumed but uncommitted records. The members get 3 partitions each again
  and every record is consumed (no gaps); no delivery is below an offset the group had already
  committed successfully, so only the uncommitted tail (and batches whose commit failed during
  the failover) are delivered again; commits succeed after the failover and after `ctl start`
  brings the killed broker back.
- kafka-python: a consumer commits, closes; the coordinator is killed; a new consumer of the
  group sees the committed offsets (`committed()`) and starts from them.

Every wait has a deadline; the cluster is stopped (or killed) in finally.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until

SESSION_TIMEOUT_MS = 2000  # the brokers': a killed broker is fenced after this
LAG_TIME_MS = 2000
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 10
FAILOVER_S = 20.0  # fencing, election and loading the offsets partition, with slack for a busy machine
REJOIN_S = 40.0  # `ctl start`, registration and catching up into the ISRs
GROUP_S = 40.0  # members rejoining a group (the new coordinator knows no member) and consuming
CLIENT = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 20000,
          "log_level": 3}


# ------------------------------------------------------------------------------------- helpers
def java_hashcode(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str) -> int:
    h = java_hashcode(group)
    return (0 if h == -(1 << 31) else abs(h)) % OFFSETS_PARTITIONS


def partitions_of(status: dict, topic: str) -> list[dict]:
    return sorted((p for p in status["partitions"] if p["topic"] == topic), key=lambda p: p["partition"])


def fully_replicated(cluster: Cluster, *topics: str) -> bool:
    status = cluster.status()
    return all(partitions_of(status, t) and all(p["leader"] >= 0 and len(p["isr"]) == 3
                                                 for p in partitions_of(status, t)) for t in topics)


def create_topic(cluster: Cluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(30)
    wait_until(lambda: len(partitions_of(cluster.status(), name)) == partitions and fully_replicated(cluster, name),
               15, message=f"{name} replicated on 3 brokers")


def produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> None:
    """Values start..start+count-1, value i to partition i % partitions, acks=all."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 30_000, "log_level": 3})
    failed = []
    for i in range(start, start + count):
        p.produce(topic, value=b"%d" % i, partition=i % partitions,
                  on_delivery=lambda err, msg: err is not None and failed.append(str(err)))
    assert p.flush(40) == 0 and not failed, f"produce failed: {failed[:3]}"


def coordinator_by_status(cluster: Cluster, group: str) -> dict:
    return partitions_of(cluster.status(), OFFSETS_TOPIC)[offsets_partition(group)]


def described_coordinator(admin: AdminClient, group: str) -> int:
    """FindCoordinator, as the admin client asks it (DescribeGroups goes to the coordinator)."""
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15).coordinator.id


def log_of(cluster: Cluster, node: int) -> str:
    path = cluster.data_dir / f"broker-{node}" / "broker.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else f"(no {path})"


def kill_coordinator(cluster: Cluster, group: str) -> tuple[int, int, float]:
    """SIGKILL the leader of the group's offsets partition; returns (killed, partition, when)."""
    before = coordinator_by_status(cluster, group)
    leader = before["leader"]
    assert leader >= 0 and len(before["isr"]) == 3, before
    result = run_ctl(cluster.data_dir, "kill", str(leader))
    assert result.returncode == 0, result.stderr
    return leader, before["partition"], time.monotonic()


def wait_new_offsets_leader(cluster: Cluster, group: str, killed: int) -> dict:
    def elected():
        status = cluster.status()
        p = partitions_of(status, OFFSETS_TOPIC)[offsets_partition(group)]
        down = not next(b for b in status["brokers"] if b["id"] == killed)["alive"]
        return down and p["leader"] not in (killed, -1) and p
    return wait_until(elected, FAILOVER_S, message=f"a new leader of the offsets partition after killing {killed}")


def start_again(cluster: Cluster, node: int, *topics: str) -> None:
    result = run_ctl(cluster.data_dir, "start", str(node))
    assert result.returncode == 0, result.stderr

    def rejoined():
        status = cluster.status()
        alive = next(b for b in status["brokers"] if b["id"] == node)["alive"]
        return alive and all(node in p["isr"] for t in topics for p in partitions_of(status, t))

    wait_until(rejoined, REJOIN_S, message=f"broker {node} back in the ISRs of {topics}")


@pytest.fixture
def cluster(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", str(LAG_TIME_MS),
                         session_timeout_ms=SESSION_TIMEOUT_MS)) as c:
        yield c


# ------------------------------------------------------------------- confluent-kafka, 2 members
class Group:
    """Two confluent-kafka members polled in turn by the test's thread; each consumes a batch,
    then commits the batch's offsets synchronously. Records every delivery, every successful
    commit and every assignment, and checks each delivery against the offsets the group had
    already committed successfully at that moment."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.members: list[Consumer] = []
        self.assigned: list[set[int]] = [set(), set()]
        self.assign_events: list[tuple[float, int, list[int]]] = []  # (when, member, partitions)
        self.deliveries: list[tuple[float, int, int, int]] = []  # (when, member, partition, offset)
        self.seen: set[tuple[int, int]] = set()
        self.committed = {p: 0 for p in range(partitions)}  # highest acknowledged commit per partition
        self.commits_ok: list[float] = []  # when each successful commit returned
        self.commit_errors: list[str] = []
        self.below_committed: list[tuple[int, int, int, int]] = []  # (member, partition, offset, committed)
        self.client_errors: list[str] = []
        for i in range(2):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, "error_cb": self._on_error, **CLIENT})
            c.subscribe([topic], on_assign=self._on_assign(i), on_revoke=self._on_revoke(i),
                        on_lost=self._on_revoke(i))
            self.members.append(c)

    def _on_error(self, err) -> None:
        self.client_errors.append(str(err))
        assert not err.fatal(), f"fatal client error: {err}"

    incremental = False  # KIP-848 members get and give up partitions a few at a time

    def _on_assign(self, i: int):
        def cb(consumer, partitions):
            given = {tp.partition for tp in partitions}
            self.assigned[i] = self.assigned[i] | given if self.incremental else given
            self.assign_events.append((time.monotonic(), i, sorted(given)))
        return cb

    def _on_revoke(self, i: int):
        def cb(consumer, partitions):
            self.assigned[i] = self.assigned[i] - {tp.partition for tp in partitions} if self.incremental else set()
        return cb

    def step(self, commit: bool = True, batch_size: int = 200) -> None:
        for i, c in enumerate(self.members):
            msgs = c.consume(batch_size, timeout=0.05)
            batch: dict[int, int] = {}
            for msg in msgs:
                if msg.error() is not None:
                    self.client_errors.append(str(msg.error()))
                    continue
                p, o = msg.partition(), msg.offset()
                assert int(msg.value()) % self.partitions == p
                now = time.monotonic()
                if o < self.committed[p]:
                    self.below_committed.append((i, p, o, self.committed[p]))
                self.deliveries.append((now, i, p, o))
                self.seen.add((p, o))
                batch[p] = max(batch.get(p, -1), o)
            if commit and batch:
                self.commit(c, batch)

    def commit(self, c: Consumer, batch: dict[int, int]) -> None:
        offsets = [TopicPartition(self.topic, p, o + 1) for p, o in sorted(batch.items())]
        try:
            result = c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:  # expected while the coordinator fails over or the group rebalances
            self.commit_errors.append(str(e))
            return
        for tp in result:
            if tp.error is not None:
                self.commit_errors.append(str(tp.error))
            else:
                self.committed[tp.partition] = max(self.committed[tp.partition], tp.offset)
        self.commits_ok.append(time.monotonic())

    def run_until(self, predicate, timeout: float, message: str, commit: bool = True,
                  batch_size: int = 200) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {message}: {self.summary()}")
            self.step(commit, batch_size)

    def shared(self) -> bool:
        a, b = self.assigned
        return len(a) == len(b) == self.partitions // 2 and a | b == set(range(self.partitions))

    def all_committed(self, ends: dict[int, int]) -> bool:
        return all(self.committed[p] >= ends[p] for p in ends)

    def summary(self) -> str:
        return (f"assigned {self.assigned}, committed {self.committed}, {len(self.deliveries)} deliveries, "
                f"{len(self.commits_ok)} commits ok, commit errors {self.commit_errors[-3:]}, "
                f"assignments {self.assign_events[-4:]}")

    def close(self) -> None:
        for c in self.members:
            c.close()


def test_confluent_group_survives_coordinator_kill(cluster, topic_name):
    partitions, per_phase = 6, 300
    create_topic(cluster, topic_name, partitions)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    produce(cluster.bootstrap, topic_name, partitions, 0, per_phase)
    members = Group(cluster.bootstrap, group, topic_name, partitions)
    killed = -1
    try:
        # 1. the group shares the partitions, consumes and commits everything produced so far
        members.run_until(members.shared, GROUP_S, "3 partitions each")
        ends = {p: per_phase // partitions for p in range(partitions)}
        members.run_until(lambda: members.all_committed(ends), GROUP_S, "the first records committed")
        wait_until(lambda: fully_replicated(cluster, OFFSETS_TOPIC, topic_name), 15,
                   message="every partition replicated on 3 brokers")

        # the coordinator: FindCoordinator (through DescribeGroups) agrees with the placement rule
        expected = coordinator_by_status(cluster, group)["leader"]
        assert described_coordinator(admin, group) == expected

        # 2. more records, half of them consumed and committed in small batches; then each member
        # consumes some without committing: the uncommitted tail
        produce(cluster.bootstrap, topic_name, partitions, per_phase, per_phase)
        members.run_until(lambda: sum(members.committed.values()) >= per_phase + per_phase // 2, GROUP_S,
                          "half of the next records committed", batch_size=10)
        taken = len(members.deliveries)
        members.run_until(lambda: {i for _, i, _, _ in members.deliveries[taken:]} == {0, 1}, GROUP_S,
                          "uncommitted records on both members", commit=False, batch_size=10)
        tail = {(p, o) for _, _, p, o in members.deliveries[taken:]}

        # 3. SIGKILL the coordinator
        committed_at_kill = dict(members.committed)
        killed, index, killed_at = kill_coordinator(cluster, group)
        victim = killed
        after = wait_new_offsets_leader(cluster, group, killed)
        assert after["leader"] != killed and killed not in after["isr"], after

        # the members find the new coordinator, which loaded the group with its members (or, if their
        # sessions lapsed while it was away, they rejoin); they hold 3 partitions each and commit again
        def going_on() -> bool:
            return members.shared() and any(t > killed_at for t in members.commits_ok)
        try:
            members.run_until(going_on, GROUP_S, "3 partitions each and a commit after the kill")
            failover_s = time.monotonic() - killed_at
            ends = {p: 2 * per_phase // partitions for p in range(partitions)}
            members.run_until(lambda: members.all_committed(ends), GROUP_S, "the records committed after the kill")
        except AssertionError as e:
            raise AssertionError(f"{e}\nnew leader {after}\n--- broker {after['leader']} log:\n"
                                 f"{log_of(cluster, after['leader'])}") from None
        assert any(t > killed_at for t in members.commits_ok)
        assert described_coordinator(admin, group) == after["leader"]

        produce(cluster.bootstrap, topic_name, partitions, 2 * per_phase, per_phase)
        ends = {p: 3 * per_phase // partitions for p in range(partitions)}
        members.run_until(lambda: members.all_committed(ends), GROUP_S, "records produced after the failover")

        # nothing committed before the kill was delivered again after it
        again = [(p, o) for t, _, p, o in members.deliveries if t > killed_at and o < committed_at_kill[p]]
        assert not again, f"{len(again)} records committed before the kill delivered again: {again[:10]}"

        # 4. the killed broker comes back; the group still consumes and commits
        start_again(cluster, killed, OFFSETS_TOPIC, topic_name)
        killed = -1
        produce(cluster.bootstrap, topic_name, partitions, 3 * per_phase, per_phase)
        ends = {p: 4 * per_phase // partitions for p in range(partitions)}
        members.run_until(lambda: members.all_committed(ends), GROUP_S, "records produced after the restart")
        members.run_until(members.shared, GROUP_S, "3 partitions each at the end")

        # at least once, no gaps; deliveries again only at or above what was committed then
        total = 4 * per_phase
        produced = {(p, o) for p in range(partitions) for o in range(total // partitions)}
        missing, extra = sorted(produced - members.seen), sorted(members.seen - produced)
        assert not missing and not extra, f"never consumed {missing[:10]}, unknown {extra[:10]}"
        assert not members.below_committed, ("delivered below the committed offset (member, partition, "
                                             f"offset, committed): {members.below_committed[:10]}")
        redelivered = len(members.deliveries) - len(members.seen)
        print(f"killed coordinator {victim} (offsets partition {index}), new {after['leader']}; "
              f"{len(tail)} uncommitted at the kill, {redelivered} delivered again; "
              f"{len(members.commit_errors)} failed commits {members.commit_errors[:3]}; "
              f"members committing again {failover_s:.1f} s after the kill")
        got = members.members[0].committed([TopicPartition(topic_name, p) for p in range(partitions)], timeout=15)
        assert {tp.partition: tp.offset for tp in got} == ends
    finally:
        members.close()
        if killed >= 0:  # so that the fixture stops a whole cluster
            run_ctl(cluster.data_dir, "start", str(killed))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_membership_survives_coordinator_failover(cluster, topic_name, protocol):
    """The coordinator writes the group's members and assignment to its offsets partition before
    it answers SyncGroup (Kafka's storeGroup) or a ConsumerGroupHeartbeat that changed the group
    (KIP-848); the new leader loads them, so after a SIGKILL of the coordinator the members go on
    under their generation or epoch: no rebalance, commits accepted."""
    partitions = 4
    create_topic(cluster, topic_name, partitions)
    produce(cluster.bootstrap, topic_name, partitions, 0, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = Group(cluster.bootstrap, group, topic_name, partitions)
    for c in members.members:  # sessions long enough to outlast the failover on a busy machine
        c.close()
    members.members = []
    members.incremental = protocol == "consumer"
    timeouts = ({"session.timeout.ms": 45000, "heartbeat.interval.ms": 500} if protocol == "classic"
                else {"group.protocol": "consumer"})  # KIP-848: the broker sets both (45 s, 3 s)
    for i in range(2):
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "log_level": 3, "max.poll.interval.ms": 60000, **timeouts})
        c.subscribe([topic_name], on_assign=members._on_assign(i), on_revoke=members._on_revoke(i),
                    on_lost=members._on_revoke(i))
        members.members.append(c)
    killed = -1
    try:
        members.run_until(members.shared, GROUP_S, "2 partitions each")
        members.run_until(lambda: members.all_committed({p: 10 for p in range(partitions)}), GROUP_S,
                          "the first records committed")
        wait_until(lambda: fully_replicated(cluster, OFFSETS_TOPIC, topic_name), 15,
                   message="every partition replicated on 3 brokers")
        assignments_before = len(members.assign_events)
        killed, _, killed_at = kill_coordinator(cluster, group)
        after = wait_new_offsets_leader(cluster, group, killed)
        produce(cluster.bootstrap, topic_name, partitions, 40, 40)
        members.run_until(lambda: members.all_committed({p: 20 for p in range(partitions)}), GROUP_S,
                          "records produced after the failover committed")
        assert len(members.assign_events) == assignments_before, (
            f"the members rebalanced after the failover: {members.assign_events[assignments_before:]}")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
        assert described.coordinator.id == after["leader"] and len(described.members) == 2
        assert str(described.state).endswith("STABLE"), described.state
    finally:
        members.close()
        if killed >= 0:
            run_ctl(cluster.data_dir, "start", str(killed))


# ---------------------------------------------------------------------- kafka-python, one member
def kp_consumer(cluster: Cluster, topic: str, group: str) -> KafkaConsumer:
    c = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                      max_poll_interval_ms=20000, fetch_max_wait_ms=100, request_timeout_ms=10000)
    assert c.partitions_for_topic(topic)  # the topic's metadata before the join (see test_groups)
    return c


def kp_poll(c: KafkaConsumer, done, timeout: float, message: str) -> list[tuple[int, int, int]]:
    """(partition, offset, value) of every record polled until done(records)."""
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}; got {len(got)}")
        for records in c.poll(timeout_ms=200).values():
            got.extend((r.partition, r.offset, int(r.value)) for r in records)
    return got


def test_kafka_python_new_consumer_starts_from_commits_after_coordinator_kill(cluster, topic_name):
    partitions = 3
    create_topic(cluster, topic_name, partitions)
    produce(cluster.bootstrap, topic_name, partitions, 0, 30)  # 10 per partition
    group = f"g-{uuid.uuid4().hex[:8]}"
    commits = {p: 4 + p for p in range(partitions)}  # a different offset on each partition
    tps = [KpTopicPartition(topic_name, p) for p in range(partitions)]
    killed = -1
    c = kp_consumer(cluster, topic_name, group)
    try:
        got = kp_poll(c, lambda g: len(g) >= 30, GROUP_S, "the first 30 records")
        assert sorted(v for _, _, v in got) == list(range(30))
        c.commit({tp: OffsetAndMetadata(commits[tp.partition], "", -1) for tp in tps})
        assert {tp.partition: c.committed(tp) for tp in tps} == commits
    finally:
        c.close()
    try:
        wait_until(lambda: fully_replicated(cluster, OFFSETS_TOPIC, topic_name), 15,
                   message="every partition replicated on 3 brokers")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        assert described_coordinator(admin, group) == coordinator_by_status(cluster, group)["leader"]
        del admin
        killed, _, _ = kill_coordinator(cluster, group)
        after = wait_new_offsets_leader(cluster, group, killed)
        produce(cluster.bootstrap, topic_name, partitions, 30, 9)  # offsets 10..12 of each partition

        c = kp_consumer(cluster, topic_name, group)
        try:
            try:
                seen = {tp.partition: c.committed(tp, timeout_ms=int(FAILOVER_S * 1000)) for tp in tps}
            except Exception as e:
                raise AssertionError(f"committed() after the failover: {e!r}\n--- broker {after['leader']} log:\n"
                                     f"{log_of(cluster, after['leader'])}") from None
            assert seen == commits, f"committed offsets after the failover {seen}, expected {commits}"
            expected = {(p, o) for p in range(partitions) for o in range(commits[p], 13)}
            got = kp_poll(c, lambda g: {(p, o) for p, o, _ in g} >= expected, GROUP_S, "the records from the commits")
            firsts = {}
            for p, o, v in got:
                firsts.setdefault(p, o)
                assert v % partitions == p and o >= commits[p], f"partition {p} offset {o} is below the commit"
            assert firsts == commits, f"first offsets {firsts}, committed {commits}"
            assert len(got) == len(expected), "records delivered twice"
            c.commit()  # commits succeed on the new coordinator
            assert {tp.partition: c.committed(tp) for tp in tps} == {p: 13 for p in range(partitions)}
        finally:
            c.close()
        start_again(cluster, killed, OFFSETS_TOPIC, topic_name)
        killed = -1
    finally:
        if killed >= 0:
            run_ctl(cluster.data_dir, "start", str(killed))
