"""Unit tests of KIP-848 consumer groups: the server-side assignors, and reconciliation (revocation
before assignment, epochs, fencing) with a hand-driven clock."""
from __future__ import annotations

import importlib

import pytest

from kshim.clock import ManualClock
from kshim.coordinator.groups.assignors import range_assignor, uniform
from kshim.coordinator.groups.consumer_group import (EMPTY, M_UNRELEASED, M_UNREVOKED, RECONCILING, STABLE,
                                         ConsumerGroup, validate_heartbeat)
from kshim.coordinator.groups.group import GroupConfig
from wire.errors import ErrorCode
from kshim.configs.broker import BrokerConfig

T = {"a": ("id-a", 6)}


def counts(assignment) -> list[int]:
    return sorted(len(v) for v in assignment.values())


def test_uniform_spreads_evenly_and_sticks():
    first = uniform({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, T)
    assert counts(first) == [2, 2, 2] and set().union(*first.values()) == {("id-a", p) for p in range(6)}
    second = uniform({"m1": {"a"}, "m2": {"a"}}, T, first)  # m3 leaves: only its partitions move
    assert counts(second) == [3, 3]
    assert first["m1"] <= second["m1"] and first["m2"] <= second["m2"]
    third = uniform({"m1": {"a"}, "m2": {"a"}, "m4": {"a"}}, T, second)  # m4 joins: takes one from each
    assert counts(third) == [2, 2, 2] and third["m1"] <= second["m1"] and third["m2"] <= second["m2"]


def test_uniform_mixed_subscriptions():
    topics = {"a": ("id-a", 4), "b": ("id-b", 2)}
    out = uniform({"m1": {"a"}, "m2": {"a", "b"}}, topics)
    assert all(t == "id-a" for t, _ in out["m1"])
    assert counts(out) == [3, 3] and len(set().union(*out.values())) == 6


def test_range_by_topic():
    topics = {"a": ("id-a", 5), "b": ("id-b", 2)}
    out = range_assignor({"m2": {"a", "b"}, "m1": {"a", "b"}, "m3": {"a"}}, topics)
    assert out["m1"] == {("id-a", 0), ("id-a", 1), ("id-b", 0)}
    assert out["m2"] == {("id-a", 2), ("id-a", 3), ("id-b", 1)}
    assert out["m3"] == {("id-a", 4)}


def hb(g: ConsumerGroup, now: int, member: str, epoch: int, owned=None, topics=None, **kw):
    if epoch == 0:
        kw.setdefault("subscribed_topic_names", ["a"])
        kw.setdefault("rebalance_timeout_ms", 10_000)
        owned = [] if owned is None else owned
    return g.consumer_heartbeat(now, member_id=member, member_epoch=epoch, owned=owned,
                                topics=T if topics is None else topics, **kw)


def assigned(response) -> set[int]:
    return {p for ps in response.assignment.values() for p in ps}


def owned(parts) -> list:
    return [("id-a", sorted(parts))]


def test_revocation_before_assignment_and_epochs():
    g = ConsumerGroup("g", GroupConfig(consumer_session_timeout_ms=10_000))
    r1 = hb(g, 0, "m1", 0)
    assert r1.error_code == 0 and r1.member_epoch == 1 and assigned(r1) == set(range(6))
    assert g.state == STABLE
    r2 = hb(g, 1, "m2", 0)  # m2 joins: epoch 2, but m1 still owns everything
    assert r2.member_epoch == 2 and assigned(r2) == set() and g.state == RECONCILING
    assert g.members["m2"].state == M_UNRELEASED
    r1 = hb(g, 2, "m1", 1, owned(range(6)))  # m1 is asked to revoke three, stays at epoch 1
    assert r1.member_epoch == 1 and len(assigned(r1)) == 3 and g.members["m1"].state == M_UNREVOKED
    keep = assigned(r1)
    r2 = hb(g, 3, "m2", 2, [])  # not released yet
    assert r2.assignment is None or assigned(r2) == set()
    r1 = hb(g, 4, "m1", 1, owned(range(6)))  # still owns them: no progress
    assert r1.member_epoch == 1 and g.members["m1"].state == M_UNREVOKED
    r1 = hb(g, 5, "m1", 1, owned(keep))  # revoked: epoch 2
    assert r1.member_epoch == 2
    r2 = hb(g, 6, "m2", 2, [])
    assert assigned(r2) == set(range(6)) - keep and g.state == STABLE


def test_fencing_and_errors():
    g = ConsumerGroup("g", GroupConfig(consumer_session_timeout_ms=10_000))
    r = hb(g, 0, "m1", 0)
    assert hb(g, 1, "m1", 5, []).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(g, 1, "nobody", 1, []).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.validate_commit("m1", r.member_epoch) == ErrorCode.NONE
    assert g.validate_commit("m1", 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert g.validate_commit("m1", 9) == ErrorCode.FENCED_MEMBER_EPOCH
    assert g.validate_fetch(None, -1) == ErrorCode.NONE
    hb(g, 2, "m2", 0)
    assert g.state == RECONCILING or g.state == STABLE
    g.tick(9_999)
    assert set(g.members) == {"m1", "m2"}
    hb(g, 5_000, "m2", g.members["m2"].epoch, [])
    g.tick(10_500)  # m1 silent for its session timeout: fenced, a new target gives m2 everything
    assert set(g.members) == {"m2"} and g.state == RECONCILING
    r2 = hb(g, 10_600, "m2", g.members["m2"].epoch, [])
    assert assigned(r2) == set(range(6)) and g.state == STABLE
    left = g.consumer_heartbeat(10_700, member_id="m2", member_epoch=-1)
    assert left.member_epoch == -1 and g.state == EMPTY


def test_subscription_and_topic_changes_bump_the_epoch():
    g = ConsumerGroup("g")
    r = hb(g, 0, "m1", 0)
    epoch = g.group_epoch
    r = hb(g, 1, "m1", r.member_epoch, topics={"a": ("id-a", 8)})  # the topic grew
    assert g.group_epoch == epoch + 1 and assigned(r) == set(range(8))
    r = hb(g, 2, "m1", r.member_epoch, subscribed_topic_regex="b.*", topics={"a": ("id-a", 8), "b1": ("id-b", 2)})
    assert g.group_epoch == epoch + 2
    assert sum(len(ps) for ps in r.assignment.values()) == 10


def test_static_member_replacement():
    g = ConsumerGroup("g")
    r = hb(g, 0, "m1", 0, instance_id="i1")
    before = g.group_epoch
    assert hb(g, 1, "m9", 0, instance_id="i1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert g.consumer_heartbeat(2, member_id="m1", member_epoch=-2, instance_id="i1").member_epoch == -2
    r = hb(g, 3, "m2", 0, instance_id="i1")
    assert r.error_code == 0 and assigned(r) == set(range(6)) and g.group_epoch == before
    assert set(g.members) == {"m2"}


@pytest.mark.parametrize("fields,code", [
    ({"member_id": ""}, ErrorCode.INVALID_REQUEST),
    ({"rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
    ({"topic_partitions": None}, ErrorCode.INVALID_REQUEST),
    ({"subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
    ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
    ({"subscribed_topic_regex": "("}, ErrorCode.INVALID_REGULAR_EXPRESSION),
    ({"member_epoch": -3}, ErrorCode.INVALID_REQUEST),
    ({}, ErrorCode.NONE),
])
def test_validation(fields, code):
    base = dict(group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout_ms=1000, subscribed_topic_names=["a"], subscribed_topic_regex=None,
                server_assignor=None, topic_partitions=[])
    assert validate_heartbeat(1, **{**base, **fields})[0] == code


def test_classic_and_consumer_groups_stay_apart():
    coordinator_mod = importlib.import_module("kshim.coordinator.groups.coordinator")

    class FakeBroker:
        topics, topics_by_id, config = {}, {}, BrokerConfig()

    c = coordinator_mod.GroupCoordinator(FakeBroker(), clock=ManualClock(monotonic=0))
    code, g = c.consumer_group("g", create=True)
    assert code == 0
    hb(g, 0, "m1", 0)
    join = c.get_group("g", create=True).join(0, member_id="")
    assert join.value.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert c.get_group("g").heartbeat(0) == ErrorCode.UNKNOWN_MEMBER_ID
    g.consumer_heartbeat(1, member_id="m1", member_epoch=-1)
    classic = c.get_group("g", create=True)  # empty: becomes a classic group
    assert getattr(classic, "group_type", "classic") == "classic"
    classic.join(0, member_id="", instance_id=None, client_id="c", client_host="/h", session_timeout_ms=10_000,
                 rebalance_timeout_ms=10_000, protocol_type="consumer", protocols=[("range", b"")],
                 require_known_member=False)
    assert c.consumer_group("g", create=True)[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_subscription_regexes_match_in_linear_time():
    """A pattern that makes a backtracking engine run for minutes is matched by RE2, whose
    automaton has no backtracking (its time is linear by construction, not by a clock here)."""
    import re2

    from kshim.coordinator.groups.consumer_group import compile_regex
    regex = compile_regex("(a|a)*b")
    assert isinstance(regex, re2._Regexp)
    assert regex.fullmatch("a" * 5000) is None and regex.fullmatch("a" * 5000 + "b")
