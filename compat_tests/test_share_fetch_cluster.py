"""Share-partition state (KIP-932) on `kshim serve --brokers 3` over the wire, byte by byte
(ShareFetch 78, ShareAcknowledge 79 as a share consumer sends them), when brokers are SIGKILLed.

The state of share group g on partition q-0 lives on q-0's leader; it is made durable through the
share coordinator (the leader of `__share_group_state` partition abs(hash("g:<topic id>:0")) % 10),
which writes it to that replicated topic before an acknowledgement is answered.

- Three members share the partition: each gets records, none twice; accepted records never come
  back; a released record comes back with delivery count 2; a rejected one never.
- The coordinator is killed (if it is not the leader): acknowledgements go on once its partition
  has a new leader. Then the partition's leader is killed while a member holds records it has
  not acknowledged: a member of the new leader gets those again (delivery count 2: their count
  was written with the last acknowledgement) and every other record once, and never a record
  acknowledged before the kill.

Every wait has a deadline; the cluster is stopped (or killed) in finally.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until
from compat_tests.raw_kafka import RawConnection
from wire.errors import ErrorCode

METADATA, SHARE_FETCH, SHARE_ACK = 3, 78, 79
ACCEPT, RELEASE, REJECT = 1, 2, 3
STATE_TOPIC, STATE_PARTITIONS = "__share_group_state", 10
FAILOVER_S = 30.0


def java_hashcode(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class ShareMember:
    """One share group member speaking ShareFetch/ShareAcknowledge to the partition's leader."""

    def __init__(self, bootstrap: str, group: str, topic: str, member: str | None = None) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.member = member or str(uuid.uuid4())
        self.conn: RawConnection | None = None
        self.epoch = 0
        self.topic_id: uuid.UUID | None = None

    def connect(self, deadline_s: float = FAILOVER_S) -> None:
        """(Re)connect to the partition's current leader and start a new share session. A broker's
        Metadata may still name a leader that was just killed (each broker learns of the change on
        its own), so ask again until the named leader accepts the connection, as a client would."""
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                with self._any_broker() as meta:
                    resp = meta.request(METADATA, 12, {"topics": [{"name": self.topic, "topic_id": None}],
                                                       "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False})
                topic = resp.topics[0]
                leader = topic.partitions[0].leader_id
                node = next(b for b in resp.brokers if b.node_id == leader)
                conn = RawConnection(f"{node.host}:{node.port}", timeout=40)
                break
            except (OSError, StopIteration, IndexError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
        self.topic_id = topic.topic_id
        if self.conn is not None:
            self.conn.close()
        self.conn = conn
        self.epoch = 0

    def _any_broker(self) -> RawConnection:
        """A connection to the first bootstrap broker that answers (the test kills brokers)."""
        failure: OSError | None = None
        for address in self.bootstrap.split(","):
            try:
                return RawConnection(address)
            except OSError as e:
                failure = e
        assert failure is not None
        raise failure

    def fetch(self, acks=(), max_records: int = 100, wait_ms: int = 500) -> tuple[int, list[tuple[int, int, int]], int]:
        """(partition error, acquired (first, last, delivery count) ranges, acknowledge error);
        at most max_records records (the record-limit acquire mode)."""
        assert self.conn is not None
        resp = self.conn.request(SHARE_FETCH, 2, {
            "group_id": self.group, "member_id": self.member, "share_session_epoch": self.epoch,
            "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records,
            "batch_size": max_records, "share_acquire_mode": 1, "is_renew_ack": False,
            "topics": [{"topic_id": self.topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in acks]}]}],
            "forgotten_topics_data": []})
        assert resp.error_code == 0, resp
        self.epoch += 1
        parts = [p for t in resp.responses for p in t.partitions]
        if not parts:
            return 0, [], 0
        p = parts[0]
        return p.error_code, [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records], \
            p.acknowledge_error_code

    def acknowledge(self, acks) -> int:
        assert self.conn is not None
        resp = self.conn.request(SHARE_ACK, 1, {
            "group_id": self.group, "member_id": self.member, "share_session_epoch": self.epoch,
            "topics": [{"topic_id": self.topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in acks]}]}]})
        assert resp.error_code == 0, resp
        self.epoch += 1
        return resp.responses[0].partitions[0].error_code

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def offsets(ranges) -> list[int]:
    return [o for a, b, _ in ranges for o in range(a, b + 1)]


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 3})
    for i in range(start, start + count):
        producer.produce(topic, str(i).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(Cluster(tmp_path_factory.mktemp("share") / "cluster", 3, "--replica-lag-time-max-ms", "2000",
                         "--group-initial-rebalance-delay-ms", "0", session_timeout_ms=2000)) as c:
        yield c


def leader_of(cluster: Cluster, topic: str, index: int) -> int:
    return cluster.partition(topic, index)["leader"]


def in_sync(cluster: Cluster, topic: str) -> bool:
    p = cluster.partition(topic, 0)
    return p["leader"] >= 0 and len(p["isr"]) == 3


def wait_fetch(member: ShareMember, want: int, acks=(), deadline_s: float = FAILOVER_S, max_records: int = 100
               ) -> list[tuple[int, int, int]]:
    """Fetch (reconnecting through leader changes) until `want` records are acquired."""
    got: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + deadline_s
    pending = list(acks)
    while len(offsets(got)) < want:
        assert time.monotonic() < deadline, f"acquired only {got}"
        try:
            error, ranges, ack_error = member.fetch(pending, max_records=max_records)
        except (ConnectionError, OSError, AssertionError):
            time.sleep(0.2)
            member.connect()
            continue
        if error or ack_error:
            assert error in (0, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             ErrorCode.NOT_COORDINATOR), error
            time.sleep(0.2)
            member.connect()
            continue
        pending = []
        got += ranges
    return got


def test_share_members_and_acknowledgements_survive_broker_kills(cluster):
    topic = "q"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: in_sync(cluster, topic), 20, message="q replicated")
    members = [ShareMember(cluster.bootstrap, "g", topic) for _ in range(3)]
    for m in members:
        m.connect()
    # the group's first fetch starts its share partition at the latest offset (the default
    # share.auto.offset.reset): the records come after it
    assert members[0].fetch(wait_ms=0)[:2] == (0, [])
    produce(cluster.bootstrap, topic, 0, 30)
    # three members take 5 records each, none twice
    taken = [wait_fetch(m, 5, max_records=5) for m in members]
    seen = [offsets(t) for t in taken]
    assert len(set().union(*map(set, seen))) == sum(map(len, seen))
    # member 0 accepts its records, member 1 releases its first record and rejects the rest,
    # member 2 keeps its records unacknowledged
    assert members[0].acknowledge([(a, b, ACCEPT) for a, b, _ in taken[0]]) == 0
    first1 = seen[1][0]
    assert members[1].acknowledge([(first1, first1, RELEASE)] +
                                  [(o, o, REJECT) for o in seen[1][1:]]) == 0
    again = wait_fetch(members[0], 1, max_records=5)
    assert (first1, first1, 2) in again, again
    accepted = set(seen[0])
    rejected = set(seen[1][1:])
    held = set(seen[2])
    assert members[0].acknowledge([(a, b, ACCEPT) for a, b, _ in again]) == 0
    accepted |= set(offsets(again))

    # kill the share coordinator (unless it leads q-0 too): acknowledgements go on
    tid = members[0].topic_id
    state_index = abs(java_hashcode(f"g:{tid}:0")) % STATE_PARTITIONS
    coordinator, leader = leader_of(cluster, STATE_TOPIC, state_index), leader_of(cluster, topic, 0)
    if coordinator != leader:
        assert run_ctl(cluster.data_dir, "kill", str(coordinator)).returncode == 0
        wait_until(lambda: leader_of(cluster, STATE_TOPIC, state_index) not in (-1, coordinator), FAILOVER_S,
                   message="a new share coordinator")
        more = wait_fetch(members[0], 1, max_records=5)
        assert members[0].acknowledge([(a, b, ACCEPT) for a, b, _ in more]) == 0
        accepted |= set(offsets(more))
        assert run_ctl(cluster.data_dir, "start", str(coordinator)).returncode == 0
        wait_until(lambda: in_sync(cluster, STATE_TOPIC) and in_sync(cluster, topic), FAILOVER_S,
                   message="the coordinator back in sync")
        leader = leader_of(cluster, topic, 0)

    # kill q-0's leader while member 2 holds records it never acknowledged
    assert run_ctl(cluster.data_dir, "kill", str(leader)).returncode == 0
    wait_until(lambda: leader_of(cluster, topic, 0) not in (-1, leader), FAILOVER_S, message="a new leader of q-0")
    rest = ShareMember(cluster.bootstrap, "g", topic)
    rest.connect()
    remaining = 30 - len(accepted) - len(rejected)
    after = wait_fetch(rest, remaining)
    got = offsets(after)
    assert sorted(got) == sorted(set(range(30)) - accepted - rejected), (after, accepted, rejected)
    assert {(o, c) for a, b, c in after for o in range(a, b + 1) if o in held} == {(o, 2) for o in held}
    assert rest.acknowledge([(a, b, ACCEPT) for a, b, _ in after]) == 0
    assert run_ctl(cluster.data_dir, "start", str(leader)).returncode == 0
    wait_until(lambda: in_sync(cluster, topic), FAILOVER_S, message="the old leader back in sync")
    for m in members + [rest]:
        m.close()
