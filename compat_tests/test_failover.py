"""Leader failover under load: an idempotent acks=all producer keeps sending while the leader of
partition 0 is SIGKILLed (and started again) three times, and nothing it was told is lost,
duplicated or reordered.

`kshim serve --brokers 3` (session timeout and replica.lag.time.max.ms 2 s), one topic of 3
partitions, replication factor 3, min.insync.replicas 2. A confluent-kafka producer
(enable.idempotence, acks=all) sends 30,000 sequenced records from a thread and records each
delivery report (partition, offset, sequence) in acknowledgement order. Meanwhile, three times,
once 20%, 40% and 60% of the records are acknowledged: find partition 0's leader, `kshim ctl
kill` it, wait until a new leader is elected from the ISR with a higher leader epoch, `kshim ctl
start` it and wait until it is back in the ISR of every partition. The producer sends at a steady
rate (a kill cycle takes a few seconds, the whole run about 30) and never runs more than 15% past
a kill point before that kill happened, so every failover lands while records are in flight and
more keep coming while partition 0 has no leader.

Then every record must be acknowledged successfully (idempotence and retries hide the failovers),
and a read_committed consumer reading every partition from the beginning must see exactly the
acknowledged records: each sequence number once, per partition in acknowledgement order, at the
acknowledged offsets. Finally all three replicas of every partition report the same log end
offset.
"""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until

RECORDS = 30_000
KILLS_AT = (0.20, 0.40, 0.60)  # fraction of records acknowledged before each kill
RATE = 1000  # records per second the producer sends at most: it is still sending at every kill
HOLD_BACK = 0.15  # and never more than this fraction past a kill point before that kill happened
SESSION_TIMEOUT_MS = 2000
LAG_TIME_MS = 2000
FAILOVER_S = 20.0  # fencing (session timeout + a check) and the election, with slack for a busy machine
REJOIN_S = 40.0  # start (process start, registration) and catching up into every ISR
PRODUCE_S = 100.0  # the whole run, failovers included: every record acknowledged
CONSUME_S = 30.0


class Producing:
    """The producer thread: sends RECORDS sequenced records, never more than HOLD_BACK past a kill
    point before that kill happened; records every delivery report in acknowledgement order."""

    def __init__(self, bootstrap: str, topic: str, kills: list[threading.Event]) -> None:
        self.topic = topic
        self.kills = kills
        self.acked: list[tuple[int, int, int]] = []  # (partition, offset, sequence), acknowledgement order
        self.failed: list[tuple[int, str]] = []  # (sequence, error)
        self.errors: list[str] = []  # error_cb: connection errors are expected; fatal ones are not
        self.fatal: list[str] = []
        self.done = threading.Event()
        self.stop = threading.Event()
        self.exception: BaseException | None = None
        self.unflushed = -1
        self.sent = 0
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": int(PRODUCE_S * 1000), "request.timeout.ms": 10_000,
            "retry.backoff.ms": 100, "partitioner": "murmur2_random", "log_level": 3,
            "error_cb": self._on_error})
        self.thread = threading.Thread(target=self._run, name="failover-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append(str(err))
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg) -> None:
        seq = int(msg.value())
        if err is not None:
            self.failed.append((seq, str(err)))
        else:
            self.acked.append((msg.partition(), msg.offset(), seq))

    def _run(self) -> None:
        try:
            gates = [(int(RECORDS * (at + HOLD_BACK)), event) for at, event in zip(KILLS_AT, self.kills)]
            start = time.monotonic()
            for seq in range(RECORDS):
                for gate, event in gates:
                    while seq >= gate and not event.is_set() and not self.stop.is_set():
                        self.producer.poll(0.05)
                        start = time.monotonic() - seq / RATE  # no burst once the gate opens
                while (wait := start + seq / RATE - time.monotonic()) > 0:
                    self.producer.poll(wait)
                if self.stop.is_set() or self.fatal:
                    return
                while True:
                    try:
                        self.producer.produce(self.topic, key=b"k%d" % (seq % 30), value=b"%d" % seq,
                                              on_delivery=self._on_delivery)
                        break
                    except BufferError:  # the local queue is full: serve delivery reports first
                        self.producer.poll(0.05)
                self.sent = seq + 1
                self.producer.poll(0)
            self.unflushed = len(self.producer)
            while self.unflushed and not self.stop.is_set() and not self.fatal:  # the test sets stop at its deadline
                self.unflushed = self.producer.flush(0.5)
        except BaseException as e:  # reported by the test
            self.exception = e
        finally:
            self.done.set()

    def healthy(self) -> bool:
        assert self.exception is None, f"producer thread failed: {self.exception!r}"
        assert not self.fatal, f"fatal producer error: {self.fatal}"
        assert not self.failed, f"{len(self.failed)} records failed, first: {self.failed[:5]}"
        return True


def partitions_of(status: dict, topic: str) -> list[dict]:
    return sorted((p for p in status["partitions"] if p["topic"] == topic), key=lambda p: p["partition"])


