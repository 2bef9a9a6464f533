"""Share groups (KIP-932), the group half: the simple assignor, the heartbeat state machine with a
hand-driven clock, and the handlers (ShareGroupHeartbeat, ShareGroupDescribe, ListGroups,
DescribeGroups, DeleteGroups, JoinGroup / ConsumerGroupHeartbeat on a share group) through the
codec, with persistence across a coordinator reload."""
from __future__ import annotations

import importlib
import uuid

import pytest

from kshim.broker import BrokerConfig
from kshim.cluster.image import SHARE_VERSION
from kshim.controller.messages import FeatureUpdate, FeatureUpgrade
from kshim.coordinator.groups.assignors import simple
from kshim.coordinator.groups.group import GroupConfig
from kshim.coordinator.groups.share_group import ShareGroup
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_admin_handlers import call
from tests.test_groups import call_awaiting, find
from wire.errors import ErrorCode

heartbeat = importlib.import_module("kshim.net.handlers.76_share_group_heartbeat")
share_describe = importlib.import_module("kshim.net.handlers.77_share_group_describe")
list_groups = importlib.import_module("kshim.net.handlers.16_list_groups")
describe_groups = importlib.import_module("kshim.net.handlers.15_describe_groups")
delete_groups = importlib.import_module("kshim.net.handlers.42_delete_groups")
consumer_heartbeat = importlib.import_module("kshim.net.handlers.68_consumer_group_heartbeat")
join_group = importlib.import_module("kshim.net.handlers.11_join_group")
incremental_alter = importlib.import_module("kshim.net.handlers.44_incremental_alter_configs")

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


# ---------------------------------------------------------------------------- the simple assignor
def counts(assignment):
    per_partition: dict = {}
    for m, tps in assignment.items():
        for tp in tps:
            per_partition[tp] = per_partition.get(tp, 0) + 1
    return per_partition


@pytest.mark.parametrize("members, partitions", [(1, 1), (3, 1), (2, 5), (5, 2), (4, 4), (7, 3)])
def test_simple_assignor_balances_and_covers_every_partition(members, partitions):
    subs = {f"m{i}": {"t"} for i in range(members)}
    out = simple(subs, {"t": (T1, partitions)})
    per_partition = counts(out)
    assert set(per_partition) == {(T1, p) for p in range(partitions)}  # every partition has a member
    sizes = [len(v) for v in out.values()]
    assert max(sizes) - min(sizes) <= 1
    assert max(per_partition.values()) - min(per_partition.values()) <= 1
    if members > partitions:
        assert sizes == [1] * members
    else:
        assert sum(sizes) == partitions


def test_simple_assignor_is_sticky_and_heterogeneous():
    topics = {"a": (T1, 4), "b": (T2, 1)}
    first = simple({"m1": {"a"}, "m2": {"a"}}, topics)
    second = simple({"m1": {"a"}, "m2": {"a"}, "m3": {"a", "b"}}, topics, first)
    assert second["m3"] >= {(T2, 0)}  # the only subscriber of b has its partition
    kept = sum(len(first[m] & second[m]) for m in ("m1", "m2"))
    assert kept >= 2  # the partitions that could stay, stayed
    assert set(counts(second)) == {(T1, p) for p in range(4)} | {(T2, 0)}


