"""A crash campaign: seeded rounds of one SIGKILL each against `kshim serve --brokers 3` (and a
single `kshim serve`), under producers that record every acknowledgement; after each restart every
partition is read from the beginning and nothing acknowledged may be missing, moved or duplicated.

    python -m compat_tests.crash_campaign --rounds 60 --seed 7 [--json out.json] [--data-dir D]
                                          [--kinds kill-tree,...] [--wide 2000]

The cluster (3 brokers, `--log-dirs A,B`) keeps one data directory for the whole campaign, so each
restart recovers the data of every round before it. Topics: crash-rf1 (3 partitions, replication
factor 1), crash-rf3 (3 partitions, RF 3, min.insync.replicas 2, 16 KiB segments) and
crash-compact (RF 3, cleanup.policy compact, 16 KiB segments). A consumer group commits an offset
every round (so every restart loads __consumer_offsets too) and the commit must survive. Each
round runs two confluent-kafka producers, an idempotent acks=all one (every topic) and a plain
acks=1 one (crash-rf1, crash-rf3), records every delivery report, then injects ONE fault, chosen
by a seeded RNG (the first rounds are one of each kind, shuffled):

    kill-tree          SIGKILL of every process of the cluster (supervisor, controller, brokers)
    kill-broker        `kshim ctl kill N`, then `kshim ctl start N`
    kill-controller    `kshim ctl kill controller` (the supervisor starts it again)
    kill-recovering    kill-tree, start, and a second kill-tree while the brokers recover
    kill-stopping      SIGTERM (a clean stop) and a SIGKILL of the tree while it stops
    kill-compaction    a SIGKILL (tree or one broker) while crash-compact is being cleaned
    kill-deletion      a topic deleted and a SIGKILL at once; it must stay deleted afterwards
    kill-roll          a SIGKILL the moment a crash-rf3 replica rolls a new segment
    kill-log-dir-move  AlterReplicaLogDirs of a replica, SIGKILL while its copy is made
    kill-reassignment  a crash-rf1 partition reassigned to another broker, SIGKILL (tree, source or
                       target) while the target copies it; the move must complete with every record
    single-kill        a single `kshim serve` SIGKILLed under both producers and started again
    ephemeral-kill     `kshim serve --ephemeral` SIGKILLed: the next --ephemeral start names the
                       killed one's directory, says its data is gone, deletes it and starts empty

A broker started again after a SIGKILL must hold its data itself: when one broker was killed
(kill-broker, and the kinds that kill the tree or one broker when they kill one), the other
brokers drop its replication fetches until its own log end offsets (its admin socket) reach what
it held before the kill; after a restart of the tree every broker's offsets are checked the same
way, best effort (nothing is blocked then). `--wide N` adds a topic of N replication factor 1
partitions, one record each: every restart recovers them too (checked on each broker, read back
at the end).

The check, per read (read_committed and read_uncommitted): an acknowledged record missing
(lost), read at another offset than acknowledged (moved), an idempotent record read twice
(duplicated), a hole in a partition's offsets (gap; not in the compacted topic, where a key's
latest record is what must stay). acks=1 records count as acknowledged too (kill -9 keeps the page
cache, and kshim appends before it answers), except those above the partition's high watermark
when the fault struck whose leader epoch then changed: UNCOMMITTED records a failover may lose
(docs/consistency.md), counted apart. So are idempotent records read twice whose two copies the
log holds under two epochs of the producer: librdkafka re-sends a record whose first send's outcome
it never learnt (the kill cut the connection) with a new sequence after it bumped its epoch
(KIP-360: a later request of another partition failed out of order behind one that failed first),
a new batch the broker cannot tell from a retry; one epoch for both copies is a duplicate the
broker let in. Exit status 0 only when nothing was lost, moved, duplicated or missing from its
broker, and every fault healed.

compat_tests/test_crash_campaign.py runs every kind once in CI; docs/robustness.md ("Crash
campaign") has the figures of a long run.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import anyio
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import Cluster, pid_exists, run_ctl
from compat_tests.kshim_process import KshimProcess, wait_until
from kshim.controller import messages as m
from kshim.ctl import brokers_admin
from kshim.ctl import compact as ctl_compact
from kshim.ctl.faults import FaultClient
from kshim.observability.faults import replica_client_id
from wire import records

RF1, RF3, COMPACT, SINGLE, WIDE = "crash-rf1", "crash-rf3", "crash-compact", "crash-single", "crash-wide"
PARTITIONS = 3
COMPACT_KEYS = 40
SEGMENT_BYTES = 16384  # rolls every ~130 records of a partition: kill-roll finds one within seconds
VALUE_BYTES = 120
GROUP = "crash-campaign"
BROKERS = 3
SESSION_TIMEOUT_MS = 2000
LAG_TIME_MS = 2000
HEAL_S = 60.0            # every broker alive and every ISR full again after a fault
FLUSH_S = 100.0          # every record acknowledged (or failed) once the producers stop
MESSAGE_TIMEOUT_MS = 90_000
ON_BROKER_S = 15.0       # a restarted broker reports the log end offsets it had
READ_S = 60.0
STABLE_S = 5.0           # high watermarks that stopped moving this long below an acknowledged offset
FAULT_LABEL = "crash-campaign"
KINDS = ("kill-tree", "kill-broker", "kill-controller", "kill-recovering", "kill-stopping", "kill-compaction",
         "kill-deletion", "kill-roll", "kill-log-dir-move", "kill-reassignment", "single-kill", "ephemeral-kill")
SINGLE_KINDS = ("single-kill", "ephemeral-kill")
IDEMPOTENT_TAG = b"i"  # values are b"<tag>.<round>.<seq>." + padding; the tag says which producer

TP = tuple[str, int]


@dataclass
class Ack:
    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None
    idempotent: bool
    round: int
    at: float = 0.0          # time.monotonic() of the delivery report
    may_lose: bool = False   # acks=1, above the high watermark when its leader's epoch changed

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)


@dataclass
class Tally:
    """What one read of every partition shows against what was acknowledged. Sets, so that a
    campaign that reads everything again each round counts each record once."""
    missing: set[tuple[str, int, int]] = field(default_factory=set)        # (topic, partition, offset)
    moved: set[tuple[str, int, int]] = field(default_factory=set)          # acknowledged there, read elsewhere
    duplicated: set[bytes] = field(default_factory=set)                    # idempotent values read twice
    gaps: set[tuple[str, int, int]] = field(default_factory=set)           # offsets never read below the end
    uncommitted_lost: set[tuple[str, int, int]] = field(default_factory=set)
    plain_duplicates: set[bytes] = field(default_factory=set)              # acks=1 values read twice (allowed)


@dataclass
class Round:
    index: int
    kind: str
    target: str = ""
    seconds: float = 0.0
    acked: int = 0           # this round's acknowledgements (both producers)
    failed: int = 0
    lost: int = 0            # new in this round (a record lost earlier is not counted again)
    moved: int = 0
    duplicated: int = 0
    gaps: int = 0
    not_on_broker: int = 0
    held_on_broker: int = 0  # replicas whose restarted broker was checked to hold its own data
    uncommitted_lost: int = 0
    plain_duplicates: int = 0
    resent: int = 0          # idempotent records re-sent under a new producer epoch (see the notes)
    problems: list[str] = field(default_factory=list)


@dataclass
class Report:
    rounds_asked: int
    seed: int
    rate: int
    seconds: float = 0.0
    acked: int = 0
    acked_idempotent: int = 0
    acked_plain: int = 0
    failed: int = 0
    lost: int = 0
    moved: int = 0
    duplicated: int = 0
    gaps: int = 0
    not_on_broker: int = 0   # a restarted broker lacked data it had before its kill
    unhealed: int = 0
    problems: int = 0        # anything else that broke: a fatal producer error, a deletion undone, ...
    uncommitted_lost: int = 0
    plain_duplicates: int = 0
    resent: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    data_dir: str = ""

    @property
    def ok(self) -> bool:
        # a campaign that acknowledged nothing proved nothing (only --ephemeral rounds check no records)
        return not (self.lost or self.moved or self.duplicated or self.gaps or self.not_on_broker or self.unhealed
                    or self.problems) and (self.acked > 0 or all(r.kind == "ephemeral-kill" for r in self.rounds))

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (f"crash campaign seed {self.seed}, {len(self.rounds)} rounds in {self.seconds:.0f} s: "
                f"{self.acked:,} acked ({self.acked_idempotent:,} idempotent acks=all, {self.acked_plain:,} acks=1; "
                f"{self.failed} failed), faults: {faults or 'none'}; lost {self.lost}, moved {self.moved}, "
                f"duplicated {self.duplicated}, gaps {self.gaps}, not on their broker {self.not_on_broker}, "
                f"unhealed {self.unhealed}, other problems {self.problems} "
                f"(acks=1 uncommitted lost on failover {self.uncommitted_lost}, acks=1 duplicates "
                f"{self.plain_duplicates}, idempotent re-sent after the client bumped its epoch {self.resent}): "
                f"{'OK' if self.ok else 'FAILED'}")


# --- the check ---------------------------------------------------------------------------------

def check(acked: Iterable[Ack], consumed: dict[TP, list[tuple[int, bytes | None, bytes]]],
          compacted: Iterable[str] = ()) -> Tally:
    """Acknowledged records against one read of every partition ((offset, key, value) in read
    order). Lost: not read anywhere (in a compacted topic: unless a record of its key was read at a
    later offset). Moved: read, but not at the acknowledged offset. Duplicated: an idempotent
    producer's value read twice. Gaps: offsets below the last one read that were not read (not
    counted in compacted topics, whose cleaning leaves holes)."""
    compacted = set(compacted)
    tally = Tally()
    where: dict[TP, dict[bytes, list[int]]] = {}
    latest_key: dict[TP, dict[bytes | None, int]] = {}
    for tp, records in consumed.items():
        at: dict[bytes, list[int]] = defaultdict(list)
        keys: dict[bytes | None, int] = {}
        seen_offsets: set[int] = set()
        for offset, key, value in records:
            if offset in seen_offsets:  # a consumer may hand an offset twice after a refetch: one record
                continue
            seen_offsets.add(offset)
            at[value].append(offset)
            keys[key] = max(keys.get(key, -1), offset)
        where[tp], latest_key[tp] = at, keys
        for value, offsets in at.items():
            if len(offsets) > 1:
                (tally.duplicated if value.startswith(IDEMPOTENT_TAG + b".") else tally.plain_duplicates).add(value)
        if tp[0] not in compacted and seen_offsets:
            tally.gaps.update((tp[0], tp[1], o) for o in set(range(max(seen_offsets) + 1)) - seen_offsets)
    for a in acked:
        offsets = where.get(a.tp, {}).get(a.value, [])
        if not offsets:
            if a.topic in compacted and latest_key.get(a.tp, {}).get(a.key, -1) > a.offset:
                continue  # cleaned away: a later record of its key was read
            (tally.uncommitted_lost if a.may_lose else tally.missing).add((a.topic, a.partition, a.offset))
        elif a.offset not in offsets:
            tally.moved.add((a.topic, a.partition, a.offset))
    return tally


def resent_after_a_bump(value: bytes, consumed: dict[TP, list[tuple[int, bytes | None, bytes]]],
                        log_dirs: Iterable[Path]) -> bool:
    """Whether the copies of an idempotent value read twice are batches of one producer under
    different epochs, as a replica's log holds them (see the module's notes)."""
    for tp, read in consumed.items():
        offsets = sorted({o for o, _, v in read if v == value})
        if len(offsets) < 2:
            continue
        for d in log_dirs:
            for replica in d.glob(f"broker-*/{tp[0]}-{tp[1]}"):
                writers = batch_writers(replica, offsets)
                if len(writers) == len(offsets):
                    return len({pid for pid, _ in writers.values()}) == 1 and len(set(writers.values())) == len(offsets)
    return False


def batch_writers(replica: Path, offsets: Iterable[int]) -> dict[int, tuple[int, int]]:
    """The (producer id, producer epoch) of the batches of a replica's log that hold these offsets
    (those it holds; a segment being written may end in a partial batch)."""
    wanted, found = set(offsets), {}
    for segment in sorted(replica.glob("*.log")):
        try:
            for _, h in records.iter_batches(segment.read_bytes(), strict=False):
                last = h.base_offset + h.last_offset_delta
                found.update((o, (h.producer_id, h.producer_epoch)) for o in wanted if h.base_offset <= o <= last)
        except records.CorruptRecordError:  # torn mid-write: what came before it counts
            pass
    return found


def ranges(offsets: Iterable[int]) -> str:
    """1,2,3,7 -> '1..3, 7' (at most 6 ranges shown)."""
    out: list[str] = []
    start = prev = None
    for o in sorted(offsets):
        if prev is not None and o == prev + 1:
            prev = o
            continue
        if start is not None:
            out.append(f"{start}..{prev}" if prev != start else str(start))
        start = prev = o
    if start is not None:
        out.append(f"{start}..{prev}" if prev != start else str(start))
    return ", ".join(out[:6]) + (f", ... ({len(out)} ranges)" if len(out) > 6 else "")


def by_partition(items: Iterable[tuple[str, int, int]]) -> str:
    grouped: dict[TP, list[int]] = defaultdict(list)
    for t, p, o in items:
        grouped[(t, p)].append(o)
    return "; ".join(f"{t}/{p} offsets {ranges(os_)} ({len(os_)})" for (t, p), os_ in sorted(grouped.items()))


# --- processes ---------------------------------------------------------------------------------

def process_tree(root: int) -> list[int]:
    """root and every process below it (by parent pid in /proc): the supervisor's children start
    sessions of their own, so a process group would not reach them."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children[ppid].append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def kill_tree(process: KshimProcess, reap: bool = True) -> list[int]:
    """SIGKILL the serve process and every process under it, the root first so that nothing is
    restarted, all within a few microseconds; wait until all are gone."""
    assert process.proc is not None
    pids = process_tree(process.proc.pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if reap:
        process.kill()  # reaps the root and closes its output pipe
    wait_until(lambda: not any(pid_exists(p) for p in pids[1:]), 10, message=f"processes {pids} gone")
    return pids


class EphemeralServe(KshimProcess):
    """`kshim serve --ephemeral` on a free port; `kill` takes its whole process tree."""

    def __init__(self) -> None:
        super().__init__(None, "--no-console")

    @property
    def ephemeral_dir(self) -> Path:
        """The directory its ready line names."""
        match = re.search(r"data in (.+?) \(EPHEMERAL", self.ready_line)
        return Path(match.group(1)) if match else Path("/nonexistent")

    def kill(self) -> list[int]:  # type: ignore[override]
        pids: list[int] = []
        if self.proc and self.proc.poll() is None:
            pids = kill_tree(self, reap=False)
            self.proc.wait(10)
        self._close_pipe()
        return pids


# --- clients -----------------------------------------------------------------------------------

class Producing:
    """One producer thread at a steady rate over `targets` ((topic, partition, keyed)); every
    delivery report recorded."""

    def __init__(self, bootstrap: str, idempotent: bool, targets: list[tuple[str, int, bool]], rate: int,
                 round_no: int, rng: random.Random) -> None:
        self.idempotent = idempotent
        self.targets = targets
        self.rate = rate
        self.round = round_no
        self.rng = random.Random(rng.random())  # its own stream: the thread's timing must not shift the campaign's
        self.acked: list[Ack] = []
        self.failed: list[tuple[bytes, str]] = []
        self.fatal: list[str] = []
        self.errors: Counter[str] = Counter()  # error_cb codes (all brokers down, transport, ...)
        self.sent = 0
        self.stop = threading.Event()
        self.exception: BaseException | None = None
        self.tag = IDEMPOTENT_TAG if idempotent else b"p"
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "request.timeout.ms": 10_000, "retry.backoff.ms": 100, "log_level": 2, "error_cb": self._on_error}
        conf |= {"enable.idempotence": True, "acks": "all"} if idempotent else {"enable.idempotence": False, "acks": 1}
        self.producer: Producer | None = Producer(conf)
        self.thread = threading.Thread(target=self._run, name=f"crash-producer-{self.tag.decode()}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(str(err))
        self.errors[err.name()] += 1

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed.append((msg.value(), str(err)))
        else:
            self.acked.append(Ack(msg.topic(), msg.partition(), msg.offset(), msg.value(), msg.key(), self.idempotent,
                                  self.round, time.monotonic()))

    def _run(self) -> None:
        assert self.producer is not None
        try:
            start = time.monotonic()
            seq = 0
            while not self.stop.is_set() and not self.fatal:
                while (wait := start + seq / self.rate - time.monotonic()) > 0:
                    self.producer.poll(min(wait, 0.1))
                    if self.stop.is_set():
                        return
                topic, partition, keyed = self.rng.choice(self.targets)
                value = (b"%s.%d.%d." % (self.tag, self.round, seq)).ljust(VALUE_BYTES, b"x")
                key = b"k%d" % (seq % COMPACT_KEYS) if keyed else None
                try:
                    self.producer.produce(topic, value=value, key=key, partition=partition,
                                          on_delivery=self._on_delivery)
                except BufferError:  # the local queue is full (a long fault): serve reports first
                    self.producer.poll(0.1)
                    start += 0.1
                    continue
                seq += 1
                self.sent = seq
                self.producer.poll(0)
        except BaseException as e:  # reported by the round
            self.exception = e

    def finish(self, timeout_s: float) -> int:
        """Stop sending, wait for every report; how many records got none."""
        self.stop.set()
        self.thread.join(10)
        assert self.producer is not None
        deadline = time.monotonic() + timeout_s
        left = len(self.producer)
        while left and time.monotonic() < deadline and not self.fatal:
            left = self.producer.flush(0.5)
        self.producer = None  # destroyed now (its callbacks hold this object)
        gc.collect()
        return left


def read_back(bootstrap: str, tps: list[TP], isolation: str, need: dict[TP, int]
              ) -> tuple[dict[TP, list[tuple[int, bytes | None, bytes]]], dict[TP, int], list[str]]:
    """Every partition from its beginning to its end: (offset, key, value) in read order, the ends
    read to, problems. The end waited for is at least `need` (one past the last acknowledged
    offset), for READ_S or until no high watermark moved for STABLE_S (the producers are done by
    now: records that are not there are lost, not late); a partition that never gets there is read
    to where it is, the rest counted missing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"crash-read-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "log_level": 3,
                         "fetch.max.bytes": 10_000_000, "auto.offset.reset": "earliest"})
    problems: list[str] = []
    got: dict[TP, list[tuple[int, bytes | None, bytes]]] = {tp: [] for tp in tps}
    try:
        ends: dict[TP, int] = {}
        moved_at = [time.monotonic()]
        last_error = [""]

        def watermarks() -> bool:
            for tp in tps:
                if ends.get(tp, -1) >= need.get(tp, 0):
                    continue
                try:
                    end = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=5)[1]
                except Exception as e:  # leader not there yet: retried until the deadline
                    ends.setdefault(tp, -1)
                    last_error[0] = f"{tp}: {e}"
                    continue
                if end != ends.get(tp):
                    ends[tp] = end
                    moved_at[0] = time.monotonic()
            done = all(ends[tp] >= need.get(tp, 0) for tp in tps)
            return done or (time.monotonic() - moved_at[0] > STABLE_S and min(ends.values()) >= 0)

        try:
            wait_until(watermarks, READ_S, interval=0.2, message="high watermarks past every acknowledged offset")
        except AssertionError:
            pass
        short = {f"{t}/{p}": (ends.get((t, p)), need.get((t, p))) for t, p in tps
                 if ends.get((t, p), -1) < need.get((t, p), 0)}
        if short:
            problems.append(f"{isolation}: high watermark below the acknowledged end (partition: (watermark, "
                            f"needed)): {short} {last_error[0]}")
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in tps])
        position = {tp: 0 for tp in tps}
        target = {tp: max(ends.get(tp, 0), 0) for tp in tps}

        def read_to_the_end() -> bool:
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is not None:
                    problems.append(f"{isolation}: {msg.topic()}/{msg.partition()}: {msg.error()}")
                    continue
                tp, offset = (str(msg.topic()), int(msg.partition() or 0)), int(msg.offset() or 0)
                got[tp].append((offset, msg.key(), msg.value() or b""))
                position[tp] = offset + 1
            return all(position[tp] >= target[tp] for tp in tps)

        try:
            wait_until(read_to_the_end, READ_S, interval=0, message=f"every partition read to {target}")
        except AssertionError:
            behind = {f"{t}/{p}": (position[(t, p)], target[(t, p)]) for t, p in tps if position[(t, p)] < target[(t, p)]}
            problems.append(f"{isolation}: not read to the end in {READ_S:.0f} s (position, end): {behind}")
    finally:
        consumer.close()
    return got, ends, problems[:10]


def commit_group(bootstrap: str, tp: TP, offset: int, group: str = GROUP) -> None:
    """A group commits `offset` for `tp`: __consumer_offsets exists from then on."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 3})
    try:
        def commit() -> bool:
            try:
                consumer.commit(offsets=[TopicPartition(*tp, offset)], asynchronous=False)
                return True
            except Exception:  # the coordinator is loading or moving: retried until the deadline
                return False
        wait_until(commit, 30, interval=0.2, message=f"group {group} commits {tp} at {offset}")
    finally:
        consumer.close()


def committed(bootstrap: str, tp: TP) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "log_level": 3})
    try:
        def ask() -> int | None:
            try:
                return consumer.committed([TopicPartition(*tp)], timeout=5)[0].offset
            except Exception:
                return None
        return wait_until(lambda: (o := ask()) is not None and (o,), 30, interval=0.2,
                          message=f"group {GROUP}'s committed offset of {tp}")[0]
    finally:
        consumer.close()