def fail_over_partition_0(cluster: Cluster, topic: str, producing: Producing, killed: threading.Event) -> dict:
    """Kill partition 0's leader (then set `killed`), wait for the election, start it again, wait
    until it is in every ISR. Returns what happened, for the failure messages."""
    before = partitions_of(cluster.status(), topic)[0]
    leader = before["leader"]
    assert leader >= 0, before
    sent, acked = producing.sent, len(producing.acked)
    result = run_ctl(cluster.data_dir, "kill", str(leader))
    killed.set()  # the producer may go on past this kill point
    assert result.returncode == 0, result.stderr
    killed_at = time.monotonic()

    def elected():
        status = cluster.status()
        p = partitions_of(status, topic)[0]
        down = not next(b for b in status["brokers"] if b["id"] == leader)["alive"]
        return down and p["leader"] not in (leader, -1) and p

    after = wait_until(elected, FAILOVER_S, message=f"a new leader of {topic}-0 after killing broker {leader}")
    assert after["leader"] in before["isr"], (before, after)
    assert after["leader_epoch"] > before["leader_epoch"], (before, after)
    assert leader not in after["isr"], after
    elected_at = time.monotonic()

    result = run_ctl(cluster.data_dir, "start", str(leader))
    assert result.returncode == 0, result.stderr

    def rejoined():
        status = cluster.status()
        alive = next(b for b in status["brokers"] if b["id"] == leader)["alive"]
        return alive and all(leader in p["isr"] for p in partitions_of(status, topic))

    wait_until(rejoined, REJOIN_S, message=f"broker {leader} back in the ISR of every partition of {topic}")
    return {"killed": leader, "sent": sent, "acked": acked, "new_leader": after["leader"],
            "epoch": (before["leader_epoch"], after["leader_epoch"]),
            "failover_s": round(elected_at - killed_at, 2), "rejoin_s": round(time.monotonic() - elected_at, 2)}


def consume_everything(bootstrap: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Every partition from the beginning up to its end offset, read_committed: (offset, sequence)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"failover-check-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 3,
                         "fetch.max.bytes": 10_000_000, "max.partition.fetch.bytes": 2_000_000})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(3)}
        position = {p: 0 for p in range(3)}

        def read_to_the_end() -> bool:
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), int(msg.value())))
                position[msg.partition()] = msg.offset() + 1
            return all(position[p] >= ends[p] for p in range(3))

        wait_until(read_to_the_end, CONSUME_S, interval=0, message=f"every partition of {topic} read to {ends}")
        return got
    finally:
        consumer.close()


@pytest.fixture
def cluster(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3, "--replica-lag-time-max-ms", str(LAG_TIME_MS),
                         session_timeout_ms=SESSION_TIMEOUT_MS)) as c:
        yield c


def test_leader_failovers_lose_duplicate_and_reorder_nothing_acknowledged(cluster, topic_name):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic_name, 3, 3, config={"min.insync.replicas": "2"})])
    futures[topic_name].result(30)
    del admin
    wait_until(lambda: all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in partitions_of(cluster.status(), topic_name))
               and len(partitions_of(cluster.status(), topic_name)) == 3, 15, message="topic ready")

    kills = [threading.Event() for _ in KILLS_AT]
    producing = Producing(cluster.bootstrap, topic_name, kills)
    failovers: list[dict] = []
    deadline = time.monotonic() + PRODUCE_S

    def produced(count: int) -> None:
        """Until `count` records are acknowledged (all of them: the producer is done)."""
        try:
            wait_until(lambda: producing.healthy() and len(producing.acked) >= count and
                       (count < RECORDS or producing.done.is_set()), max(deadline - time.monotonic(), 0))
        except AssertionError as e:
            raise AssertionError(f"{e}: {len(producing.acked)} of {count} records acknowledged, "
                                 f"{producing.sent} sent; failovers {failovers}") from None

    producing.thread.start()
    try:
        for at, event in zip(KILLS_AT, kills):
            produced(int(RECORDS * at))
            failovers.append(fail_over_partition_0(cluster, topic_name, producing, event))
        produced(RECORDS)
    finally:
        producing.stop.set()
        for event in kills:
            event.set()
        producing.thread.join(10)
        producing.producer = None  # destroyed now (its callbacks hold `producing`: a reference cycle)
    producing.healthy()
    assert producing.unflushed == 0, f"{producing.unflushed} records never acknowledged; failovers {failovers}"
    assert len(failovers) == len(KILLS_AT)
    print("failovers:", failovers)

    # every record acknowledged exactly once
    acked = producing.acked
    assert len(acked) == RECORDS and sorted(seq for _, _, seq in acked) == list(range(RECORDS)), failovers
    by_partition = {p: [(offset, seq) for part, offset, seq in acked if part == p] for p in range(3)}
    assert all(by_partition.values()), {p: len(v) for p, v in by_partition.items()}  # the keys hit every partition
    for p, records in by_partition.items():
        offsets = [offset for offset, _ in records]
        assert offsets == sorted(set(offsets)), f"partition {p}: acknowledged offsets not increasing"

    consumed = consume_everything(cluster.bootstrap, topic_name)
    seen = [seq for records in consumed.values() for _, seq in records]
    missing = set(range(RECORDS)) - set(seen)
    assert not missing, f"{len(missing)} acknowledged records not consumed, e.g. {sorted(missing)[:10]}; {failovers}"
    assert len(seen) == len(set(seen)) == RECORDS, f"{len(seen) - len(set(seen))} duplicates; {failovers}"
    for p in range(3):
        assert consumed[p] == by_partition[p], f"partition {p}: consumed order or offsets differ from the acks"

    # once replication settles, the three replicas of every partition hold the same log
    seen_ends: list = []

    def replicas_agree():
        parts = partitions_of(cluster.status(), topic_name)
        seen_ends[:] = [{r: o["log_end_offset"] for r, o in p["replica_offsets"].items()} for p in parts]
        return all(len(ends) == 3 and set(ends.values()) == {len(by_partition[p["partition"]])}
                   for p, ends in zip(parts, seen_ends))

    try:
        wait_until(replicas_agree, 15, message="every replica at the same log end offset")
    except AssertionError as e:
        raise AssertionError(f"{e}: log end offsets per partition {seen_ends}, "
                             f"records {[len(by_partition[p]) for p in range(3)]}") from None