# ---------------------------------------------------------------------------- the state machine
def test_join_heartbeat_fence_and_leave():
    g = ShareGroup("g", GroupConfig())
    topics = {"t": (T1, 2)}
    a = g.share_heartbeat(0, member_id="a", member_epoch=0, subscribed_topic_names=["t"], topics=topics,
                          session_timeout_ms=1000, heartbeat_interval_ms=100)
    assert (a.error_code, a.member_epoch, a.heartbeat_interval_ms, a.assignment) == (0, 1, 100, {T1: [0, 1]})
    b = g.share_heartbeat(10, member_id="b", member_epoch=0, subscribed_topic_names=["t"], topics=topics,
                          session_timeout_ms=1000)
    assert b.member_epoch == 2 and len(b.assignment[T1]) == 1
    again = g.share_heartbeat(20, member_id="a", member_epoch=1, topics=topics, session_timeout_ms=1000)
    assert again.member_epoch == 2 and len(again.assignment[T1]) == 1  # a's target shrank: told at once
    quiet = g.share_heartbeat(30, member_id="a", member_epoch=2, topics=topics, session_timeout_ms=1000)
    assert quiet.assignment is None  # unchanged: null
    assert g.share_heartbeat(40, member_id="a", member_epoch=1, topics=topics).error_code == \
        ErrorCode.FENCED_MEMBER_EPOCH
    assert g.share_heartbeat(40, member_id="x", member_epoch=3, topics=topics).error_code == \
        ErrorCode.UNKNOWN_MEMBER_ID
    assert g.state == "Stable" and g.next_deadline() == 1010
    g.tick(1015)  # b's session ended (last heard at 10)
    assert set(g.members) == {"a"} and g.departed[-1][0] == "b" and g.group_epoch == 3
    left = g.share_heartbeat(1020, member_id="a", member_epoch=-1, topics=topics)
    assert (left.error_code, left.member_epoch) == (0, -1) and g.state == "Empty"
    assert g.share_heartbeat(1030, member_id="a", member_epoch=-1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_max_size_and_partitions_shared_by_many():
    g = ShareGroup("g")
    topics = {"t": (T1, 1)}
    for i in range(3):
        r = g.share_heartbeat(0, member_id=f"m{i}", member_epoch=0, subscribed_topic_names=["t"], topics=topics,
                              max_size=3)
        assert r.error_code == 0
    for i in range(3):  # every member shares the one partition
        assert g.share_heartbeat(1, member_id=f"m{i}", member_epoch=g.members[f"m{i}"].epoch,
                                 topics=topics).error_code == 0
        assert g.members[f"m{i}"].assigned == {(T1, 0)}
    full = g.share_heartbeat(2, member_id="m9", member_epoch=0, subscribed_topic_names=["t"], topics=topics, max_size=3)
    assert full.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_topic_changes_bump_the_epoch_and_restore_keeps_members():
    g = ShareGroup("g")
    g.share_heartbeat(0, member_id="a", member_epoch=0, subscribed_topic_names=["t", "later"], topics={"t": (T1, 1)})
    r = g.share_heartbeat(1, member_id="a", member_epoch=1, topics={"t": (T1, 1), "later": (T2, 2)})
    assert r.member_epoch == 2 and r.assignment == {T1: [0], T2: [0, 1]}
    restored = ShareGroup.restore("g", g.snapshot(), 100, GroupConfig(), lambda: None,
                                  {"t": (T1, 1), "later": (T2, 2)}, 5000)
    assert restored.members["a"].assigned == g.members["a"].assigned and restored.group_epoch == 2
    assert restored.refresh({"t": (T1, 1), "later": (T2, 2)}) is False  # loading bumps nothing
    assert restored.next_deadline() == 5100


# ---------------------------------------------------------------------------- the handlers
@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


async def hb(broker, group, member, epoch, topics=None):
    return await call_awaiting(broker, heartbeat, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                                      "rack_id": None, "subscribed_topic_names": topics})


async def coordinated(broker, group):
    assert (await find(broker, group)).coordinators[0].error_code == 0
    served(broker).groups.load_pending()


