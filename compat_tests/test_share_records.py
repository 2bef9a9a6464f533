"""Share groups' records (KIP-932) with the Java client's KafkaShareConsumer, and what
test_share_consumers.py leaves out for confluent-kafka's ShareConsumer: the group configs
share.delivery.count.limit and share.record.lock.duration.ms (there the broker's settings are
lowered instead) and a consumer whose process is SIGKILLed while it holds records.

One kshim for the module, whose broker defaults stay Kafka's (lock 30 s, delivery limit 5) except
the lowest lock duration a group may set (1 s): each group sets its own configs with
IncrementalAlterConfigs (share.auto.offset.reset earliest, a 3 s lock, a delivery limit of 2), so
what is seen is the group configs at work.

Java (compat_tests/java/ShareRecords.java, one JVM per step):
- three consumers on a one-partition topic under implicit acknowledgement each get records and
  together read every record exactly once (each record delivered once, delivery count 1);
- released records come back with delivery count 2, rejected ones never come back, a record
  released at every delivery is archived at the group's limit (2) and never comes back;
- a consumer whose JVM is SIGKILLed holding records: `kshim ctl groups` shows them acquired, and
  another consumer gets them once the lock expired, with delivery count 2.
confluent-kafka: the group's delivery limit, and a consumer process SIGKILLed holding records.
Every wait has a deadline.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from compat_tests.java_client import JVM_FLAGS, JavaClient, build
from compat_tests.kshim_process import KshimProcess, wait_until
from kshim.ctl.groups import share_in_flight

LOCK_MS = 3000
LIMIT = 2


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--group-initial-rebalance-delay-ms", "0",
                        "--group-setting", "group.share.min.record.lock.duration.ms=1000").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java"))


def setup(bootstrap: str, records: int, lock_ms: int = LOCK_MS) -> tuple[str, str]:
    """A new one-partition topic holding `records` records (batches of at most 10), and a new
    group with its own configs: earliest, a `lock_ms` lock and a delivery limit of LIMIT."""
    topic, group = f"rq-{uuid.uuid4().hex[:8]}", f"rg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("share.auto.offset.reset", "earliest"),
                            ("share.record.lock.duration.ms", str(lock_ms)),
                            ("share.delivery.count.limit", str(LIMIT)))])
    admin.incremental_alter_configs([resource])[resource].result(30)
    if records:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10,
                             "log_level": 3})
        for i in range(records):
            producer.produce(topic, str(i).encode(), partition=0)
        assert producer.flush(30) == 0
    return topic, group


def java_command(java: JavaClient, *args, deadline_s: float = 50) -> list[str]:
    return [java.java, *JVM_FLAGS, f"-Ddeadline.ms={int(deadline_s * 1000)}", "-cp", java.classpath,
            "ShareRecords", *map(str, args)]


def run_java(java: JavaClient, *args, timeout: float = 60) -> list[dict]:
    proc = subprocess.run(java_command(java, *args, deadline_s=timeout - 5), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"ShareRecords {args[0]} exited {proc.returncode}:\n" \
                                 f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def started_holder(command: list[str], out: Path) -> tuple[subprocess.Popen, dict]:
    """Start a process that prints one JSON line {"type": "held", ...} once it holds its records,
    and wait (bounded) for that line."""
    with open(out, "w") as f:
        proc = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and proc.poll() is None:
        held = [json.loads(line) for line in out.read_text().splitlines() if line.startswith('{"type":"held"')
                or line.startswith('{"type": "held"')]
        if held:
            return proc, held[0]
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    raise AssertionError(f"the holder never held its records:\n{out.read_text()[-4000:]}")


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process this test started (by its Popen handle): it never closes or acknowledges."""
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def java_run(kshim, java, tmp_path_factory) -> dict:
    """The Java steps, one group and topic each: a holder JVM SIGKILLed once it holds the records
    of `kill`, then ONE JVM running side by side the `implicit` step, the `explicit` step and the
    `read` step on the killed holder's group."""
    # the implicit step's group keeps Kafka's 30 s lock: its consumers poll every 100 ms, and a JVM
    # slowed past 3 s between two polls on a loaded machine would lose a batch's lock
    implicit = setup(kshim.bootstrap, 0, lock_ms=30_000)
    explicit, killed = setup(kshim.bootstrap, 6), setup(kshim.bootstrap, 5)
    holder, held = started_holder(java_command(java, "hold", kshim.bootstrap, killed[1], killed[0], 5),
                                  tmp_path_factory.mktemp("hold") / "hold.out")
    kill(holder)
    [in_flight] = share_in_flight(kshim.data_dir, killed[1], {})
    lines = run_java(java, "implicit", kshim.bootstrap, implicit[1], implicit[0], 3, 300,
                     ",", "explicit", kshim.bootstrap, explicit[1], explicit[0], LIMIT,
                     ",", "read", kshim.bootstrap, killed[1], killed[0], 5)
    steps: dict[str, list[dict]] = {}
    for line in lines:
        if line["type"] == "got":
            steps.setdefault(line["step"], []).append(line)
    return {"held": held, "in_flight": in_flight, "explicit_group": explicit[1], **steps}


