"""Share-partition state (KIP-932, kshim/coordinator/share_partitions/state.py): acquisition,
acknowledgement, delivery counts and limits, lock expiry on a ManualClock, the persisted form
and its record format."""
from __future__ import annotations

import uuid

from kshim.clock import ManualClock
from kshim.coordinator.share_partitions import record_format as fmt
from kshim.coordinator.share_partitions.manager import parse_duration_ms
from kshim.coordinator.share_partitions.sessions import ShareSessionCache, EVICTION_MS
from kshim.coordinator.share_partitions.state import (AckBatch, Acquired, AckType, LogBatch, RecordState,
                                                    SharePartitionState, ShareLimits, StateBatch)
from wire.errors import ErrorCode

LIMITS = ShareLimits(lock_ms=1000, delivery_limit=3, max_locks=100)
ACCEPT, RELEASE, REJECT, GAP, RENEW = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP, AckType.RENEW


def batches(*ranges: tuple[int, int], control: tuple[int, ...] = ()) -> list[LogBatch]:
    return [LogBatch(a, b, a not in control) for a, b in ranges]


def acquire(st: SharePartitionState, member: str, log: list[LogBatch], n: int = 100, now: int = 0,
            limits: ShareLimits = LIMITS, strict: bool = False) -> list[Acquired]:
    return st.acquire(member, st.next_fetch_offset(), log, n, limits, now, strict)


def test_acquire_new_records_then_nothing_left():
    st = SharePartitionState(10)
    assert acquire(st, "a", batches((10, 14), (15, 19))) == [Acquired(10, 19, 1)]
    assert st.next_fetch_offset() == 20 and st.in_flight() == 10
    assert acquire(st, "b", batches((10, 14), (15, 19))) == []


def test_batch_optimized_passes_max_records_at_batch_end_record_limit_does_not():
    st = SharePartitionState(0)
    assert acquire(st, "a", batches((0, 4), (5, 9)), n=3) == [Acquired(0, 4, 1)]
    st2 = SharePartitionState(0)
    assert acquire(st2, "a", batches((0, 4), (5, 9)), n=3, strict=True) == [Acquired(0, 2, 1)]
    assert st2.next_fetch_offset() == 3


def test_accept_moves_start_release_redelivers_with_count_two():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 3)))
    code, undo = st.acknowledge("a", [AckBatch(0, 1, (ACCEPT,)), AckBatch(2, 3, (RELEASE,))], LIMITS, 0)
    assert code == ErrorCode.NONE and undo is not None
    assert st.start == 2 and st.next_fetch_offset() == 2
    assert acquire(st, "b", batches((0, 3))) == [Acquired(2, 3, 2)]


def test_reject_never_returns_and_per_offset_types():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 2)))
    code, _ = st.acknowledge("a", [AckBatch(0, 2, (REJECT, RELEASE, ACCEPT))], LIMITS, 0)
    assert code == ErrorCode.NONE
    assert st.start == 1
    assert acquire(st, "a", batches((0, 2))) == [Acquired(1, 1, 2)]


def test_acks_on_records_not_held_are_invalid_record_state_and_apply_nothing():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 4)))
    code, undo = st.acknowledge("b", [AckBatch(0, 0, (ACCEPT,))], LIMITS, 0)
    assert (code, undo) == (ErrorCode.INVALID_RECORD_STATE, None)
    code, _ = st.acknowledge("a", [AckBatch(0, 1, (ACCEPT,)), AckBatch(7, 7, (ACCEPT,))], LIMITS, 0)
    assert code == ErrorCode.INVALID_RECORD_STATE and st.start == 0
    assert st.acknowledge("a", [AckBatch(3, 1, (ACCEPT,))], LIMITS, 0)[0] == ErrorCode.INVALID_REQUEST
    assert st.acknowledge("a", [AckBatch(0, 2, (ACCEPT, ACCEPT))], LIMITS, 0)[0] == ErrorCode.INVALID_REQUEST
    assert st.acknowledge("a", [AckBatch(0, 0, (9,))], LIMITS, 0)[0] == ErrorCode.INVALID_REQUEST


def test_delivery_limit_archives_on_the_last_release():
    st = SharePartitionState(0)
    for count in (1, 2, 3):
        assert acquire(st, "a", batches((0, 0))) == [Acquired(0, 0, count)]
        st.acknowledge("a", [AckBatch(0, 0, (RELEASE,))], LIMITS, 0)
    assert acquire(st, "a", batches((0, 0))) == [] and st.start == 1


def test_lock_expiry_on_a_manual_clock_releases_to_another_member():
    clock = ManualClock()
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 1)), now=clock.monotonic_ms())
    assert st.next_deadline() == clock.monotonic_ms() + 1000
    clock.advance(ms=999)
    assert st.expire_locks(clock.monotonic_ms(), LIMITS) == 0
    clock.advance(ms=1)
    assert st.expire_locks(clock.monotonic_ms(), LIMITS) == 2
    assert acquire(st, "b", batches((0, 1)), now=clock.monotonic_ms()) == [Acquired(0, 1, 2)]
    assert st.acknowledge("a", [AckBatch(0, 0, (ACCEPT,))], LIMITS, 0)[0] == ErrorCode.INVALID_RECORD_STATE


