"""Unit tests of the classic group state machine (a hand-driven clock) and of the coordinator's
durable offsets (a standalone broker, handlers called through the codec)."""
from __future__ import annotations

import importlib

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.coordinator.groups import Group, GroupConfig, java_string_hashcode, partition_for
from kshim.coordinator.groups.group import COMPLETING, EMPTY, PREPARING, STABLE
from kshim.standalone import open_standalone
from tests.test_admin_handlers import call
from tests.waiting import wait_until
from wire.errors import ErrorCode
from tests.nodes import served

find_coordinator = importlib.import_module("kshim.net.handlers.10_find_coordinator")
offset_commit = importlib.import_module("kshim.net.handlers.08_offset_commit")
offset_fetch = importlib.import_module("kshim.net.handlers.09_offset_fetch")
delete_groups = importlib.import_module("kshim.net.handlers.42_delete_groups")
list_groups = importlib.import_module("kshim.net.handlers.16_list_groups")
describe_groups = importlib.import_module("kshim.net.handlers.15_describe_groups")


P = [("range", b"meta")]


def join(g: Group, now: int, member_id: str = "", *, instance: str | None = None, protocols=P,
         session: int = 10_000, rebalance: int = 30_000, require_known: bool = True):
    return g.join(now, member_id=member_id, instance_id=instance, client_id="c", client_host="/h",
                  session_timeout_ms=session, rebalance_timeout_ms=rebalance, protocol_type="consumer",
                  protocols=protocols, require_known_member=require_known, version=5)


def joined(g: Group, now: int, **kw) -> tuple[str, object]:
    """A dynamic member's two-step join (MEMBER_ID_REQUIRED, then with the id)."""
    first = join(g, now, **kw)
    assert first.value.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.value.member_id
    return member_id, join(g, now, member_id, **kw)


def sync(g: Group, now: int, member_id: str, generation: int, assignments=()):
    return g.sync(now, member_id=member_id, instance_id=None, generation=generation, protocol_type=None,
                  protocol_name=None, assignments=list(assignments))


def stable_pair(g: Group) -> tuple[str, str]:
    a, wa = joined(g, 0)
    assert wa.done and wa.value.generation_id == 1 and wa.value.leader == a
    b, wb = joined(g, 1)  # a second member: a rebalance that waits for a to rejoin
    assert not wb.done and g.state == PREPARING
    wa2 = join(g, 2, a)
    assert wa2.done and wb.done and g.state == COMPLETING and g.generation == 2
    assert len(wa2.value.members) == 2 and wb.value.members == ()  # only the leader gets them
    sb = sync(g, 3, b, 2)
    assert not sb.done
    sa = sync(g, 3, a, 2, [(a, b"A"), (b, b"B")])
    assert g.state == STABLE and sa.value.assignment == b"A" and sb.value.assignment == b"B"
    return a, b


@pytest.mark.anyio
async def test_join_sync_and_leader_assignment():
    g = Group("g")
    stable_pair(g)