def create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for name, future in admin.create_topics(topics, operation_timeout=30).items():
        try:
            future.result(60)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                raise


def topic_names(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return set(admin.list_topics(timeout=20).topics)


# --- the campaign ------------------------------------------------------------------------------

class Campaign:
    def __init__(self, root: Path, seed: int, rate: int, wide: int = 0, log: Callable[[str], None] = print) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.rate = rate
        self.wide = wide
        self.log = log
        self.report = Report(0, seed, rate, data_dir=str(root))
        self.log_dirs = [root / "logs-a", root / "logs-b"]
        self.cluster: Cluster | None = None
        self.single: KshimProcess | None = None
        self.acked: list[Ack] = []         # the cluster's, every round
        self.single_acked: list[Ack] = []  # the single broker's, every round
        self.seen = Tally()                # problems already counted (each record once)
        self.single_seen = Tally()
        self.snap: dict[str, Any] = {}
        self.crashed_at = 0.0  # time.monotonic() of the last crash: a loss report says when its records were acked
        self.round: Round = Round(0, "")
        self.live: list[Producing] = []    # this round's producers: their acknowledgements so far count too
        self.doomed = ""                   # kill-deletion's topic
        self.moving: tuple[int, TP] = (0, ("", 0))  # kill-log-dir-move's replica
        self.reassigned: tuple[TP, int] = (("", 0), 0)  # kill-reassignment's partition and target

    # the cluster
    def start_cluster(self) -> None:
        self.cluster = Cluster(self.root / "cluster", BROKERS, "--log-dirs", ",".join(map(str, self.log_dirs)),
                               "--replica-lag-time-max-ms", str(LAG_TIME_MS), "--no-console",
                               "--log-cleaner-backoff-ms", "1000", session_timeout_ms=SESSION_TIMEOUT_MS)
        self.cluster.start()
        rf3 = {"min.insync.replicas": "2", "segment.bytes": str(SEGMENT_BYTES)}
        topics = [NewTopic(RF1, PARTITIONS, 1), NewTopic(RF3, PARTITIONS, 3, config=rf3),
                  NewTopic(COMPACT, 1, 3, config=rf3 | {"cleanup.policy": "compact",
                                                         "min.cleanable.dirty.ratio": "0.1"})]
        if self.wide:
            topics.append(NewTopic(WIDE, self.wide, 1))
        create_topics(self.cluster.bootstrap, topics)
        wait_until(self.healthy, HEAL_S, interval=0.25, message="topics ready")
        if self.wide:  # one acknowledged record per partition: every restart recovers them all
            producer = Producer({"bootstrap.servers": self.cluster.bootstrap, "enable.idempotence": True,
                                 "log_level": 3})

            def on_delivery(err, msg) -> None:
                if err is None:
                    self.acked.append(Ack(WIDE, msg.partition(), msg.offset(), msg.value(), None, True, 0))
            for p in range(self.wide):
                producer.produce(WIDE, value=b"i.0.%d." % p, partition=p, on_delivery=on_delivery)
                producer.poll(0)
            if producer.flush(60):
                raise RuntimeError(f"{WIDE}: records not acknowledged in 60 s")

    def start_tree(self) -> None:
        assert self.cluster is not None
        self.cluster.start()  # on its data dir and ports again

    def topics(self) -> dict[str, int]:
        out = {RF1: PARTITIONS, RF3: PARTITIONS, COMPACT: 1}
        if self.wide:
            out[WIDE] = self.wide
        return out

    def healthy(self) -> bool:
        assert self.cluster is not None
        try:
            status = self.cluster.status()
        except Exception:  # the supervisor is starting or gone
            return False
        want = self.topics()
        parts = [p for p in status["partitions"] if p["topic"] in want]
        return (status["controller"].get("state") in (None, "running")
                and len(status["brokers"]) == BROKERS
                and all(b["alive"] and not b["isolated"] and b.get("process", "running") == "running"
                        for b in status["brokers"])
                and len(parts) == sum(want.values())
                and all(p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]) for p in parts))

    def ctl(self, *args: str) -> str:
        assert self.cluster is not None
        result = run_ctl(self.cluster.data_dir, *args)
        if result.returncode != 0:
            raise RuntimeError(f"kshim ctl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def problem(self, text: str) -> None:
        self.round.problems.append(text)
        self.report.problems += 1
        self.report.failures.append(f"round {self.round.index} {self.round.kind}: {text}")
        self.log(f"[crash]   PROBLEM: {text}")

    # what each broker must still hold after a restart
    def all_acked(self) -> list[Ack]:
        return self.acked + [a for p in self.live for a in list(p.acked)]

    def snapshot(self) -> None:
        """Right before a fault: leaders, epochs, high watermarks, and per broker the log end each
        of its replicas must have after a restart: one past the last record it must hold (acks=1 and
        acks=all on a replication factor 1 leader; acks=all on an in-sync replica), at most what it
        reported (its heartbeats' offsets: a record lost in an earlier round is not counted again)."""
        assert self.cluster is not None
        status = self.cluster.status()
        acked = self.all_acked()
        last_any: dict[TP, int] = {}
        last_all: dict[TP, int] = {}
        for a in acked:
            last_any[a.tp] = max(last_any.get(a.tp, -1), a.offset)
            if a.idempotent:
                last_all[a.tp] = max(last_all.get(a.tp, -1), a.offset)
        must: dict[int, dict[TP, int]] = defaultdict(dict)
        parts: dict[TP, dict] = {}
        for p in status["partitions"]:
            tp = (p["topic"], p["partition"])
            parts[tp] = p
            if p["topic"] not in self.topics():
                continue
            for node in p["isr"]:
                last = (last_any if len(p["replicas"]) == 1 else last_all).get(tp, -1)
                reported = p["replica_offsets"].get(str(node), {}).get("log_end_offset")
                if last >= 0 and reported is not None:
                    must[node][tp] = min(last + 1, reported)
        self.snap = {"partitions": parts, "must": must}

    def broker_offsets(self, node: int, data_dir: Path | None = None) -> dict[TP, int]:
        """A broker's own log end offsets, from its admin socket (a single serve's: `data_dir`)."""
        if data_dir is not None:
            path = data_dir / brokers_admin.SOCKET_NAME
        else:
            assert self.cluster is not None
            path = self.cluster.data_dir / f"broker-{node}" / brokers_admin.SOCKET_NAME
        status = json.loads(brokers_admin.call(path, m.BrokerStatus(), 5, node))
        return {(p["topic"], p["partition"]): p["replica_offsets"][str(node)]["log_end_offset"]
                for p in status["partitions"] if str(node) in p["replica_offsets"]}

    def check_on_brokers(self, nodes: Iterable[int], must: dict[int, dict[TP, int]],
                         data_dir: Path | None = None) -> None:
        """Each broker's own log ends reach what it had to hold before the fault (ON_BROKER_S)."""
        short: dict[int, dict[TP, tuple[int | None, int]]] = {}
        silent: dict[int, str] = {}

        def enough() -> bool:
            short.clear()
            silent.clear()
            for node in nodes:
                try:
                    have = self.broker_offsets(node, data_dir)
                except Exception as e:  # not answering yet
                    silent[node] = str(e)
                    continue
                lacking = {tp: (have.get(tp), end) for tp, end in must.get(node, {}).items()
                           if have.get(tp, -1) < end}
                if lacking:
                    short[node] = lacking
            return not short and not silent

        try:
            wait_until(enough, ON_BROKER_S, interval=0.1, message="restarted brokers holding their data")
            self.round.held_on_broker += sum(len(must.get(node, {})) for node in nodes)
        except AssertionError:
            n = sum(len(v) for v in short.values())
            self.round.not_on_broker += n
            self.report.not_on_broker += n
            for node, lacking in short.items():
                text = (f"broker {node} after its restart: " +
                        ", ".join(f"{t}/{p} log end {have} < {end} held before the kill"
                                  for (t, p), (have, end) in sorted(lacking.items())))
                self.report.failures.append(f"round {self.round.index} {self.round.kind}: {text}")
                self.log(f"[crash]   NOT ON BROKER: {text}")
            for node, error in silent.items():
                self.problem(f"broker {node}'s admin socket did not answer {ON_BROKER_S:.0f} s after its restart: "
                             f"{error}")

    # faults
    def crash(self, target: str) -> None:
        assert self.cluster is not None
        self.crashed_at = time.monotonic()
        if target == "tree":
            kill_tree(self.cluster.process)
        elif target == "controller":
            self.ctl("kill", "controller")
        else:
            self.ctl("kill", target)

    def recover(self, target: str) -> None:
        assert self.cluster is not None
        must = self.snap["must"]
        if target == "tree":
            self.start_tree()
            self.check_on_brokers(range(BROKERS), must)  # best effort: nothing stops a refetch here
        elif target != "controller":
            node = int(target)
            # the others drop its replication fetches: what it has after the start is from its own disk
            faults = FaultClient(self.cluster.data_dir)
            for other in range(BROKERS):
                if other != node:
                    faults.add("drop", client_id=replica_client_id(node), duration_ms=120_000, label=FAULT_LABEL,
                               broker=other)
            try:
                self.ctl("start", target)
                self.check_on_brokers([node], must)
            finally:
                faults.clear(label=FAULT_LABEL)
        try:
            wait_until(self.healthy, HEAL_S, interval=0.25, message=f"healthy after {self.round.kind}")
        except AssertionError:
            self.report.unhealed += 1
            self.problem(f"not healthy {HEAL_S:.0f} s after the restart: {self.cluster.diagnose()[:3000]}")
            raise

    def pick_broker(self, status: dict) -> int:
        """The leader of a crash-rf3 partition half of the time, else any broker."""
        if self.rng.random() < 0.5:
            leaders = [p["leader"] for p in status["partitions"] if p["topic"] == RF3 and p["leader"] >= 0]
            if leaders:
                return self.rng.choice(leaders)
        return self.rng.randrange(BROKERS)

    def replica_dir(self, node: int, tp: TP) -> Path | None:
        for d in self.log_dirs:
            path = d / f"broker-{node}" / f"{tp[0]}-{tp[1]}"
            if path.is_dir():
                return path
        return None

    def fault(self, kind: str) -> str:
        """Inject one fault of `kind` (the snapshot taken right before it); the target to recover."""
        assert self.cluster is not None
        rng = self.rng
        status = self.cluster.status()
        either = "tree" if rng.random() < 0.5 else str(self.pick_broker(status))
        if kind == "kill-tree":
            self.snapshot()
            self.crash("tree")
            return "tree"
        if kind == "kill-broker":
            target = str(self.pick_broker(status))
            self.snapshot()
            self.crash(target)
            time.sleep(rng.uniform(0.2, 1.5))  # the broker stays dead a while: the fault itself
            return target
        if kind == "kill-controller":
            self.snapshot()
            self.crash("controller")
            return "controller"
        if kind == "kill-recovering":
            self.snapshot()
            self.crash("tree")
            logs = sorted(self.cluster.data_dir.glob("broker-*/broker.log"))
            sizes = {p: p.stat().st_size for p in logs}
            old = self.cluster.process.proc
            outcome: list[BaseException | None] = []

            def start() -> None:
                try:
                    self.start_tree()
                    outcome.append(None)
                except BaseException as e:  # killed before its ready line: expected
                    outcome.append(e)

            starter = threading.Thread(target=start, daemon=True)
            starter.start()

            def recovering() -> bool:
                for p in logs:
                    with open(p, "rb") as f:
                        f.seek(sizes[p])
                        text = f.read()
                    if b"recovering" in text or b"listening on" in text or b"registered" in text:
                        return True
                return False
            try:
                wait_until(recovering, 20, interval=0.005, message="a broker starting to recover")
            except AssertionError:
                pass  # killed anyway: at whatever point the start is
            time.sleep(rng.uniform(0, 0.1))
            before_ready = not outcome
            wait_until(lambda: self.cluster.process.proc is not old, 5, message="serve started")
            kill_tree(self.cluster.process, reap=False)
            starter.join(60)
            self.cluster.process.kill()
            self.round.target = f"tree, again {'before' if before_ready else 'after'} its ready line"
            return "tree"
        if kind == "kill-stopping":
            self.snapshot()
            assert self.cluster.process.proc is not None
            self.cluster.process.proc.send_signal(signal.SIGTERM)
            time.sleep(rng.uniform(0, 0.5))
            kill_tree(self.cluster.process)
            return "tree"
        if kind == "kill-compaction":
            self.snapshot()
            thread = threading.Thread(target=lambda: self._compact_quietly(), daemon=True)
            thread.start()
            time.sleep(rng.uniform(0, 0.15))
            self.crash(either)
            thread.join(30)
            return either
        if kind == "kill-deletion":
            doomed = f"crash-doomed-{self.round.index}"
            rf = rng.choice([1, 3])
            create_topics(self.cluster.bootstrap, [NewTopic(doomed, PARTITIONS, rf)])
            producer = Producer({"bootstrap.servers": self.cluster.bootstrap, "acks": "all", "log_level": 2})
            for i in range(300):
                producer.produce(doomed, value=b"d%d" % i, partition=i % PARTITIONS)
            producer.flush(30)
            del producer
            self.snapshot()
            admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap, "log_level": 3})
            admin.delete_topics([doomed], operation_timeout=10)
            time.sleep(rng.uniform(0, 0.05))
            self.crash(either)
            self.doomed = doomed
            return either
        if kind == "kill-roll":
            node = self.pick_broker(status)
            tp = (RF3, rng.randrange(PARTITIONS))
            target = "tree" if rng.random() < 0.5 else str(node)
            self.snapshot()
            path = self.replica_dir(node, tp)
            segments = (lambda: len(list(path.glob("*.log")))) if path is not None else (lambda: 0)
            before = segments()
            try:
                wait_until(lambda: segments() > before, 10, interval=0.002, message=f"{tp} rolling on broker {node}")
            except AssertionError:
                self.problem(f"no segment roll of {tp} on broker {node} within 10 s (killed anyway)")
            self.crash(target)
            self.round.target = f"{target} at a roll of {tp[0]}/{tp[1]} on broker {node}"
            return target
        if kind == "kill-log-dir-move":
            from kafka import TopicPartitionReplica  # type: ignore[import-untyped]
            from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]
            node = self.pick_broker(status)
            hosted = [(p["topic"], p["partition"]) for p in status["partitions"]
                      if p["topic"] in (RF1, RF3) and node in p["replicas"]]
            tp = rng.choice(hosted)
            source = self.replica_dir(node, tp)
            dest = next(d / f"broker-{node}" for d in self.log_dirs
                        if source is None or d / f"broker-{node}" != source.parent)
            target = "tree" if rng.random() < 0.5 else str(node)
            self.snapshot()
            kadmin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap, request_timeout_ms=30000)
            try:
                out = kadmin.alter_replica_log_dirs({TopicPartitionReplica(tp[0], tp[1], node): str(dest)})
            finally:
                kadmin.close()
            if any(getattr(e, "errno", 0) for e in out.values()):
                self.problem(f"AlterReplicaLogDirs {tp} on broker {node} to {dest}: {out}")
            try:
                wait_until(lambda: any(dest.glob(f"{tp[0]}-{tp[1]}.*-future")), 2, interval=0.002,
                           message="the future replica directory")
            except AssertionError:
                pass  # already moved (a small log): killed right after
            time.sleep(rng.uniform(0, 0.05))
            self.crash(target)
            self.moving = (node, tp)
            self.round.target = f"{target} moving {tp[0]}/{tp[1]} of broker {node} to {dest.parent.name}"
            return target
        if kind == "kill-reassignment":
            from kafka import TopicPartition as KafkaTP  # type: ignore[import-untyped]
            from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]
            part = rng.choice([p for p in status["partitions"] if p["topic"] == RF1])
            tp, source = (RF1, part["partition"]), part["replicas"][0]
            dest = rng.choice([n for n in range(BROKERS) if n != source])
            target = rng.choice(["tree", str(source), str(dest)])
            self.snapshot()
            # the source gives its replica up once the move completes: only the target must hold it then
            self.snap["must"].get(source, {}).pop(tp, None)
            kadmin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap, request_timeout_ms=30000)
            try:
                out = kadmin.alter_partition_reassignments({KafkaTP(tp[0], tp[1]): [dest]})
            finally:
                kadmin.close()
            if any(v is not None for v in out.values()):
                self.problem(f"AlterPartitionReassignments {tp} {source} -> {dest}: {out}")
            try:  # killed while the target copies, when the copy is slow enough to be caught at it
                wait_until(lambda: self.replica_dir(dest, tp) is not None, 2, interval=0.002,
                           message="the target's replica")
            except AssertionError:
                pass
            time.sleep(rng.uniform(0, 0.05))
            self.crash(target)
            self.reassigned = (tp, dest)
            self.round.target = f"{target} moving {tp[0]}/{tp[1]} from broker {source} to {dest}"
            return target
        raise ValueError(kind)

    def _compact_quietly(self) -> None:
        assert self.cluster is not None
        try:
            anyio.run(ctl_compact.compact, self.cluster.data_dir, COMPACT, -1)
        except Exception:  # the brokers were killed under it
            pass

    def after_fault(self, kind: str) -> None:
        """What a kind promises besides the records: a deleted topic stays deleted, a moved
        replica ends in one directory."""
        assert self.cluster is not None
        if kind == "kill-deletion":
            doomed = self.doomed
            if doomed in topic_names(self.cluster.bootstrap):  # the kill came before the controller had it
                admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap, "log_level": 3})
                try:
                    admin.delete_topics([doomed], operation_timeout=30)[doomed].result(60)
                except Exception as e:
                    self.problem(f"deleting {doomed} again: {e}")

            def gone() -> bool:
                status = self.cluster.status()  # type: ignore[union-attr]
                dirs = [p for d in self.log_dirs for p in d.glob(f"broker-*/{doomed}-*")
                        if not p.name.endswith("-delete") and not p.name.endswith("-stray")]
                return (not any(p["topic"] == doomed for p in status["partitions"])
                        and not any(d["topic"] == doomed for d in status.get("deleting", [])) and not dirs)
            try:
                wait_until(gone, 30, interval=0.25, message=f"{doomed} deleted everywhere")
            except AssertionError:
                self.problem(f"{doomed} not deleted 30 s after the restart: "
                             f"{[str(p) for d in self.log_dirs for p in d.glob(f'broker-*/{doomed}-*')]}")
        if kind == "kill-reassignment":
            (topic, index), dest = self.reassigned
            try:
                wait_until(lambda: self.cluster.partition(topic, index)["replicas"] == [dest], 60,  # type: ignore[union-attr]
                           interval=0.25, message=f"{topic}/{index} moved to broker {dest}")
            except AssertionError:
                self.problem(f"{topic}/{index} not on broker {dest} alone 60 s after the restart: "
                             f"{self.cluster.partition(topic, index)}")
        if kind == "kill-log-dir-move":
            node, tp = self.moving

            def one_copy() -> bool:
                live = [d for d in self.log_dirs if (d / f"broker-{node}" / f"{tp[0]}-{tp[1]}").is_dir()]
                futures = [p for d in self.log_dirs for p in (d / f"broker-{node}").glob(f"{tp[0]}-{tp[1]}.*-future")]
                return len(live) == 1 and not futures
            try:
                wait_until(one_copy, 30, interval=0.25, message=f"{tp} in one log dir of broker {node}")
            except AssertionError:
                found = [str(p) for d in self.log_dirs for p in (d / f"broker-{node}").glob(f"{tp[0]}-{tp[1]}*")]
                self.problem(f"{tp} of broker {node} not in exactly one log dir 30 s after the restart: {found}")

    def mark_uncommitted(self, acked: list[Ack], before: float) -> None:
        """acks=1 records of a replicated partition, above its high watermark at the fault and
        acknowledged before the recovery, when its leader epoch changed: UNCOMMITTED records a
        failover may truncate (docs/consistency.md). They are counted apart, not as lost."""
        assert self.cluster is not None
        now = {(p["topic"], p["partition"]): p for p in self.cluster.status()["partitions"]}
        for a in acked:
            old = self.snap["partitions"].get(a.tp)
            new = now.get(a.tp)
            if a.idempotent or old is None or new is None or len(old["replicas"]) == 1 or a.at > before:
                continue
            hw = old["replica_offsets"].get(str(old["leader"]), {}).get("high_watermark", 0)
            if a.offset >= hw and new["leader_epoch"] != old["leader_epoch"]:
                a.may_lose = True

    def tally(self, consumed_by: dict[str, dict[TP, list]], acked: list[Ack], seen: Tally,
              compacted: tuple[str, ...]) -> None:
        """Count what this round's reads show that no earlier round did."""
        r = self.round
        for isolation, consumed in consumed_by.items():
            t = check(acked, consumed, compacted)
            for name in ("missing", "moved", "duplicated", "gaps", "uncommitted_lost", "plain_duplicates"):
                new = getattr(t, name) - getattr(seen, name)
                getattr(seen, name).update(new)
                if name == "duplicated" and new:
                    resent = {v for v in new if resent_after_a_bump(v, consumed, self.log_dirs)}
                    if resent:
                        new -= resent
                        r.resent += len(resent)
                        self.report.resent += len(resent)
                        self.log(f"[crash]   {isolation}: resent under a new producer epoch {len(resent)}: "
                                 + ", ".join(sorted(v[:24].decode(errors="replace") for v in resent)[:5]))
                if not new:
                    continue
                count = len(new)
                attr = "lost" if name == "missing" else name
                setattr(r, attr, getattr(r, attr) + count)
                setattr(self.report, attr, getattr(self.report, attr) + count)
                if name in ("missing", "moved", "gaps", "uncommitted_lost"):
                    detail = by_partition(new)
                    if name == "missing":
                        detail += self.whose(acked, new, consumed)
                else:
                    detail = ", ".join(sorted(v[:24].decode(errors="replace") for v in new)[:5])
                text = f"{isolation}: {attr} {count}: {detail}"
                if name not in ("uncommitted_lost", "plain_duplicates"):
                    self.report.failures.append(f"round {r.index} {r.kind} ({r.target}): {text}")
                self.log(f"[crash]   {text}")

    def whose(self, acked: list[Ack], lost: set[tuple[str, int, int]],
              consumed: dict[TP, list[tuple[int, bytes | None, bytes]]]) -> str:
        """Which producer lost records came from and when they were acknowledged, relative to the
        round's crash: what tells a lost COMMITTED record from an UNCOMMITTED one."""
        read = {tp: {value for _, _, value in records} for tp, records in consumed.items()}
        mine = [a for a in acked if (a.topic, a.partition, a.offset) in lost and a.value not in read.get(a.tp, ())]
        if not mine:
            return ""
        idem = sum(a.idempotent for a in mine)
        first, last = min(a.at for a in mine) - self.crashed_at, max(a.at for a in mine) - self.crashed_at
        return (f" [{idem} idempotent acks=all, {len(mine) - idem} acks=1; acknowledged {first:+.3f} s to "
                f"{last:+.3f} s of the crash]")

    def round_cluster(self, kind: str) -> None:
        assert self.cluster is not None
        r = self.round
        wait_until(self.healthy, HEAL_S, interval=0.25, message="healthy before the round")
        idem = Producing(self.cluster.bootstrap, True, [(t, p, False) for t in (RF1, RF3) for p in range(PARTITIONS)]
                         + [(COMPACT, 0, True)], self.rate, r.index, self.rng)
        plain = Producing(self.cluster.bootstrap, False, [(t, p, False) for t in (RF1, RF3) for p in range(PARTITIONS)],
                          self.rate, r.index, self.rng)
        group_tp, group_offset = (RF1, 0), r.index + 1
        commit_group(self.cluster.bootstrap, group_tp, group_offset)
        for p in (idem, plain):
            p.thread.start()
        try:
            wait_until(lambda: len(idem.acked) >= self.rate // 3 and len(plain.acked) >= self.rate // 3, 30,
                       interval=0.02, message="records acknowledged before the fault")
            self.live = [idem, plain]
            target = self.fault(kind)
            if not r.target:
                r.target = target
            self.recover(target)
            recovered = time.monotonic()
            # the producers carry on: this round's records after the restart are checked too
            base_i, base_p = len(idem.acked), len(plain.acked)
            try:
                wait_until(lambda: (len(idem.acked) > base_i + 50 or idem.fatal) and len(plain.acked) > base_p + 50,
                           30, interval=0.05, message="records acknowledged after the restart")
            except AssertionError:
                self.problem(f"producers acknowledged no more records 30 s after the restart "
                             f"(idempotent {len(idem.acked) - base_i}, acks=1 {len(plain.acked) - base_p})")
            self.after_fault(kind)
            if committed(self.cluster.bootstrap, group_tp) != group_offset:
                self.problem(f"group {GROUP}'s offset of {group_tp} committed before the fault ({group_offset}) "
                             f"is {committed(self.cluster.bootstrap, group_tp)} after it")
        finally:
            left = [p.finish(FLUSH_S) for p in (idem, plain)]
            self.live = []
        for p, n in zip((idem, plain), left):
            name = "idempotent" if p.idempotent else "acks=1"
            if n:
                self.problem(f"{n} {name} records neither acknowledged nor failed after {FLUSH_S:.0f} s")
            if p.fatal:
                self.problem(f"{name} producer: fatal error {p.fatal[0]}")
            if p.exception is not None:
                self.problem(f"{name} producer thread: {p.exception!r}")
        self.mark_uncommitted(plain.acked, recovered)
        self.finish_round(idem, plain)
        self.acked += idem.acked + plain.acked
        # the wide topic's records are checked on each broker at every restart, read at the end
        self.read_and_check(self.cluster.bootstrap, [a for a in self.acked if a.topic != WIDE], self.seen,
                            {t: n for t, n in self.topics().items() if t != WIDE}, (COMPACT,))

    def finish_round(self, idem: Producing, plain: Producing) -> None:
        r = self.round
        r.acked = len(idem.acked) + len(plain.acked)
        r.failed = len(idem.failed) + len(plain.failed)
        self.report.acked += r.acked
        self.report.acked_idempotent += len(idem.acked)
        self.report.acked_plain += len(plain.acked)
        self.report.failed += r.failed
        errors = idem.errors + plain.errors
        if errors:
            self.log(f"[crash]   client errors: {dict(errors)}")

    def read_and_check(self, bootstrap: str, acked: list[Ack], seen: Tally, topics: dict[str, int],
                       compacted: tuple[str, ...]) -> None:
        need: dict[TP, int] = {}
        for a in acked:
            if not a.may_lose:
                need[a.tp] = max(need.get(a.tp, 0), a.offset + 1)
        tps = [(t, p) for t, n in topics.items() for p in range(n)]
        consumed_by = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumed, ends, problems = read_back(bootstrap, tps, isolation, need)
            consumed_by[isolation] = consumed
            need = {tp: min(end, ends.get(tp, end)) for tp, end in need.items()}  # the next read: no new wait
            for text in problems:
                self.log(f"[crash]   {text}")
        self.tally(consumed_by, acked, seen, compacted)

    # the single broker
    def round_single(self) -> None:
        r = self.round
        r.target = "kshim serve"
        if self.single is None:
            self.single = KshimProcess(self.root / "single", "--no-console")
        single = self.single
        single.start()
        try:
            create_topics(single.bootstrap, [NewTopic(SINGLE, PARTITIONS, 1)])
            group_tp, group_offset = (SINGLE, 0), r.index + 1
            commit_group(single.bootstrap, group_tp, group_offset)
            idem = Producing(single.bootstrap, True, [(SINGLE, p, False) for p in range(PARTITIONS)], self.rate,
                             r.index, self.rng)
            plain = Producing(single.bootstrap, False, [(SINGLE, p, False) for p in range(PARTITIONS)], self.rate,
                              r.index, self.rng)
            for p in (idem, plain):
                p.thread.start()
            try:
                wait_until(lambda: len(idem.acked) >= self.rate // 3 and len(plain.acked) >= self.rate // 3, 30,
                           interval=0.02, message="records acknowledged before the kill")
                acked = self.single_acked + list(idem.acked) + list(plain.acked)
                last: dict[TP, int] = {}
                for a in acked:
                    last[a.tp] = max(last.get(a.tp, -1), a.offset)
                had = self.broker_offsets(0, single.data_dir)  # a record lost earlier is not counted again
                must = {0: {tp: min(o + 1, had.get(tp, 0)) for tp, o in last.items()}}
                kill_tree(single)
                single.start()
                self.check_on_brokers([0], must, data_dir=single.data_dir)
                base_i, base_p = len(idem.acked), len(plain.acked)
                try:
                    wait_until(lambda: len(idem.acked) > base_i + 50 and len(plain.acked) > base_p + 50, 30,
                               interval=0.05, message="records acknowledged after the restart")
                except AssertionError:
                    self.problem("producers acknowledged no more records 30 s after the restart")
                if committed(single.bootstrap, group_tp) != group_offset:
                    self.problem(f"the offset committed before the kill ({group_offset}) is gone")
            finally:
                left = [p.finish(FLUSH_S) for p in (idem, plain)]
            if any(left) or idem.fatal or plain.fatal:
                self.problem(f"producers: {left} records without a report, fatal: {idem.fatal + plain.fatal}")
            self.finish_round(idem, plain)
            self.single_acked += idem.acked + plain.acked
            self.read_and_check(single.bootstrap, self.single_acked, self.single_seen, {SINGLE: PARTITIONS}, ())
        finally:
            if single.proc is not None and single.proc.poll() is None:
                code = single.terminate()
                if code != 0:
                    self.problem(f"kshim serve exited {code} on SIGTERM")
            single.kill()

    def round_ephemeral(self) -> None:
        """What is true of --ephemeral (docs/storage.md): a SIGKILL skips its cleanup, so its
        directory stays until the next `kshim serve --ephemeral`, which names it, says its data did
        not survive, deletes it and starts empty, in a new directory, with none of the old topics,
        records or committed offsets."""
        serve = EphemeralServe().start()
        first = serve.ephemeral_dir
        self.round.target = "kshim serve --ephemeral"
        try:
            create_topics(serve.bootstrap, [NewTopic(SINGLE, PARTITIONS, 1)])
            commit_group(serve.bootstrap, (SINGLE, 0), 1)
            producer = Producer({"bootstrap.servers": serve.bootstrap, "enable.idempotence": True, "log_level": 3})
            for i in range(300):
                producer.produce(SINGLE, value=b"e%d" % i, partition=i % PARTITIONS)
            if producer.flush(30):
                self.problem("ephemeral: records not acknowledged")
            del producer
        finally:
            serve.kill()
        if not first.is_dir():
            self.problem(f"ephemeral: {first} is gone right after a SIGKILL: nothing can have cleaned it up yet")
        again = EphemeralServe()
        try:
            again.start()
            second = again.ephemeral_dir
            before_ready = again.output[:again.output.index(again.ready_line)] if again.ready_line in again.output \
                else again.output
            said = [line for line in before_ready if str(first) in line]
            if not said or not any("not survive" in line or "starts empty" in line for line in said):
                self.problem(f"ephemeral restart: nothing said that {first}'s data is gone: {before_ready[-5:]}")
            if first.exists():
                self.problem(f"ephemeral restart: the killed broker's {first} is still there")
            if "EPHEMERAL" not in again.ready_line or second == first:
                self.problem(f"ephemeral restart: ready line {again.ready_line!r} (first data dir {first})")
            if SINGLE in topic_names(again.bootstrap):
                self.problem(f"ephemeral restart: {SINGLE} is there again")
            if any(second.glob(f"{SINGLE}-*")):
                self.problem(f"ephemeral restart: {SINGLE}'s logs in {second}")
            offset = committed(again.bootstrap, (SINGLE, 0))
            if offset >= 0:
                self.problem(f"ephemeral restart: the group's offset {offset} is there again")
        finally:
            code = again.terminate() if again.proc is not None else 0
            shutil.rmtree(first, ignore_errors=True)  # only if the restart failed to: ours, from this round
        if code != 0:
            self.problem(f"ephemeral: exit {code} on SIGTERM")
        if second.exists():
            self.problem(f"ephemeral: {second} still there after a clean exit")
            shutil.rmtree(second, ignore_errors=True)

    # rounds
    def run(self, rounds: int, kinds: tuple[str, ...] = KINDS) -> Report:
        started = time.monotonic()
        self.report.rounds_asked = rounds
        first = list(kinds)
        self.rng.shuffle(first)
        try:
            for index in range(1, rounds + 1):
                kind = first.pop() if first else self.rng.choice(kinds)
                self.round = Round(index, kind)
                self.report.rounds.append(self.round)
                self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
                t0 = time.monotonic()
                try:
                    if kind in SINGLE_KINDS:
                        self.round_single() if kind == "single-kill" else self.round_ephemeral()
                    else:
                        if self.cluster is None:
                            self.start_cluster()
                        self.round_cluster(kind)
                except Exception as e:  # a deadline passed, a ctl command failed, ...: the campaign stops here
                    if not self.round.problems:
                        self.problem(f"{type(e).__name__}: {e}")
                    break  # a cluster that does not heal cannot run the next round
                r = self.round
                r.seconds = time.monotonic() - t0
                self.log(f"[crash] round {index} {kind} ({r.target}): {r.acked} acked, lost {r.lost}, moved {r.moved}, "
                         f"duplicated {r.duplicated}, gaps {r.gaps}, not on broker {r.not_on_broker} "
                         f"(of {r.held_on_broker + r.not_on_broker} checked), "
                         f"problems {len(r.problems)}; {r.seconds:.1f} s")
            proc = self.cluster.process.proc if self.cluster is not None else None
            if self.cluster is not None and proc is not None and proc.poll() is None and self.wide:
                self.round = Round(0, "final read")
                self.read_and_check(self.cluster.bootstrap, self.acked, self.seen, self.topics(), (COMPACT,))
                self.log(f"[crash] final read with {WIDE}: lost {self.round.lost}, moved {self.round.moved}, "
                         f"duplicated {self.round.duplicated}, gaps {self.round.gaps}")
            if self.cluster is not None and proc is not None and proc.poll() is None:
                pids = self.cluster.children()
                code = self.cluster.process.terminate()
                if code != 0 or any(pid_exists(p) for p in pids):
                    self.round = Round(0, "final stop")
                    self.problem(f"kshim serve --brokers 3 exited {code} on SIGTERM")
        finally:
            if self.cluster is not None:
                self.cluster.kill_everything()
            if self.single is not None:
                self.single.kill()
            self.report.seconds = time.monotonic() - started
        return self.report


