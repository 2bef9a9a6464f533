"""Share groups' records (KIP-932) with confluent-kafka 2.16's ShareConsumer against a real kshim:
what each member gets, acknowledgement types, delivery counts and acquisition locks.

The broker runs with short group settings (lock duration 3 s, delivery limit 3) so lock expiry
is quick; each group starts at the earliest offset (share.auto.offset.reset, a GROUP config set
with IncrementalAlterConfigs).

- Three ShareConsumers on a one-partition topic under implicit acknowledgement together read
  every record exactly once, and each gets some.
- Explicit acknowledgement: a released record comes back with delivery count 2; rejected records
  never come back; a record released at every delivery is archived after 3 deliveries.
- A consumer that dies (never closed, never acknowledging) holding records: `kshim ctl groups`
  shows them acquired; another member gets them once the lock duration has passed, with
  delivery count 2.
Every wait has a deadline.
"""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

from compat_tests.kshim_process import KshimProcess
from kshim.ctl.groups import share_in_flight

LOCK_MS = 3000
LIMIT = 3


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--group-initial-rebalance-delay-ms", "0",
                        "--group-setting", "group.share.min.record.lock.duration.ms=1000",
                        "--group-setting", f"group.share.record.lock.duration.ms={LOCK_MS}",
                        "--group-setting", f"group.share.delivery.count.limit={LIMIT}").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


def new_topic_and_group(bootstrap: str, prefix: str) -> tuple[str, str]:
    """A new one-partition topic and a new share group starting at earliest
    (share.auto.offset.reset, a GROUP config)."""
    topic, group = f"{prefix}q-{uuid.uuid4().hex[:8]}", f"{prefix}g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    return topic, group


def setup(bootstrap: str, records: int) -> tuple[str, str]:
    """A new one-partition topic holding `records` records, and a new group starting at earliest."""
    topic, group = new_topic_and_group(bootstrap, "s")
    # batches of at most 10 records: a fetch acquires whole batches, so the members can share them
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10, "log_level": 3})
    for i in range(records):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    return topic, group


def consumer(bootstrap: str, group: str, topic: str, explicit: bool = False, max_records: int = 500) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3, "max.poll.records": max_records,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def records_of(batch) -> list:
    return [m for m in batch if m.error() is None]


def delivery_count(m) -> int:
    getter = getattr(m, "delivery_count", None)
    return getter() if callable(getter) else -1


def test_three_consumers_read_every_record_once(kshim):
    topic, group = setup(kshim.bootstrap, 300)
    # at most 20 records a fetch (ShareFetch max_records), so each member gets some
    consumers = [consumer(kshim.bootstrap, group, topic, max_records=20) for _ in range(3)]
    got: list[list[int]] = [[], [], []]
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got)) < 300 and time.monotonic() < deadline:
            for i, c in enumerate(consumers):
                got[i] += [m.offset() for m in records_of(c.poll(0.3))]
    finally:
        for c in consumers:
            c.close()
    everything = sorted(o for g in got for o in g)
    assert everything == list(range(300)), f"{len(everything)} records, {len(set(everything))} distinct"
    assert all(got), [len(g) for g in got]


def test_release_reject_and_the_delivery_limit(kshim):
    topic, group = setup(kshim.bootstrap, 6)
    c = consumer(kshim.bootstrap, group, topic, explicit=True)
    seen: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    try:
        # offset 0 is released at every delivery, 1 released once then accepted, 2-3 rejected, 4-5 accepted
        while time.monotonic() < deadline:
            for m in records_of(c.poll(0.3)):
                o = m.offset()
                seen.setdefault(o, []).append(delivery_count(m))
                if o == 0 or o == 1 and len(seen[1]) == 1:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                elif o in (2, 3):
                    c.acknowledge(m, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(10)
            if len(seen.get(0, [])) >= LIMIT and len(seen.get(1, [])) >= 2 and 5 in seen:
                break
        # nothing more comes: 0 is archived after LIMIT deliveries, 2-3 never return
        quiet_until = time.monotonic() + 2
        while time.monotonic() < quiet_until:
            for m in records_of(c.poll(0.3)):
                seen.setdefault(m.offset(), []).append(delivery_count(m))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(10)
    finally:
        c.close()
    assert len(seen[0]) == LIMIT and len(seen[1]) == 2
    assert len(seen[2]) == len(seen[3]) == len(seen[4]) == len(seen[5]) == 1
    if seen[1][1] != -1:  # the client exposes delivery counts
        assert seen[1] == [1, 2] and seen[0] == list(range(1, LIMIT + 1))


def test_a_dead_consumers_records_go_to_another_after_the_lock(kshim):
    topic, group = setup(kshim.bootstrap, 5)
    dead = consumer(kshim.bootstrap, group, topic, explicit=True)
    held: list[int] = []
    deadline = time.monotonic() + 30
    while len(held) < 5 and time.monotonic() < deadline:
        held += [m.offset() for m in records_of(dead.poll(0.3))]
    assert sorted(held) == list(range(5))
    took = time.monotonic()
    # `kshim ctl groups` shows them in flight, acquired (the broker's admin socket)
    [row] = share_in_flight(kshim.data_dir, group, {})
    assert (row["topic"], row["partition"], row["start_offset"], row["end_offset"], row["acquired"]) == \
        (topic, 0, 0, 5, 5)
    # `dead` is never polled or closed again: its records come back only when their locks expire
    other = consumer(kshim.bootstrap, group, topic)
    got = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += [(m.offset(), delivery_count(m)) for m in records_of(other.poll(0.3))]
    finally:
        other.close()
    assert sorted(o for o, _ in got) == list(range(5))
    assert time.monotonic() - took >= LOCK_MS / 1000 * 0.9
    assert all(count in (2, -1) for _, count in got)
    del dead  # never closed: it died holding its records