def test_renew_extends_the_lock():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 0)), now=0)
    assert st.acknowledge("a", [AckBatch(0, 0, (RENEW,))], LIMITS, 900)[0] == ErrorCode.NONE
    assert st.expire_locks(1000, LIMITS) == 0 and st.expire_locks(1900, LIMITS) == 1


def test_max_locks_bounds_the_window():
    st = SharePartitionState(0)
    limits = ShareLimits(1000, 5, max_locks=4)
    assert acquire(st, "a", batches((0, 1), (2, 3), (4, 5)), limits=limits) == [Acquired(0, 3, 1)]
    st.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))], limits, 0)
    assert acquire(st, "a", batches((4, 5)), limits=limits) == [Acquired(4, 5, 1)]
    # a batch larger than the window: only what fits is acquired, the rest once records are done
    st = SharePartitionState(0)
    assert acquire(st, "a", batches((0, 9)), limits=limits) == [Acquired(0, 3, 1)]
    assert st.in_flight() == 4 and acquire(st, "b", batches((0, 9)), limits=limits) == []
    st.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))], limits, 0)
    assert acquire(st, "b", batches((0, 9)), limits=limits) == [Acquired(4, 5, 1)]


def test_control_batches_and_gaps_are_archived_not_acquired():
    st = SharePartitionState(0)
    got = acquire(st, "a", batches((0, 1), (2, 2), (5, 6), control=(2,)))
    assert got == [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    st.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))], LIMITS, 0)
    assert st.start == 5  # past the control record and the gap


def test_release_member_and_undo():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 3)))
    code, undo = st.acknowledge("a", [AckBatch(0, 3, (ACCEPT,))], LIMITS, 0)
    assert st.start == 4 and undo is not None
    st.restore(undo)
    assert st.start == 0 and st.counts()["acquired"] == 4
    assert st.release_member("a", LIMITS) == 4 and st.counts()["available"] == 4


def test_persisted_form_round_trips_acquired_as_available_with_counts():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 5)))
    st.acknowledge("a", [AckBatch(1, 1, (ACCEPT,)), AckBatch(3, 3, (RELEASE,))], LIMITS, 0)
    saved = st.state_batches()
    assert saved == [StateBatch(0, 0, 0, 1), StateBatch(1, 1, 2, 1), StateBatch(2, 5, 0, 1)]
    again = SharePartitionState(st.start, saved)
    assert again.start == 0 and again.end == 6
    assert acquire(again, "b", batches((0, 5))) == [Acquired(0, 0, 2), Acquired(2, 5, 2)]
    assert again.records[1].state == RecordState.ACKNOWLEDGED


def test_move_start_past_deleted_records():
    st = SharePartitionState(0)
    acquire(st, "a", batches((0, 5)))
    st.move_start(4)
    assert st.start == 4 and st.in_flight() == 2


def test_record_format_round_trip_and_update_merge():
    tid = uuid.uuid4()
    key = fmt.encode_key(fmt.SNAPSHOT, "g", tid, 3)
    assert fmt.decode_key(key) == (fmt.SNAPSHOT, "g", tid, 3)
    assert fmt.decode_key(b"\x00\x01xyz") is None
    state = fmt.StoredState(2, 5, 10, [StateBatch(10, 12, 0, 1), StateBatch(13, 13, 2, 1)], 7)
    assert fmt.decode_value(fmt.SNAPSHOT, fmt.encode_value(fmt.SNAPSHOT, state)) == state
    update = fmt.StoredState(0, 6, 11, [StateBatch(12, 12, 4, 3)])
    merged = fmt.merge_update(state, fmt.decode_value(fmt.UPDATE, fmt.encode_value(fmt.UPDATE, update)))
    assert merged.start_offset == 11 and merged.leader_epoch == 6
    assert merged.batches == [StateBatch(11, 11, 0, 1), StateBatch(12, 12, 4, 3), StateBatch(13, 13, 2, 1)]


def test_durations():
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2M3.5S") == 86_400_000 + 120_000 + 3500
    assert parse_duration_ms("P") is None and parse_duration_ms("1H") is None


def test_session_cache_epochs_and_limit():
    cache = ShareSessionCache(max_sessions=1)
    code, s, gone = cache.open(("g", "m1"), [], 0)
    assert code == ErrorCode.NONE and s is not None and s.epoch == 1 and gone == []
    assert cache.use(("g", "m1"), 2, 0)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.use(("g", "m1"), 1, 0)[0] == ErrorCode.NONE
    assert cache.use(("g", "m2"), 1, 0)[0] == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.open(("g", "m2"), [], 10)[0] == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    code, s2, gone = cache.open(("g", "m2"), [], EVICTION_MS + 10)
    assert code == ErrorCode.NONE and [g.key for g in gone] == [("g", "m1")]