def test_java_three_share_consumers_read_every_record_once(java_run):
    got = java_run["implicit"]
    offsets = Counter(line["offset"] for line in got)
    again = [(line["offset"], line["count"], line["member"]) for line in got if offsets[line["offset"]] > 1]
    assert sorted(offsets) == list(range(300)) and set(offsets.values()) == {1}, \
        f"{len(offsets)} distinct of {len(got)} deliveries; (offset, delivery count, member) delivered twice: {again}"
    assert {line["count"] for line in got} == {1}
    per_member = Counter(line["member"] for line in got)
    assert sorted(per_member) == [0, 1, 2], per_member


def test_java_release_reject_and_the_groups_delivery_limit(kshim, java_run):
    counts: dict[int, list[int]] = {}
    for line in java_run["explicit"]:
        counts.setdefault(line["offset"], []).append(line["count"])
    # 0: released at each delivery, archived at the limit; 1: released once, then accepted with
    # count 2; 2-3 rejected and 4-5 accepted at their first delivery: none came back in the quiet 2 s
    assert counts == {0: list(range(1, LIMIT + 1)), 1: [1, 2], 2: [1], 3: [1], 4: [1], 5: [1]}
    [row] = share_in_flight(kshim.data_dir, java_run["explicit_group"], {})
    assert (row["start_offset"], row["end_offset"], row["acquired"], row["available"]) == (6, 6, 0, 0)


def test_a_killed_java_consumers_records_go_to_another_after_the_lock(java_run):
    held = java_run["held"]
    assert sorted(held["offsets"]) == list(range(5)) and set(held["counts"]) == {1}
    # still acquired by the killed JVM just after the kill, then another consumer's, delivered again
    row = java_run["in_flight"]
    assert (row["start_offset"], row["end_offset"], row["acquired"]) == (0, 5, 5)
    got = java_run["read"]
    assert sorted(line["offset"] for line in got) == list(range(5))
    assert {line["count"] for line in got} == {2}


def confluent(bootstrap: str, group: str, topic: str, explicit: bool) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def test_confluent_the_groups_delivery_limit_archives(kshim):
    topic, group = setup(kshim.bootstrap, 2)
    c = confluent(kshim.bootstrap, group, topic, explicit=True)
    counts: dict[int, list[int]] = {}
    try:
        quiet_until = None
        deadline = time.monotonic() + 30
        while time.monotonic() < (quiet_until or deadline):
            for m in c.poll(0.2):
                if m.error() is not None:
                    continue
                counts.setdefault(m.offset(), []).append(m.delivery_count())
                # 0 is released at every delivery; 1 accepted
                c.acknowledge(m, AcknowledgeType.RELEASE if m.offset() == 0 and quiet_until is None
                              else AcknowledgeType.ACCEPT)
            c.commit_sync(10)
            if quiet_until is None and len(counts.get(0, [])) >= LIMIT and 1 in counts:
                quiet_until = time.monotonic() + 2
    finally:
        c.close()
    assert counts == {0: list(range(1, LIMIT + 1)), 1: [1]}  # archived at the group's limit, not the broker's 5


HOLDER = """
import json, sys, time
from confluent_kafka import ShareConsumer
bootstrap, group, topic, n = sys.argv[1:5]
c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([topic])
held = []
deadline = time.monotonic() + 30
while len(held) < int(n) and time.monotonic() < deadline:
    held += [(m.offset(), m.delivery_count()) for m in c.poll(0.2) if m.error() is None]
print(json.dumps({"type": "held", "offsets": [o for o, _ in held], "counts": [d for _, d in held]}), flush=True)
time.sleep(60)  # holding, never acknowledging: the test kills this process
"""


def test_a_killed_confluent_consumers_records_go_to_another_after_the_lock(kshim, tmp_path):
    topic, group = setup(kshim.bootstrap, 5)
    holder, held = started_holder([sys.executable, "-c", HOLDER, kshim.bootstrap, group, topic, "5"],
                                  tmp_path / "hold.out")
    assert sorted(held["offsets"]) == list(range(5)) and set(held["counts"]) == {1}
    kill(holder)
    [row] = share_in_flight(kshim.data_dir, group, {})
    assert row["acquired"] == 5
    other = confluent(kshim.bootstrap, group, topic, explicit=False)
    got: list[tuple[int, int]] = []
    try:
        wait_until(lambda: got.extend((m.offset(), m.delivery_count()) for m in other.poll(0.2)
                                      if m.error() is None) or len(got) >= 5, 20,
                   message="the killed consumer's records at another")
    finally:
        other.close()
    assert sorted(got) == [(o, 2) for o in range(5)]
