"""ShareFetch and ShareAcknowledge through their handlers on a standalone broker (KIP-932): share
sessions, acquisition and acknowledgement, durability through the share coordinator (a new
manager, as after a leader restart, loads what was COMMITTED), the inter-broker state APIs."""
from __future__ import annotations

import importlib
import uuid
from contextlib import asynccontextmanager

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.coordinator.share_partitions.manager import SharePartitionManager
from kshim.standalone import open_standalone
from tests.nodes import served
from tests.test_groups import call_awaiting
from tests.test_share_groups import coordinated, hb
from wire import records
from wire.errors import ErrorCode

share_fetch = importlib.import_module("kshim.net.handlers.78_share_fetch")
share_ack = importlib.import_module("kshim.net.handlers.79_share_acknowledge")
read_state = importlib.import_module("kshim.net.handlers.84_read_share_group_state")

CONFIGS = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000",
           "group.share.delivery.count.limit": "3"}


@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path, group_initial_rebalance_delay_ms=0))
    yield b
    b.close()


@asynccontextmanager
async def running(broker):
    """The share coordinator's loading loop and the lock-expiry task, as the server runs them."""
    node = served(broker)
    node.share.group_configs = lambda group: CONFIGS
    async with anyio.create_task_group() as tg:
        tg.start_soon(node.share_coordinator.run)
        tg.start_soon(node.share.run)
        yield node
        tg.cancel_scope.cancel()


def append(broker, topic: str, *values: bytes) -> None:
    assert broker.partition(topic, 0).append(records.encode_batch([(None, v) for v in values])).error == 0


def fetch_body(tid: uuid.UUID, epoch: int, member: str = "m1", acks=(), max_records: int = 100,
               wait: int = 0, partitions=(0,)) -> dict:
    return {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait_ms": wait, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in acks]}
                for p in partitions]}],
            "forgotten_topics_data": []}


def acquired(resp) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


def ack_codes(resp) -> list[int]:
    return [p.acknowledge_error_code for t in resp.responses for p in t.partitions]


@pytest.mark.anyio
async def test_fetch_acknowledge_and_durable_state(broker):
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b", b"c", b"d")
    async with running(broker) as node:
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))
        assert resp.error_code == 0 and resp.acquisition_lock_timeout_ms == 60000
        assert acquired(resp) == [(0, 3, 1)]
        # another member finds nothing: the records are locked
        other = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))
        assert acquired(other) == []
        # m1 accepts 0-1, releases 2 and keeps 3; a wrong epoch is refused
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 5, acks=[(0, 1, 1)]))
        assert resp.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        resp = await call_awaiting(broker, share_ack, 1, {
            "group_id": "g", "member_id": "m1", "share_session_epoch": 1, "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]},
                    {"first_offset": 2, "last_offset": 2, "acknowledge_types": [2]}]}]}]})
        assert resp.error_code == 0 and [p.error_code for t in resp.responses for p in t.partitions] == [0]
        # m2 (its session at epoch 1) gets the released record with delivery count 2
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1, member="m2"))
        assert acquired(resp) == [(2, 2, 2)]
        # acknowledging what another member holds: INVALID_RECORD_STATE
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 2, member="m1", acks=[(2, 2, 1)]))
        assert ack_codes(resp) == [ErrorCode.INVALID_RECORD_STATE]
        # the coordinator holds what was COMMITTED: start 2, record 2 and 3 in flight (as available)
        key = ("g", tid, 0)
        stored = node.share_coordinator.states[key]
        assert stored.start_offset == 2
        # a new leader (a fresh manager) loads it: 2 and 3 are redelivered, 0-1 never; their
        # delivery counts go on from the last write (m2's acquisition of 2 was not written)
        fresh = SharePartitionManager(broker, node.share_coordinator, group_configs=lambda g: CONFIGS)
        results = await fresh.fetch("g", "m3", [(tid, 0)], 0, 1, 1 << 20, 100)
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in results[0].acquired] == [(2, 3, 2)]