@pytest.mark.anyio
async def test_share_group_through_the_handlers(broker):
    await broker.create_topic("t", 2)
    await coordinated(broker, "sg")
    joined = await hb(broker, "sg", "m1", 0, ["t"])
    assert (joined.error_code, joined.member_epoch, joined.heartbeat_interval_ms) == (0, 1, 5000)
    tid = broker.topics["t"].topic_id
    assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [(tid, [0, 1])]
    second = await hb(broker, "sg", "m2", 0, ["t"])
    assert second.member_epoch == 2

    [described] = (await call(broker, share_describe, 1, {"group_ids": ["sg", "nope", ""],
                                                         "include_authorized_operations": True})).groups[:1]
    assert (described.error_code, described.group_state, described.group_epoch, described.assignor_name) == \
        (0, "Stable", 2, "simple")
    assert sorted(m.member_id for m in described.members) == ["m1", "m2"]
    assert described.members[1].assignment.topic_partitions[0].topic_name == "t"
    resp = await call(broker, share_describe, 1, {"group_ids": ["nope", ""], "include_authorized_operations": False})
    assert [g.error_code for g in resp.groups] == [ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID]

    listed = await call(broker, list_groups, 5, {"states_filter": [], "types_filter": ["share"]})
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == \
        [("sg", "share", "share", "Stable")]
    assert (await call(broker, list_groups, 5, {"states_filter": ["empty"], "types_filter": []})).groups == []
    dg = await call(broker, describe_groups, 6, {"groups": ["sg"], "include_authorized_operations": False})
    assert (dg.groups[0].error_code, dg.groups[0].group_state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")

    # other protocols cannot take the id, and a share group cannot take theirs
    cg = await call_awaiting(broker, consumer_heartbeat, 1, {
        "group_id": "sg", "member_id": "c", "member_epoch": 0, "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ["t"], "topic_partitions": []})
    assert cg.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    await coordinated(broker, "cg")
    assert (await call_awaiting(broker, consumer_heartbeat, 1, {
        "group_id": "cg", "member_id": "c", "member_epoch": 0, "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ["t"], "topic_partitions": []})).error_code == 0
    not_share = await hb(broker, "cg", "m1", 0, ["t"])
    assert not_share.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in not_share.error_message

    # a group config applies at the next heartbeat
    await call(broker, incremental_alter, 1, {"resources": [{"resource_type": 32, "resource_name": "sg", "configs": [
        {"name": "share.heartbeat.interval.ms", "config_operation": 0, "value": "6000"}]}], "validate_only": False})
    caught_up = await hb(broker, "sg", "m1", 1)  # m1 had not heartbeated since m2 joined
    assert (caught_up.member_epoch, caught_up.heartbeat_interval_ms) == (2, 6000)
    assert len(caught_up.assignment.topic_partitions[0].partitions) == 1  # it now shares the topic with m2

    # the coordinator moves (unload, load): members go on under their epochs
    groups = served(broker).groups
    index = groups.partition_of("sg")
    groups.unload(index)
    groups.runtime.loaded.discard(index)
    groups.runtime.on_image()
    groups.load_pending()
    again = await hb(broker, "sg", "m2", 2)
    assert (again.error_code, again.member_epoch) == (0, 2)

    # DeleteGroups: not while members remain; then the share-state hook runs first
    deleted_states = []

    async def delete_state(group_id):
        deleted_states.append(group_id)
        return ErrorCode.NONE
    groups.share_group_deleters[:] = [delete_state]  # the hook alone (the share partitions' is tested with them)
    left_members = []
    groups.share_member_listeners.append(lambda g, m: left_members.append((g, m)))
    assert (await call_awaiting(broker, delete_groups, 2, {"groups_names": ["sg"]})).results[0].error_code == \
        ErrorCode.NON_EMPTY_GROUP
    for m in ("m1", "m2"):
        assert (await hb(broker, "sg", m, -1)).member_epoch == -1
    assert sorted(left_members) == [("sg", "m1"), ("sg", "m2")]
    groups.tick()  # an Empty share group is kept (not forgotten like an idle classic group)
    assert (await call(broker, list_groups, 5, {"states_filter": ["Empty"], "types_filter": ["share"]})).groups
    assert (await call_awaiting(broker, delete_groups, 2, {"groups_names": ["sg"]})).results[0].error_code == 0
    assert deleted_states == ["sg"] and "sg" not in groups.groups


@pytest.mark.anyio
async def test_share_heartbeat_request_checks_and_feature(broker):
    await broker.create_topic("t", 1)
    await coordinated(broker, "g")
    cases = [({"group_id": "", "member_id": "m", "member_epoch": 0, "subscribed_topic_names": ["t"]}, "GroupId"),
             ({"group_id": "g", "member_id": "", "member_epoch": 0, "subscribed_topic_names": ["t"]}, "MemberId"),
             ({"group_id": "g", "member_id": "m", "member_epoch": 0, "subscribed_topic_names": None}, "SubscribedTopic"),
             ({"group_id": "g", "member_id": "m", "member_epoch": -2, "subscribed_topic_names": None}, "MemberEpoch")]
    for body, words in cases:
        resp = await call_awaiting(broker, heartbeat, 1, {"rack_id": None, **body})
        assert resp.error_code == ErrorCode.INVALID_REQUEST and words in resp.error_message
    assert (await hb(broker, "g", "m", 3)).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    await broker.update_features([FeatureUpdate(SHARE_VERSION, 0, FeatureUpgrade.SAFE_DOWNGRADE)])
    assert (await hb(broker, "g", "m", 0, ["t"])).error_code == ErrorCode.UNSUPPORTED_VERSION