@pytest.mark.anyio
async def test_heartbeat_errors_and_rebalance_in_progress():
    g = Group("g")
    a, b = stable_pair(g)
    assert g.heartbeat(4, member_id=a, instance_id=None, generation=2) == ErrorCode.NONE
    assert g.heartbeat(4, member_id=a, instance_id=None, generation=1) == ErrorCode.ILLEGAL_GENERATION
    assert g.heartbeat(4, member_id="nobody", instance_id=None, generation=2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.leave(5, b, None) == ErrorCode.NONE
    assert g.state == PREPARING
    assert g.heartbeat(6, member_id=a, instance_id=None, generation=2) == ErrorCode.REBALANCE_IN_PROGRESS
    w = join(g, 7, a)
    assert w.done and w.value.generation_id == 3 and g.state == COMPLETING


@pytest.mark.anyio
async def test_session_timeout_removes_member_and_rebalances():
    g = Group("g")
    a, b = stable_pair(g)
    for t in range(1000, 12_000, 1000):  # a heartbeats, b is silent
        g.heartbeat(t, member_id=a, instance_id=None, generation=2)
        g.tick(t)
    assert b not in g.members and g.state == PREPARING
    w = join(g, 12_500, a)
    assert w.value.generation_id == 3 and [m.member_id for m in w.value.members] == [a]


@pytest.mark.anyio
async def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    g = Group("g")
    a, b = stable_pair(g)
    c, wc = joined(g, 10)
    wa = join(g, 11, a)
    assert not wc.done and not wa.done
    for t in range(1000, 30_000, 1000):  # b heartbeats (REBALANCE_IN_PROGRESS) but does not rejoin
        assert g.heartbeat(t, member_id=b, instance_id=None, generation=2) == ErrorCode.REBALANCE_IN_PROGRESS
        g.tick(t)
    assert not wc.done
    g.tick(11 + 30_000)
    assert wc.done and wa.done and b not in g.members and g.generation == 3


@pytest.mark.anyio
async def test_member_id_required_expires():
    g = Group("g")
    w = join(g, 0)
    assert w.value.error_code == ErrorCode.MEMBER_ID_REQUIRED and g.pending
    g.tick(10_001)
    assert not g.pending
    assert join(g, 10_002, w.value.member_id).value.error_code == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.anyio
async def test_inconsistent_protocols_and_session_timeout_bounds():
    g = Group("g")
    stable_pair(g)
    assert join(g, 5, protocols=[("other", b"")]).value.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert join(g, 5, session=10).value.error_code == ErrorCode.INVALID_SESSION_TIMEOUT


@pytest.mark.anyio
async def test_protocol_choice_is_one_all_members_support():
    g = Group("g")
    a, wa = joined(g, 0, protocols=[("cooperative-sticky", b"x"), ("range", b"r")])
    b, wb = joined(g, 1, protocols=[("range", b"r2")])
    wa = join(g, 2, a, protocols=[("cooperative-sticky", b"x"), ("range", b"r")])
    assert wa.value.protocol_name == "range" == wb.value.protocol_name
    assert {m.metadata for m in wa.value.members} == {b"r", b"r2"}


@pytest.mark.anyio
async def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced():
    g2 = Group("g2")
    leader, _ = joined(g2, 0)
    wf = join(g2, 1, instance="if")
    join(g2, 2, leader)
    follower = wf.value.member_id
    sync(g2, 3, follower, 2)
    sync(g2, 3, leader, 2, [(leader, b"L"), (follower, b"F")])
    assert g2.state == STABLE
    again = join(g2, 4, instance="if")
    assert again.done and again.value.error_code == ErrorCode.NONE and again.value.generation_id == 2
    new_id = again.value.member_id
    assert new_id != follower and g2.state == STABLE
    assert sync(g2, 5, new_id, 2).value.assignment == b"F"
    assert g2.heartbeat(6, member_id=follower, instance_id="if", generation=2) == ErrorCode.FENCED_INSTANCE_ID


@pytest.mark.anyio
async def test_last_member_leaving_empties_the_group():
    g = Group("g")
    a, b = stable_pair(g)
    g.leave(5, a, None)
    join(g, 6, b)
    g.leave(7, b, None)
    assert g.state == EMPTY and not g.members


def test_java_hashcode_placement():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 10) == 0
    assert partition_for("my-group", 50) == abs(java_string_hashcode("my-group")) % 50


# ---------------------------------------------------------------- the coordinator on a broker

@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path, group_initial_rebalance_delay_ms=0))
    yield b
    b.close()


async def call_awaiting(broker, module, version, body):
    """Like `call`, for handlers that answer with an awaitable."""
    from wire import codec
    from wire.headers import RequestHeader
    from kshim.net.handlers import RequestContext
    req = codec.decode(module.API_KEY, version, "request",
                       codec.encode(module.API_KEY, version, "request", body), exact=True)
    ctx = RequestContext(served(broker), RequestHeader(module.API_KEY, version, 1, "test", 0), "test:0", {})
    resp = await module.handle(ctx, req)
    if not isinstance(resp, dict):
        resp = await resp
    return codec.decode(module.API_KEY, version, "response",
                        codec.encode(module.API_KEY, version, "response", resp), exact=True)


async def find(broker, group: str):
    return await call(broker, find_coordinator, 4, {"key_type": 0, "coordinator_keys": [group]})


