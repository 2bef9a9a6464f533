"""A nemesis soak: faults injected at random into `kshim serve --brokers 3` under an idempotent
acks=all producer, then a read_committed consumer counts what was lost, duplicated or reordered.

    python -m compat_tests.nemesis --seconds 420 --seed 7 [--json out.json]

One fault at a time, each healed before the next, each from a seeded RNG: SIGKILL a broker (the
leader of a partition half of the time) and start it again; SIGSTOP a broker and resume it; cut a
broker's replication traffic and heal it; SIGKILL the controller process (the supervisor starts
it again); SIGKILL every process of the cluster at once (supervisor, controller, brokers) and
start `kshim serve --brokers 3` again on the same data dir. After each heal the soak waits, with
a deadline, until every broker is alive and every ISR full; a fault that does not heal fails the
run. The producer (confluent-kafka, enable.idempotence, acks=all, a topic of 3 partitions,
replication factor 3, min.insync.replicas 2) sends sequenced records at a steady rate and records
each delivery report in order; a consumer group commits an offset first, so every restart loads
__consumer_offsets too, as a cluster in use does. At the end every acknowledged record must be
read exactly once, per partition in acknowledgement order at its acknowledged offset. Exit status
0 only then.

compat_tests/test_nemesis.py runs it for about a minute in CI; docs/robustness.md ("Soak") has
the figures of a long run.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.crash_campaign import commit_group, kill_tree
from compat_tests.kshim_process import wait_until

TOPIC = "nemesis"
PARTITIONS = 3
SESSION_TIMEOUT_MS = 2000
LAG_TIME_MS = 2000
HEAL_S = 60.0          # every broker alive and every ISR full again after a fault
FLUSH_S = 120.0        # every record acknowledged (or failed) once the faults stop
CONSUME_S = 60.0
KINDS = ("kill", "pause", "isolate", "kill-controller", "kill-tree")


@dataclass
class Report:
    seconds: float
    seed: int
    rate: int
    sent: int = 0
    acked: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    unhealed: int = 0
    no_offset: int = 0  # acknowledged, but the delivery report carried no offset
    faults: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # first few delivery errors and unhealed faults

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.unhealed or self.no_offset) \
            and self.acked > 0

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (f"nemesis seed {self.seed}, {self.seconds:.0f} s: {self.acked:,} acked of {self.sent:,} sent "
                f"({self.failed} failed), faults: {faults or 'none'}; lost {self.lost}, duplicated "
                f"{self.duplicated}, reordered {self.reordered}, unhealed {self.unhealed}, acked without offset "
                f"{self.no_offset}: "
                f"{'OK' if self.ok else 'FAILED'}")


class Producing:
    """Sequenced records at a steady rate; delivery reports in acknowledgement order."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        self.rate = rate
        self.acked: list[tuple[int, int, int]] = []  # (partition, offset, sequence)
        self.failed: list[tuple[int, str]] = []
        self.fatal: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.exception: BaseException | None = None
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": int((HEAL_S + FLUSH_S) * 1000), "request.timeout.ms": 10_000,
            "retry.backoff.ms": 100, "partitioner": "murmur2_random", "log_level": 2,
            "error_cb": self._on_error})
        self.thread = threading.Thread(target=self._run, name="nemesis-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
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
            start = time.monotonic()
            seq = 0
            while not self.stop.is_set() and not self.fatal:
                while (wait := start + seq / self.rate - time.monotonic()) > 0:
                    self.producer.poll(min(wait, 0.1))
                    if self.stop.is_set():
                        return
                try:
                    self.producer.produce(TOPIC, key=b"k%d" % (seq % 97), value=b"%d" % seq,
                                          on_delivery=self._on_delivery)
                except BufferError:  # the local queue is full (a long fault): serve reports first
                    self.producer.poll(0.1)
                    start += 0.1  # and do not burst afterwards
                    continue
                seq += 1
                self.sent = seq
                self.producer.poll(0)
        except BaseException as e:  # reported by run()
            self.exception = e

    def flush(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        left = len(self.producer)
        while left and time.monotonic() < deadline:
            left = self.producer.flush(0.5)
        return left


class Nemesis:
    def __init__(self, cluster: Cluster, rng: random.Random, report: Report) -> None:
        self.cluster = cluster
        self.rng = rng
        self.report = report

    def healthy(self) -> bool:
        status = self.cluster.status()
        parts = [p for p in status["partitions"] if p["topic"] == TOPIC]
        return (status["controller"].get("state") in (None, "running")
                and all(b["alive"] and not b["isolated"] for b in status["brokers"])
                and len(parts) == PARTITIONS
                and all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in parts))

    def ctl(self, *args: str) -> None:
        result = run_ctl(self.cluster.data_dir, *args)
        if result.returncode != 0:
            raise RuntimeError(f"kshim ctl {' '.join(args)}: {result.stderr.strip()}")

    def one(self, kind: str) -> None:
        """Inject one fault of `kind`, hold it for a moment, heal it, wait until healthy."""
        status = self.cluster.status()
        if kind == "kill-controller":
            self.ctl("kill", "controller")
        elif kind == "kill-tree":  # the whole cluster crashes: every acknowledged record must survive it
            kill_tree(self.cluster.process)
            time.sleep(self.rng.uniform(0.5, 4.0))  # down a while, the producer retrying
            self.cluster.start()  # on its data dir and ports again
        else:
            if self.rng.random() < 0.5:
                parts = [p for p in status["partitions"] if p["topic"] == TOPIC and p["leader"] >= 0]
                node = self.rng.choice(parts)["leader"] if parts else self.rng.randrange(3)
            else:
                node = self.rng.randrange(3)
            target = str(node)
            hold = self.rng.uniform(0.5, 4.0)
            if kind == "kill":
                self.ctl("kill", target)
                time.sleep(hold)  # the fault itself: held on purpose, then healed
                self.ctl("start", target)
            elif kind == "pause":
                self.ctl("pause", target)
                time.sleep(hold)
                self.ctl("resume", target)
            elif kind == "isolate":
                self.ctl("isolate", target)
                time.sleep(hold)
                self.ctl("heal", target)
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        try:
            wait_until(self.healthy, HEAL_S, interval=0.25, message=f"healthy after {kind}")
        except AssertionError:
            self.report.unhealed += 1
            self.report.failures.append(f"{kind}: not healthy after {HEAL_S:.0f} s: {self.cluster.status()}")
            raise

    def run(self, seconds: float, kinds: tuple[str, ...] = KINDS) -> None:
        """Faults until `seconds` pass and every kind ran once (the first len(kinds) are one of
        each, shuffled; heals are slow on a loaded machine), at most 4 x `seconds`."""
        start = time.monotonic()
        end, hard_end = start + seconds, start + 4 * seconds
        first = list(kinds)
        self.rng.shuffle(first)
        while (first or time.monotonic() < end) and time.monotonic() < hard_end:
            kind = first.pop() if first else self.rng.choice(kinds)
            self.one(kind)
            time.sleep(self.rng.uniform(0.5, 2.0))  # traffic between faults


def consume(bootstrap: str) -> dict[int, list[tuple[int, int]]]:
    """Every partition to its end, read_committed: (offset, sequence) in log order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-check", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 3, "fetch.max.bytes": 10_000_000})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        position = {p: 0 for p in range(PARTITIONS)}

        def read_to_the_end() -> bool:
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is not None:
                    raise AssertionError(str(msg.error()))
                got[msg.partition()].append((msg.offset(), int(msg.value())))
                position[msg.partition()] = msg.offset() + 1
            return all(position[p] >= ends[p] for p in range(PARTITIONS))

        wait_until(read_to_the_end, CONSUME_S, interval=0, message=f"every partition read to {ends}")
        return got
    finally:
        consumer.close()


def check(report: Report, acked: list[tuple[int, int, int]], consumed: dict[int, list[tuple[int, int]]]) -> None:
    """Lost: acknowledged but not read. Duplicated: read more than once. Reordered: a partition's
    acknowledged records not read in acknowledgement order at their acknowledged offsets."""
    seen = Counter(seq for records in consumed.values() for _, seq in records)
    acked_seqs = {seq for _, _, seq in acked}
    report.lost = len(acked_seqs - set(seen))
    report.duplicated = sum(n - 1 for n in seen.values() if n > 1)
    for p in range(PARTITIONS):
        read_at: dict[int, int] = {}
        for offset, seq in consumed[p]:
            read_at.setdefault(seq, offset)  # a duplicate counts as one, not as a reordering too
        last = -1
        for _, offset, seq in (a for a in acked if a[0] == p):
            if offset is None or offset < 0:  # acknowledged without an offset (the broker gave none)
                report.no_offset += 1
                continue
            # acknowledged in order at increasing offsets, and read back at the offset acknowledged
            if offset <= last or (seq in read_at and read_at[seq] != offset):
                report.reordered += 1
            last = max(last, offset)


def run(seconds: float, seed: int, rate: int = 1000, data_dir: Path | None = None,
        kinds: tuple[str, ...] = KINDS, log=print) -> Report:
    report = Report(seconds, seed, rate)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="kshim-nemesis-") as tmp:
        root = data_dir or Path(tmp)
        cluster = Cluster(root / "cluster", 3, "--replica-lag-time-max-ms", str(LAG_TIME_MS),
                          session_timeout_ms=SESSION_TIMEOUT_MS)
        with running(cluster):
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
            nemesis = Nemesis(cluster, rng, report)
            wait_until(nemesis.healthy, HEAL_S, message="topic ready")
            # restarts then load __consumer_offsets too, as a cluster in use does
            commit_group(cluster.bootstrap, (TOPIC, 0), 0, group="nemesis-group")
            producing = Producing(cluster.bootstrap, rate)
            producing.thread.start()
            try:
                wait_until(lambda: len(producing.acked) > rate // 2, 30, message="first records acknowledged")
                log(f"[nemesis] injecting faults for {seconds:.0f} s (seed {seed})")
                try:
                    nemesis.run(seconds, kinds)
                except AssertionError:
                    pass  # counted as unhealed; stop here and check what was acknowledged
            finally:
                producing.stop.set()
                producing.thread.join(10)
            left = producing.flush(FLUSH_S)
            if producing.exception is not None:
                report.failures.append(f"producer thread: {producing.exception!r}")
            report.failures += [f"fatal: {e}" for e in producing.fatal]
            if left:
                report.failures.append(f"{left} records neither acknowledged nor failed after {FLUSH_S:.0f} s")
            report.sent, report.acked, report.failed = producing.sent, len(producing.acked), len(producing.failed)
            report.failures += [f"delivery failed: seq {s}: {e}" for s, e in producing.failed[:5]]
            acked = list(producing.acked)
            producing.producer = None  # destroyed now (its callbacks hold `producing`)
            check(report, acked, consume(cluster.bootstrap))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_tests.nemesis", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to inject faults (default 60)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=int, default=1000, help="records per second the producer sends")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    report = run(args.seconds, args.seed, args.rate)
    print(report.summary())
    for line in report.failures[:10]:
        print("  " + line)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report) | {"ok": report.ok}, indent=2) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
