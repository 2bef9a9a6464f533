"""Classic group membership persisted as Kafka's GroupMetadataManager does it, and Kafka's
initial rebalance delay: the state machine with a hand-driven clock and store, then a standalone
broker whose coordinator writes the group's record and loads it again after a reopen."""
from __future__ import annotations

import importlib

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.coordinator.groups import Group, GroupConfig
from kshim.coordinator.groups import group_format
from kshim.coordinator.groups.group import COMPLETING, EMPTY, PREPARING, STABLE
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_admin_handlers import create, new_topic
from tests.test_groups import call_awaiting, find, join, joined, sync
from tests.waiting import wait_until
from wire.errors import ErrorCode


class Store:
    """Records each store request; the test says when (and how) it completes."""

    def __init__(self) -> None:
        self.requests: list = []

    def __call__(self, stored: group_format.StoredGroup, done) -> None:
        self.requests.append((stored, done))


def stored_group(store: Store | None = None, delay: int = 0) -> Group:
    return Group("g", GroupConfig(initial_rebalance_delay_ms=delay), on_store=store)


def test_the_assignment_is_answered_only_once_the_record_is_stored():
    store = Store()
    g = stored_group(store)
    a, wa = joined(g, 0)
    assert wa.done and g.state == COMPLETING
    sa = sync(g, 1, a, 1, [(a, b"A")])
    assert not sa.done and g.state == COMPLETING
    record, done = store.requests[-1]
    assert (record.generation, record.protocol, record.leader) == (1, "range", a)
    assert [(m.member_id, m.subscription, m.assignment) for m in record.members] == [(a, b"meta", b"A")]
    assert group_format.decode_value(group_format.encode_value(record)) == record
    done(ErrorCode.NONE, 2)
    assert sa.done and sa.value.error_code == ErrorCode.NONE and sa.value.assignment == b"A"
    assert g.state == STABLE and g.heartbeat(3, member_id=a, instance_id=None, generation=1) == ErrorCode.NONE


def test_a_failed_store_answers_the_error_and_rebalances():
    store = Store()
    g = stored_group(store)
    a, _ = joined(g, 0)
    b, wb = joined(g, 0)
    wa = join(g, 0, a)
    gen = g.generation
    assert wa.done and wb.done and g.state == COMPLETING
    sb = sync(g, 1, b, gen)
    sa = sync(g, 1, a, gen, [(a, b"A"), (b, b"B")])
    store.requests[-1][1](ErrorCode.NOT_COORDINATOR, 2)
    assert sa.value.error_code == sb.value.error_code == ErrorCode.NOT_COORDINATOR
    assert g.state == PREPARING and all(m.assignment == b"" for m in g.members.values())


def test_a_store_overtaken_by_a_rebalance_is_ignored():
    store = Store()
    g = stored_group(store)
    a, _ = joined(g, 0)
    sa = sync(g, 1, a, 1, [(a, b"A")])
    _, done = store.requests[-1]
    b, wb = joined(g, 2)  # a new member: the group prepares a rebalance before the write returns
    assert sa.value.error_code == ErrorCode.REBALANCE_IN_PROGRESS and g.state == PREPARING
    done(ErrorCode.NONE, 3)
    assert g.state == PREPARING and not wb.done


def test_an_emptied_group_stores_its_generation():
    store = Store()
    g = stored_group(store)
    a, _ = joined(g, 0)
    sync(g, 1, a, 1, [(a, b"A")])
    store.requests[-1][1](ErrorCode.NONE, 2)
    assert g.leave(3, a, None) == ErrorCode.NONE
    record, done = store.requests[-1]
    assert g.state == EMPTY and done is None and record.members == () and record.generation == 2


def test_restore_gives_back_a_stable_group_whose_members_go_on():
    store = Store()
    g = stored_group(store)
    a, _ = joined(g, 0)
    b, _ = joined(g, 0)
    join(g, 0, a)
    gen = g.generation
    sync(g, 1, b, gen)
    sync(g, 1, a, gen, [(a, b"A"), (b, b"B")])
    record, done = store.requests[-1]
    done(ErrorCode.NONE, 2)
    restored = Group.restore("g", group_format.decode_value(group_format.encode_value(record)), 1000,
                             GroupConfig(), lambda: None)
    assert restored.state == STABLE and restored.generation == gen and restored.leader_id == a
    assert restored.heartbeat(1001, member_id=b, instance_id=None, generation=gen) == ErrorCode.NONE
    assert sync(restored, 1002, b, gen).value.assignment == b"B"
    assert restored.members[a].session_deadline == 1000 + restored.members[a].session_timeout_ms
    # a member that stays silent still times out, counted from the load; the other rebalances
    restored.tick(1000 + 10_001)
    assert a not in restored.members and b in restored.members and restored.state == PREPARING