@pytest.mark.anyio
async def test_session_rules_and_request_errors(broker):
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    async with running(broker):
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, acks=[(0, 0, 1)]))
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1))
        assert resp.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        resp = await call_awaiting(broker, share_fetch, 1, {**fetch_body(tid, 0), "member_id": ""})
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        resp = await call_awaiting(broker, share_ack, 1, {"group_id": "g", "member_id": "m1", "share_session_epoch": 0,
                                                           "topics": []})
        assert resp.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # an unknown topic id and an out-of-range partition
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(uuid.uuid4(), 0))
        assert [p.error_code for t in resp.responses for p in t.partitions] == [ErrorCode.UNKNOWN_TOPIC_ID]
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, partitions=(0, 5)))
        assert [p.error_code for t in resp.responses for p in t.partitions] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        # a long poll is answered when records arrive (a session without the bad partition)
        await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))
        async with anyio.create_task_group() as tg:
            got = {}

            async def poll() -> None:
                got["resp"] = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1, wait=5000))
            tg.start_soon(poll)
            await anyio.sleep(0.05)
            append(broker, "t", b"x")
        assert acquired(got["resp"]) == [(0, 0, 1)]
        # closing the session releases what the member holds
        resp = await call_awaiting(broker, share_ack, 1, {"group_id": "g", "member_id": "m1", "share_session_epoch": -1,
                                                           "topics": []})
        assert resp.error_code == 0
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))
        assert acquired(resp) == [(0, 0, 2)]


@pytest.mark.anyio
async def test_read_share_group_state_serves_the_coordinators_state(broker):
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a")
    async with running(broker):
        await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1, acks=[(0, 0, 3)]))
        assert ack_codes(resp) == [0]
        resp = await call_awaiting(broker, read_state, 0, {"group_id": "g", "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        part = resp.results[0].partitions[0]
        assert (part.error_code, part.start_offset) == (0, 1)


@pytest.mark.anyio
async def test_deleting_the_group_drops_its_state_and_sessions(broker):
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b")
    async with running(broker) as node:
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))) == [(0, 1, 1)]
        assert (await call_awaiting(broker, share_fetch, 1, fetch_body(tid, -1, partitions=()))).error_code == 0
        assert ("g", "m1") not in node.share.sessions.sessions
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))) == [(0, 1, 2)]
        resp = await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1, member="m2", acks=[(0, 0, 1)]))
        assert ack_codes(resp) == [0]
        assert node.share_coordinator.states[("g", tid, 0)].start_offset == 1
        assert await node.share.delete_group_state("g") == ErrorCode.NONE
        assert ("g", tid, 0) not in node.share_coordinator.states and not node.share.partitions
        assert node.share.sessions.of_group("g") == []


# ---------------------------------------------------------------------------- how a share session ends
def ack_body(tid: uuid.UUID, epoch: int, member: str = "m1", acks_by_partition=None) -> dict:
    return {"group_id": "g", "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": tid, "partitions": [
            {"partition_index": p, "acknowledgement_batches": [
                {"first_offset": a, "last_offset": b, "acknowledge_types": [t]} for a, b, t in acks]}
            for p, acks in (acks_by_partition or {}).items()]}]}


def outcomes(resp) -> dict[int, int]:
    """partition -> its acknowledgement outcome (ShareAcknowledge: error_code; ShareFetch: acknowledge_error_code)."""
    return {p.partition_index: getattr(p, "acknowledge_error_code", p.error_code)
            for t in resp.responses for p in t.partitions}


@pytest.mark.anyio
async def test_leaving_the_group_does_not_end_the_share_session(broker):
    """A client closing sends its leave heartbeat alongside its closing ShareAcknowledge (epoch -1):
    whichever comes first, the acknowledgements are applied, as Kafka does (its share session ends
    with the final request or the connection, not with the group membership)."""
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b", b"c", b"d")
    async with running(broker) as node:
        await coordinated(broker, "g")
        assert (await hb(broker, "g", "m1", 0, ["t"])).error_code == 0
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))) == [(0, 3, 1)]
        assert (await hb(broker, "g", "m1", -1)).member_epoch == -1  # the leave heartbeat wins the race
        await node.share.expire_due()  # whatever the background task would do by now
        resp = await call_awaiting(broker, share_ack, 1, ack_body(tid, -1, acks_by_partition={0: [(0, 1, 1), (2, 2, 3)]}))
        assert (resp.error_code, outcomes(resp)) == (0, {0: 0})
        # 0-1 accepted and 2 rejected for good; 3, still held, was released at the close
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))) == [(3, 3, 2)]
        assert node.share_coordinator.states[("g", tid, 0)].start_offset == 3


