"""Incremental fetch sessions (KIP-227): the cache's eviction rules, and the protocol rules
through the Fetch handler (full and incremental requests, forgotten topics, session errors)."""
from __future__ import annotations

import importlib
import uuid

import pytest

from kshim.broker import BrokerConfig
from kshim.replica.fetch import FetchPartition, FetchPartitionData
from kshim.replica.fetch_sessions import (EVICTION_MS, INT32_MAX, CachedPartition, FetchSessionCache, new_context,
                                          next_epoch)
from kshim.standalone import open_standalone
from tests.test_groups import call_awaiting
from wire import records
from wire.errors import ErrorCode

fetch = importlib.import_module("kshim.net.handlers.01_fetch")


# ---------------------------------------------------------------- the cache

class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def parts(n: int, topic: str = "t") -> list[CachedPartition]:
    return [CachedPartition(FetchPartition(topic, i, 0, 1024)) for i in range(n)]


def test_epochs_wrap_to_one_and_final_stays_final():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(-1) == -1


def test_sessions_get_distinct_nonzero_ids_until_the_cache_is_full():
    clock = Clock()
    cache = FetchSessionCache(3, clock=clock)
    ids = [cache.maybe_create(False, True, parts(1)) for _ in range(3)]
    assert 0 not in ids and len(set(ids)) == 3
    assert cache.maybe_create(False, True, parts(5)) == 0  # full, nothing stale or evictable
    assert cache.maybe_create(True, True, parts(1)) != 0  # a follower may evict a consumer's session
    assert len(cache.sessions) == 3


def test_zero_slots_disables_sessions():
    assert FetchSessionCache(0).maybe_create(True, True, parts(1)) == 0


def test_a_stale_session_is_evicted_first():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    a = cache.maybe_create(False, True, parts(9))
    clock.now += 10
    b = cache.maybe_create(False, True, parts(9))
    clock.now += EVICTION_MS + 5  # both stale; a was used least recently
    cache.touch(cache.sessions[b], clock.now)
    c = cache.maybe_create(False, True, parts(1))
    assert c != 0 and set(cache.sessions) == {b, c} and cache.evictions == 1
    assert a not in cache.sessions


def test_followers_outrank_consumers_and_old_sessions_yield_to_bigger_ones():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    follower = cache.maybe_create(True, True, parts(3))
    consumer = cache.maybe_create(False, True, parts(3))
    # young sessions: a consumer can evict nothing, a follower only the consumer's session
    assert cache.maybe_create(False, True, parts(100)) == 0
    assert cache.maybe_create(True, True, parts(1)) != 0
    assert follower in cache.sessions and consumer not in cache.sessions
    # older than EVICTION_MS (at their last touch), recently used: evictable by a newcomer that
    # outranks them (follower over consumer, then more partitions); the smallest goes first
    clock.now += EVICTION_MS + 1
    for s in list(cache.sessions.values()):
        cache.touch(s, clock.now)
    smallest = min(cache.sessions.values(), key=lambda s: len(s.partitions))
    assert cache.maybe_create(False, True, parts(50)) == 0  # a consumer never outranks a follower
    assert cache.maybe_create(True, True, parts(0)) == 0  # fewer partitions than any: keeps out
    newcomer = cache.maybe_create(True, True, parts(2))
    assert newcomer != 0 and smallest.id not in cache.sessions


