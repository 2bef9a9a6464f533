"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka / librdkafka: the
coordinator assigns (uniform and range), rebalances on joins and leaves, committed offsets carry
over to new members, and AdminClient.describe_consumer_groups goes through ConsumerGroupDescribe.
Every wait has a deadline."""
from __future__ import annotations

import time
import uuid

import anyio
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.test_groups import create_topic, produce
from kshim.replication.client import BrokerConnection


def consumer(bootstrap: str, group: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3, **conf})


def parts(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers, predicate, timeout: float = 40.0, message: str = "assignments"):
    deadline = time.monotonic() + timeout
    while not predicate():
        for c in consumers:
            c.poll(0.05)
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}: "
                                 f"{[sorted(parts(c)) for c in consumers]}")


def test_three_consumers_share_six_partitions_then_two(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 6)
    group = f"g848-{uuid.uuid4().hex[:8]}"
    consumers = [consumer(kshim.bootstrap, group) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic_name])
        poll_until(consumers, lambda: [len(parts(c)) for c in consumers] == [2, 2, 2]
                   and set().union(*map(parts, consumers)) == set(range(6)))
        consumers.pop().close()
        poll_until(consumers, lambda: sorted(len(parts(c)) for c in consumers) == [3, 3]
                   and set().union(*map(parts, consumers)) == set(range(6)), message="two members, six partitions")
    finally:
        for c in consumers:
            c.close()


def test_range_assignor(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 6)
    group = f"g848r-{uuid.uuid4().hex[:8]}"
    consumers = [consumer(kshim.bootstrap, group, **{"group.remote.assignor": "range"}) for _ in range(2)]
    try:
        for c in consumers:
            c.subscribe([topic_name])
        poll_until(consumers, lambda: sorted(sorted(parts(c)) for c in consumers) == [[0, 1, 2], [3, 4, 5]])
    finally:
        for c in consumers:
            c.close()


def test_commit_close_and_resume(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 6)
    produce(kshim.bootstrap, topic_name, 60)
    group = f"g848c-{uuid.uuid4().hex[:8]}"
    c = consumer(kshim.bootstrap, group)
    seen = []
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 40
        while len(seen) < 30:
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.append(int(m.value()))
                c.commit(message=m, asynchronous=False)
            assert time.monotonic() < deadline, f"consumed {len(seen)} of 30"
        committed = {tp.partition: tp.offset for tp in c.committed(
            [TopicPartition(topic_name, p) for p in range(6)], timeout=10)}
    finally:
        c.close()
    c2 = consumer(kshim.bootstrap, group)
    rest = []
    try:
        c2.subscribe([topic_name])
        deadline = time.monotonic() + 40
        while len(seen) + len(rest) < 60:
            m = c2.poll(0.2)
            if m is not None and not m.error():
                rest.append(int(m.value()))
            assert time.monotonic() < deadline, f"resumed {len(rest)} of {60 - len(seen)}"
    finally:
        c2.close()
    assert sorted(seen + rest) == list(range(60)), "the new member resumed from the committed offsets"
    assert sum(o for o in committed.values() if o >= 0) == 30


def test_describe_consumer_group(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 6)
    group = f"g848d-{uuid.uuid4().hex[:8]}"
    c = consumer(kshim.bootstrap, group)
    try:
        c.subscribe([topic_name])
        poll_until([c], lambda: len(parts(c)) == 6)
        admin = AdminClient({"bootstrap.servers": kshim.bootstrap})
        deadline = time.monotonic() + 30
        while True:
            d = admin.describe_consumer_groups([group])[group].result(10)
            if str(d.state).endswith("STABLE") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert str(d.state).endswith("STABLE"), d.state
        assert str(getattr(d, "type", "CONSUMER")).endswith("CONSUMER")
        assert len(d.members) == 1
        assert {tp.partition for tp in d.members[0].assignment.topic_partitions} == set(range(6))
        listed = admin.list_consumer_groups().result(10)
        assert any(g.group_id == group for g in listed.valid)
    finally:
        c.close()


def test_raw_heartbeat_errors(kshim, topic_name):
    create_topic(kshim.bootstrap, topic_name, 3)
    host, port = kshim.bootstrap.rsplit(":", 1)
    group = f"g848raw-{uuid.uuid4().hex[:8]}"

    async def run():
        conn = BrokerConnection(host, int(port), "raw")
        await conn.connect()
        try:
            with anyio.fail_after(30):
                while (await conn.request(10, 3, {"key": group, "key_type": 0})).error_code:
                    await anyio.sleep(0.2)
                base = {"group_id": group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
                        "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic_name],
                        "topic_partitions": []}
                bad = await conn.request(68, 1, {**base, "server_assignor": "nope"})
                assert bad.error_code == 112  # UNSUPPORTED_ASSIGNOR
                bad = await conn.request(68, 1, {**base, "member_id": ""})
                assert bad.error_code == 42  # INVALID_REQUEST
                ok = await conn.request(68, 1, base)
                assert ok.error_code == 0 and ok.member_epoch >= 1
                assert len(ok.assignment.topic_partitions[0].partitions) == 3
                fenced = await conn.request(68, 1, {**base, "member_epoch": ok.member_epoch + 5})
                assert fenced.error_code == 110  # FENCED_MEMBER_EPOCH
                described = await conn.request(69, 0, {"group_ids": [group, "no-such-group"]})
                assert described.groups[0].group_state == "Stable" and described.groups[1].error_code == 69
                left = await conn.request(68, 1, {**base, "member_epoch": -1})
                assert left.error_code == 0 and left.member_epoch == -1
        finally:
            await conn.aclose()

    anyio.run(run)