@pytest.mark.anyio
async def test_a_closing_request_applies_its_acknowledgements_then_releases_the_rest(broker):
    """ShareAcknowledge with epoch -1: each partition's acknowledgements apply first and are
    answered (an error in one partition leaves the others applied), then every record the member
    still holds goes back, delivery count kept, and the session is gone."""
    await broker.create_topic("t", 2)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b", b"c", b"d")
    async with running(broker) as node:
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, partitions=(0, 1)))) == \
            [(0, 3, 1)]
        # accept 0, release 1, reject 2, leave 3 held; on partition 1 it holds nothing
        resp = await call_awaiting(broker, share_ack, 1, ack_body(tid, -1, acks_by_partition={
            0: [(0, 0, 1), (1, 1, 2), (2, 2, 3)], 1: [(0, 0, 1)]}))
        assert (resp.error_code, outcomes(resp)) == (0, {0: 0, 1: ErrorCode.INVALID_RECORD_STATE})
        assert (await call_awaiting(broker, share_ack, 1, ack_body(tid, 1))).error_code == \
            ErrorCode.SHARE_SESSION_NOT_FOUND
        # another member gets 1 (released by the acknowledgement) and 3 (released at the close), never 0 or 2
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))) == \
            [(1, 1, 2), (3, 3, 2)]
        stored = node.share_coordinator.states[("g", tid, 0)]
        assert stored.start_offset == 1


@pytest.mark.anyio
async def test_a_closing_share_fetch_acknowledges_and_fetches_nothing(broker):
    """ShareFetch with epoch -1 naming partitions with and without acknowledgements: Kafka's final
    context fetches nothing (no error either); the answer carries the acknowledgement outcomes;
    the member's other records go back and the session is gone."""
    await broker.create_topic("t", 2)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a", b"b", b"c", b"d")
    async with running(broker) as node:
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, partitions=(0, 1)))) == \
            [(0, 3, 1)]
        append(broker, "t", b"e")  # 4: available, and a closing fetch does not take it
        body = fetch_body(tid, -1, acks=[(0, 1, 1)], partitions=(0,))
        body["topics"][0]["partitions"].append({"partition_index": 1, "acknowledgement_batches": []})
        resp = await call_awaiting(broker, share_fetch, 1, body)
        assert resp.error_code == 0 and acquired(resp) == []
        assert outcomes(resp) == {0: 0}
        assert (await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 1))).error_code == \
            ErrorCode.SHARE_SESSION_NOT_FOUND
        assert acquired(await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))) == \
            [(2, 3, 2), (4, 4, 1)]
        assert node.share_coordinator.states[("g", tid, 0)].start_offset == 2


@pytest.mark.anyio
async def test_share_session_error_codes_are_kafkas(broker):
    """Kafka 4.3's SharePartitionManager: no session (never opened, or closed by epoch -1) is
    SHARE_SESSION_NOT_FOUND whatever the epoch, -1 included; ShareAcknowledge with epoch 0 is
    INVALID_SHARE_SESSION_EPOCH; a wrong positive epoch INVALID_SHARE_SESSION_EPOCH; epoch -1 closes
    a session whatever its epoch; a full cache SHARE_SESSION_LIMIT_REACHED."""
    await broker.create_topic("t", 1)
    tid = broker.topics["t"].topic_id
    append(broker, "t", b"a")
    async with running(broker) as node:
        for module, body in ((share_ack, ack_body(tid, -1)), (share_fetch, fetch_body(tid, -1, partitions=())),
                             (share_ack, ack_body(tid, 1)), (share_fetch, fetch_body(tid, 1))):
            assert (await call_awaiting(broker, module, 1, body)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert (await call_awaiting(broker, share_ack, 1, ack_body(tid, 0))).error_code == \
            ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert (await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0))).error_code == 0
        assert (await call_awaiting(broker, share_ack, 1, ack_body(tid, 0))).error_code == \
            ErrorCode.INVALID_SHARE_SESSION_EPOCH  # a session or not
        for module, body in ((share_ack, ack_body(tid, 2)), (share_fetch, fetch_body(tid, 3))):
            assert (await call_awaiting(broker, module, 1, body)).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert (await call_awaiting(broker, share_ack, 1, ack_body(tid, 1))).error_code == 0  # now at epoch 2
        resp = await call_awaiting(broker, share_ack, 1, ack_body(tid, -1, acks_by_partition={0: [(0, 0, 1)]}))
        assert (resp.error_code, outcomes(resp)) == (0, {0: 0})
        for module, body in ((share_ack, ack_body(tid, -1)), (share_fetch, fetch_body(tid, -1, partitions=())),
                             (share_ack, ack_body(tid, 2))):
            assert (await call_awaiting(broker, module, 1, body)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        node.share.sessions.max_sessions = 1
        assert (await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m2"))).error_code == 0
        assert (await call_awaiting(broker, share_fetch, 1, fetch_body(tid, 0, member="m3"))).error_code == \
            ErrorCode.SHARE_SESSION_LIMIT_REACHED