def test_incremental_answers_only_partitions_with_news_and_rotates_those_with_records():
    cache = FetchSessionCache(10)
    asked = [FetchPartition("t", i, 0, 1024) for i in range(3)]
    full = new_context(cache, 12, 0, 0, False, asked, [])
    data = [FetchPartitionData(high_watermark=5, log_start_offset=0) for _ in asked]
    session_id, answered = full.respond(data)
    assert session_id != 0 and len(answered) == 3
    session = cache.sessions[session_id]
    assert session.epoch == 1
    inc = new_context(cache, 12, session_id, 1, False, [], [])
    same = [FetchPartitionData(high_watermark=5, log_start_offset=0) for _ in asked]
    same[1] = FetchPartitionData(high_watermark=6, log_start_offset=0, records=b"x" * 10)
    same[2] = FetchPartitionData(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    sid, answered = inc.respond(same)
    assert sid == session_id and [p.index for p, _ in answered] == [1, 2]
    assert [p.index for p in session.requests()] == [0, 2, 1]  # records: to the back
    # the error cleared the cached high watermark, so partition 2 is answered again when it heals
    inc = new_context(cache, 12, session_id, 2, False, [], [])
    healed = [FetchPartitionData(high_watermark=5, log_start_offset=0), FetchPartitionData(high_watermark=5),
              FetchPartitionData(high_watermark=6, log_start_offset=0)]
    healed[1].log_start_offset = 0
    assert [p.index for p, _ in inc.respond(healed)[1]] == [2]
    # a high watermark that moved is news on its own (no records, no error, the same log start)
    inc = new_context(cache, 12, session_id, 3, False, [], [])
    moved = [FetchPartitionData(high_watermark=hw, log_start_offset=0) for hw in (7, 5, 6)]  # partitions 0, 2, 1
    assert [p.index for p, _ in inc.respond(moved)[1]] == [0]


def test_session_errors_and_closing():
    cache = FetchSessionCache(10)
    asked = [FetchPartition(uuid.uuid4(), 0, 0, 1024)]
    session_id, _ = new_context(cache, 18, 0, 0, False, asked, []).respond([FetchPartitionData()])
    assert new_context(cache, 18, session_id + 1 if session_id < INT32_MAX else 1, 1, False, [], []).error \
        == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert new_context(cache, 18, session_id, 5, False, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert new_context(cache, 12, session_id, 1, False, [], []).error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert new_context(cache, 18, 0, 3, False, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.sessions[session_id].epoch == 1  # errors leave the session as it was
    # forgetting its last partition closes it; the request is served without a session
    topic_id = asked[0].topic
    context = new_context(cache, 18, session_id, 1, False, [], [(topic_id, 0)])
    assert context.error == 0 and context.respond([])[0] == 0 and session_id not in cache.sessions
    # epoch -1 closes a session; epoch 0 with an id replaces it
    sid, _ = new_context(cache, 18, 0, 0, False, asked, []).respond([FetchPartitionData()])
    assert new_context(cache, 18, sid, -1, False, asked, []).respond([FetchPartitionData()])[0] == 0
    assert sid not in cache.sessions
    sid, _ = new_context(cache, 18, 0, 0, False, asked, []).respond([FetchPartitionData()])
    sid2, _ = new_context(cache, 18, sid, 0, False, asked, []).respond([FetchPartitionData()])
    assert sid2 != 0 and set(cache.sessions) == {sid2}
    # below v7 there are no sessions
    assert new_context(cache, 6, 0, 0, False, asked, []).respond([FetchPartitionData()])[0] == 0


# ---------------------------------------------------------------- through the handler

@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


def request(session_id: int, epoch: int, topics: list, forgotten: list = (), version: int = 18) -> dict:
    by_id = version >= 13
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
            "session_epoch": epoch, "rack_id": "",
            "topics": [{("topic_id" if by_id else "topic"): t, "partitions": [
                {"partition": i, "fetch_offset": off, "partition_max_bytes": 1 << 20} for i, off in ps]}
                for t, ps in topics],
            "forgotten_topics_data": [{("topic_id" if by_id else "topic"): t, "partitions": ps} for t, ps in forgotten]}


def answered(resp) -> dict:
    key = "topic_id" if "topic_id" in resp.responses[0] else "topic" if resp.responses else None
    return {(t[key], p.partition_index): (p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


def append(broker, topic: str, index: int, *values: bytes) -> None:
    assert broker.partition(topic, index).append(records.encode_batch([(None, v) for v in values])).error == 0


@pytest.mark.anyio
@pytest.mark.parametrize("version", [12, 18])
async def test_a_consumer_fetches_through_an_incremental_session(broker, version):
    await broker.create_topic("a", 2)
    await broker.create_topic("b", 1)
    a = broker.topics["a"].topic_id if version >= 13 else "a"
    b = broker.topics["b"].topic_id if version >= 13 else "b"
    append(broker, "a", 0, b"1", b"2")

    def req(*args, **kw):
        return request(*args, **kw, version=version)
    resp = await call_awaiting(broker, fetch, version, req(0, 0, [(a, [(0, 0), (1, 0)]), (b, [(0, 0)])]))
    sid = resp.session_id
    assert resp.error_code == 0 and sid != 0
    assert answered(resp) == {(a, 0): (0, 2, answered(resp)[(a, 0)][2]), (a, 1): (0, 0, 0), (b, 0): (0, 0, 0)}
    # nothing changed: an incremental fetch answers no partition
    resp = await call_awaiting(broker, fetch, version, req(sid, 1, [(a, [(0, 2)])]))
    assert (resp.error_code, resp.session_id, resp.responses) == (0, sid, [])
    # new records on b: only b is answered, though the request names no partition
    append(broker, "b", 0, b"x")
    resp = await call_awaiting(broker, fetch, version, req(sid, 2, []))
    assert list(answered(resp)) == [(b, 0)] and answered(resp)[(b, 0)][:2] == (0, 1)
    # forgetting a 0 and b: a 1 remains; its new record is answered
    append(broker, "a", 1, b"y")
    resp = await call_awaiting(broker, fetch, version, req(sid, 3, [], forgotten=[(a, [0]), (b, [0])]))
    assert list(answered(resp)) == [(a, 1)]
    assert [(p.topic, p.index) for p in broker.replica_manager.fetch_sessions.sessions[sid].requests()] == [(a, 1)]
    # a wrong epoch, then an unknown session: errors without partitions; the session stays
    resp = await call_awaiting(broker, fetch, version, req(sid, 3, []))
    assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    resp = await call_awaiting(broker, fetch, version, req(sid ^ 1, 4, []))
    assert resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    resp = await call_awaiting(broker, fetch, version, req(sid, 4, []))
    assert (resp.error_code, resp.session_id) == (0, sid)
    # epoch -1: the session is closed and the request served without one
    resp = await call_awaiting(broker, fetch, version, req(sid, -1, [(a, [(1, 0)])]))
    assert resp.session_id == 0 and list(answered(resp)) == [(a, 1)]
    assert sid not in broker.replica_manager.fetch_sessions.sessions


@pytest.mark.anyio
async def test_a_session_names_a_deleted_topic_unknown_topic_id(broker):
    await broker.create_topic("a", 1)
    a = broker.topics["a"].topic_id
    resp = await call_awaiting(broker, fetch, 18, request(0, 0, [(a, [(0, 0)])]))
    sid = resp.session_id
    await broker.delete_topic("a")
    resp = await call_awaiting(broker, fetch, 18, request(sid, 1, []))
    assert answered(resp) == {(a, 0): (ErrorCode.UNKNOWN_TOPIC_ID, -1, 0)}


@pytest.mark.anyio
async def test_the_slots_option_bounds_the_sessions(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path, max_incremental_fetch_session_cache_slots=1))
    try:
        await b.create_topic("a", 1)
        first = await call_awaiting(b, fetch, 12, request(0, 0, [("a", [(0, 0)])], version=12))
        second = await call_awaiting(b, fetch, 12, request(0, 0, [("a", [(0, 0)])], version=12))
        assert first.session_id != 0 and second.session_id == 0  # the young session keeps its slot
        assert second.responses[0].partitions[0].error_code == 0  # served all the same
    finally:
        b.close()


@pytest.mark.anyio
async def test_an_incremental_fetch_long_polls_and_answers_the_partition_that_got_records(broker):
    import anyio

    await broker.create_topic("a", 3)
    a = broker.topics["a"].topic_id
    resp = await call_awaiting(broker, fetch, 18, request(0, 0, [(a, [(0, 0), (1, 0), (2, 0)])]))
    sid = resp.session_id
    body = {**request(sid, 1, []), "max_wait_ms": 10_000, "min_bytes": 1}
    async with anyio.create_task_group() as tg:
        async def later() -> None:
            await anyio.sleep(0.2)
            append(broker, "a", 2, b"late")
        tg.start_soon(later)
        with anyio.fail_after(5):  # woken by the append, long before max_wait_ms
            resp = await call_awaiting(broker, fetch, 18, body)
    assert list(answered(resp)) == [(a, 2)] and answered(resp)[(a, 2)][:2] == (0, 1)
    order = [p.index for p in broker.replica_manager.fetch_sessions.sessions[sid].requests()]
    assert order == [0, 1, 2]  # 2 returned records: it was last already and stays there


def test_the_sessions_hold_a_bounded_number_of_partitions():
    cache = FetchSessionCache(10, max_partitions=5)
    asked = [FetchPartition("t", i, 0, 1024) for i in range(4)]
    sid, _ = new_context(cache, 12, 0, 0, False, asked, []).respond([FetchPartitionData()] * 4)
    assert sid != 0
    more = [FetchPartition("u", i, 0, 1024) for i in range(2)]
    assert new_context(cache, 12, 0, 0, False, more, []).respond([FetchPartitionData()] * 2)[0] == 0  # 6 > 5
    context = new_context(cache, 12, sid, 1, False, more, [])  # growing the session past the bound
    assert context.error == 0 and context.asked == more and context.respond([FetchPartitionData()] * 2)[0] == 0
    assert cache.sessions == {}