def run(rounds: int, seed: int, rate: int = 400, data_dir: Path | None = None, kinds: tuple[str, ...] = KINDS,
        wide: int = 0, log: Callable[[str], None] = print) -> Report:
    """The campaign in a new directory (or `data_dir`); a failed campaign's directory is kept
    (its path in the report) for the broker logs."""
    root = data_dir or Path(tempfile.mkdtemp(prefix="kshim-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    report = Campaign(root, seed, rate, wide, log).run(rounds, kinds)
    if report.ok and data_dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_tests.crash_campaign",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=len(KINDS), help=f"rounds, one fault each (default {len(KINDS)})")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=int, default=400, help="records per second each producer sends")
    parser.add_argument("--kinds", default=",".join(KINDS), help="the fault kinds to draw from, comma-separated")
    parser.add_argument("--wide", type=int, default=0,
                        help="also a topic of this many RF 1 partitions, one record each, in every restart")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep everything here (default: a temporary "
                                                                     "directory, deleted unless the campaign fails)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    import kshim  # which tree runs (PYTHONPATH=/other/checkout tests another; its processes inherit it)
    print(f"[crash] kshim from {Path(kshim.__file__).parent}, seed {args.seed}, {args.rounds} rounds", flush=True)
    report = run(args.rounds, args.seed, args.rate, args.data_dir, kinds, args.wide)
    print(report.summary())
    for line in report.failures[:20]:
        print("  " + line[:2000])
    if not report.ok:
        print(f"  data (broker logs in cluster/broker-*/broker.log): {report.data_dir}")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report) | {"ok": report.ok}, indent=2, default=str) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