def test_the_initial_delay_waits_for_more_members_and_extends_while_they_arrive():
    g = stored_group(delay=3000)
    a, wa = joined(g, 0)
    assert not wa.done and g.state == PREPARING
    b, wb = joined(g, 1000)
    g.tick(3000)
    assert not wa.done, "a member joined during the delay: it is extended"
    assert g.next_deadline() == 6000
    g.tick(6000)
    assert wa.done and wb.done and wa.value.generation_id == 1 and len(wa.value.members) == 2


def test_the_initial_delay_ends_on_time_when_nobody_else_comes():
    g = stored_group(delay=3000)
    _, wa = joined(g, 0)
    g.tick(2999)
    assert not wa.done
    g.tick(3000)
    assert wa.done and wa.value.generation_id == 1


def test_the_initial_delay_is_bounded_by_the_rebalance_timeout():
    g = stored_group(delay=3000)
    _, wa = joined(g, 0, rebalance=5000)
    for t in range(500, 5000, 500):  # a member every half second, for longer than the rebalance timeout
        joined(g, t, rebalance=5000)
        g.tick(t)
    g.tick(5000)
    assert wa.done and wa.value.generation_id == 1


# ---------------------------------------------------------------- on a broker

@pytest.mark.anyio
async def test_membership_survives_a_reopen_of_the_coordinator(tmp_path):
    config = BrokerConfig(data_dir=tmp_path, group_initial_rebalance_delay_ms=0)
    broker = open_standalone(config)
    try:
        await find(broker, "g")
        coordinator = served(broker).groups
        async with anyio.create_task_group() as tg:
            tg.start_soon(coordinator.run)
            await wait_until(lambda: not coordinator.check("g"), message="the offsets partition loaded")
            group = coordinator.get_group("g", create=True)
            a, _ = joined(group, coordinator.clock())
            synced = sync(group, coordinator.clock(), a, 1, [(a, b"assigned")])
            assert (await synced.wait()).assignment == b"assigned"
            tg.cancel_scope.cancel()
    finally:
        broker.close()
    broker = open_standalone(config)
    try:
        coordinator = served(broker).groups
        coordinator.load_pending()
        group = coordinator.get_group("g")
        assert group is not None and group.state == STABLE and list(group.members) == [a]
        assert group.heartbeat(coordinator.clock(), member_id=a, instance_id=None, generation=1) == ErrorCode.NONE
        assert sync(group, coordinator.clock(), a, 1).value.assignment == b"assigned"
        async with anyio.create_task_group() as tg:
            tg.start_soon(coordinator.run)
            assert group.leave(coordinator.clock(), a, None) == ErrorCode.NONE
            # Empty with no offsets: forgotten, and its record deleted by a tombstone
            await wait_until(lambda: "g" not in coordinator.groups and not coordinator._stores,
                             message="the empty group forgotten")
            tg.cancel_scope.cancel()
    finally:
        broker.close()
    broker = open_standalone(config)
    try:
        served(broker).groups.load_pending()
        assert served(broker).groups.get_group("g") is None
    finally:
        broker.close()


# ---------------------------------------------------------------- KIP-848 consumer groups

consumer_heartbeat = importlib.import_module("kshim.net.handlers.68_consumer_group_heartbeat")


def heartbeat_body(member_id: str, epoch: int, topics=None, owned=None) -> dict:
    return {"group_id": "cg", "member_id": member_id, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30_000 if epoch == 0 else -1, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned}


@pytest.mark.anyio
async def test_a_consumer_group_survives_a_reopen_of_the_coordinator(tmp_path):
    config = BrokerConfig(data_dir=tmp_path)
    broker = open_standalone(config)
    try:
        assert (await create(broker, new_topic("events", 4)))["events"].error_code == ErrorCode.NONE
        await find(broker, "cg")
        served(broker).groups.load_pending()
        joined_ = await call_awaiting(broker, consumer_heartbeat, 1, heartbeat_body("m1", 0, ["events"], []))
        assert joined_.error_code == ErrorCode.NONE and joined_.member_epoch >= 1
        epoch = joined_.member_epoch
        assigned = [(t.topic_id, sorted(t.partitions)) for t in joined_.assignment.topic_partitions]
        assert sum(len(ps) for _, ps in assigned) == 4
        record = served(broker).groups.groups["cg"].stored
        assert record is not None and group_format.decode_consumer_value(record).members[0].member_id == "m1"
    finally:
        broker.close()
    broker = open_standalone(config)
    try:
        served(broker).groups.load_pending()
        group = served(broker).groups.groups["cg"]
        assert group.state == "Stable" and list(group.members) == ["m1"]
        owned = [{"topic_id": t, "partitions": ps} for t, ps in assigned]
        again = await call_awaiting(broker, consumer_heartbeat, 1, heartbeat_body("m1", epoch, None, owned))
        assert again.error_code == ErrorCode.NONE and again.member_epoch == epoch, again
        left = await call_awaiting(broker, consumer_heartbeat, 1, heartbeat_body("m1", -1))
        assert left.error_code == ErrorCode.NONE and not group.members
        assert group_format.decode_consumer_value(group.stored).members == ()
    finally:
        broker.close()