@pytest.mark.anyio
async def test_offsets_are_durable_across_reopen(tmp_path):
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        resp = await find(broker, "g1")
        assert resp.coordinators[0].error_code == ErrorCode.NONE
        assert served(broker).groups.check("g1") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        served(broker).groups.load_pending()
        body = {"group_id": "g1", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "t", "partitions": [
                    {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3,
                     "committed_metadata": "hi"},
                    {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]}
        resp = await call_awaiting(broker, offset_commit, 8, body)
        assert [p.error_code for p in resp.topics[0].partitions] == [0, 0]
        body["topics"][0]["partitions"] = body["topics"][0]["partitions"][:1]
        body["topics"][0]["partitions"][0]["committed_offset"] = 43
        await call_awaiting(broker, offset_commit, 8, body)
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        served(broker).groups.load_pending()
        resp = await call(broker, offset_fetch, 8, {"groups": [{"group_id": "g1", "topics": None}],
                                                    "require_stable": True})
        parts = {(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
                 for p in resp.groups[0].topics[0].partitions}
        assert parts == {(0, 43, 3, "hi"), (1, 7, -1, "")}
        listed = await call(broker, list_groups, 5, {"states_filter": [], "types_filter": []})
        assert [(g.group_id, g.group_state) for g in listed.groups] == [("g1", "Empty")]
        described = await call(broker, describe_groups, 5, {"groups": ["g1", "nope"],
                                                             "include_authorized_operations": False})
        assert [g.group_state for g in described.groups] == ["Empty", "Dead"]
        resp = await call_awaiting(broker, delete_groups, 2, {"groups_names": ["g1", "nope"]})
        assert [r.error_code for r in resp.results] == [ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND]
    finally:
        broker.close()
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    try:
        served(broker).groups.load_pending()
        resp = await call(broker, offset_fetch, 7, {"group_id": "g1", "topics": None})
        assert resp.error_code == 0 and resp.topics == []  # the tombstones deleted them
    finally:
        broker.close()


@pytest.mark.anyio
async def test_commit_needs_membership_once_the_group_has_members(broker):
    await find(broker, "g")
    served(broker).groups.load_pending()
    group = served(broker).groups.get_group("g", create=True)
    member_id, _ = joined(group, served(broker).groups.clock())
    synced = sync(group, served(broker).groups.clock(), member_id, 1, [(member_id, b"x")])
    assert not synced.done and group.state == COMPLETING  # answered once the group's record is stored
    async with anyio.create_task_group() as tg:
        tg.start_soon(served(broker).groups.run)
        assert (await synced.wait()).assignment == b"x" and group.state == STABLE
        tg.cancel_scope.cancel()
    body = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    resp = await call_awaiting(broker, offset_commit, 8, body)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    body.update(generation_id_or_member_epoch=0, member_id=member_id)
    resp = await call_awaiting(broker, offset_commit, 8, body)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    body.update(generation_id_or_member_epoch=1)
    resp = await call_awaiting(broker, offset_commit, 8, body)
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE
    resp = await call_awaiting(broker, delete_groups, 2, {"groups_names": ["g"]})
    assert resp.results[0].error_code == ErrorCode.NON_EMPTY_GROUP


@pytest.mark.anyio
async def test_coordinator_timer_task_expires_sessions(broker):
    served(broker).groups.config = GroupConfig(min_session_timeout_ms=10)
    await find(broker, "g")
    async with anyio.create_task_group() as tg:
        tg.start_soon(served(broker).groups.run)
        await wait_until(lambda: not served(broker).groups.check("g"), message="the offsets partition loaded")
        group = served(broker).groups.get_group("g", create=True)
        group.config = served(broker).groups.config
        member_id, w = joined(group, served(broker).groups.clock(), session=100)
        assert w.done
        await wait_until(lambda: member_id not in group.members, message="the session expired")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_not_coordinator_before_the_offsets_topic_exists(broker):
    resp = await call(broker, offset_fetch, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    resp = await call(broker, find_coordinator, 0, {"key": "g"})
    assert resp.error_code == ErrorCode.NONE and resp.node_id == broker.node_id
    assert served(broker).groups.check("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    resp = await call(broker, find_coordinator, 3, {"key": "tx", "key_type": 1})
    assert resp.error_code == ErrorCode.NONE and resp.node_id == broker.node_id
    assert served(broker).transactions.check("tx") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    resp = await call(broker, find_coordinator, 3, {"key": "tx", "key_type": 2})
    assert resp.error_code == ErrorCode.INVALID_REQUEST
