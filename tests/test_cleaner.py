"""The log cleaner (kshim.log.cleaner) on the log API: what a compacted log keeps, offsets, batch
headers, tombstones, indexes, the crash-safe swap, and when a log is due; and the broker's cleaner
(kshim.replica.cleaning) bounded by a partition's last stable offset."""
from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from kshim.broker import BrokerConfig
from kshim.log.log import Log, LogConfig
from kshim.log.cleaner import CleanAborted, Throttler, clean_log, cleanable_offsets, write_cleaned
from kshim.replica.cleaning import LogCleaner
from kshim.standalone import open_standalone
from kshim.log.log import CLEANED_SUFFIX, SWAP_SUFFIX
from wire.compression import GZIP
from kshim.log.txnindex import AbortedTxn
from wire.records import (
    NO_SEQUENCE, decode_all, decode_records, encode_batch, encode_marker, iter_batches, read_header, read_marker, crc_ok,
)

pytestmark = pytest.mark.unit
NOW = 1_700_000_000_000
BIG = 1 << 40


def cfg(**kw) -> LogConfig:
    base = dict(segment_bytes=600, compact=True, delete=False, index_interval_bytes=100)
    base.update(kw)
    return LogConfig(**base)


def put(log: Log, key: bytes | None, value: bytes | None, ts: int = NOW, **kw) -> int:
    data = bytearray(encode_batch([(key, value, [("h", b"x")], ts)], **kw))
    return log.append(data)[0]


def everything(log: Log) -> list:
    return decode_all(log.read(log.log_start_offset, 1 << 30))


def clean_all(log: Log, now: int = NOW, last: dict | None = None, first_dirty: int | None = None):
    return clean_log(log, log.log_start_offset if first_dirty is None else first_dirty, log.log_end_offset, now,
                     last_records=last or {}, dedupe_budget_bytes=BIG, force=first_dirty is not None)


def latest_per_key(n_keys: int, n_updates: int) -> dict[bytes, tuple[int, bytes]]:
    return {f"k{i % n_keys}".encode(): (i, f"v{i}".encode()) for i in range(n_updates)}


def test_keeps_the_latest_record_of_every_key_below_the_active_segment_with_offsets_unchanged(tmp_path: Path):
    log = Log(tmp_path, cfg())
    for i in range(300):
        put(log, f"k{i % 10}".encode(), f"v{i}".encode(), NOW + i)
    active = log.segment_base_offsets[-1]
    assert len(log.segment_base_offsets) > 5
    result = clean_all(log)
    assert result.end_offset == active
    recs = everything(log)
    below = [r for r in recs if r.offset < active]
    expected = {k: v for k, v in latest_per_key(10, active).items()}
    assert {r.key: (r.offset, r.value) for r in below} == {k: v for k, v in expected.items()
                                                             if v[0] < active}
    assert len(below) == len({r.key for r in below})  # one per key
    # the active segment is untouched; every record keeps its offset, key, value, header, timestamp
    assert [r.offset for r in recs if r.offset >= active] == list(range(active, 300))
    for r in recs:
        assert r.value == f"v{r.offset}".encode() and r.timestamp == NOW + r.offset
        assert list(r.headers) == [("h", b"x")]
    # reading from any offset, even one inside a gap, gives the next record
    gap = next(o for o in range(active) if o not in {r.offset for r in below})
    assert decode_all(log.read(gap, 1 << 20))[0].offset > gap
    log.close()
    reopened = Log(tmp_path, cfg())
    assert [r.offset for r in everything(reopened)] == [r.offset for r in recs]
    assert reopened.log_end_offset == 300


def test_rewritten_batches_keep_header_fields_and_get_a_valid_crc(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=100_000))
    records = [(b"a", b"1", [], NOW), (b"b", b"2", [], NOW + 1), (b"a", b"3", [], NOW + 2)]
    log.append(bytearray(encode_batch(records, producer_id=7, producer_epoch=2, base_sequence=40,
                                      partition_leader_epoch=5, compression=GZIP)))
    log._roll()
    clean_all(log)
    data = log.read(0, 1 << 20)
    (pos, h), = list(iter_batches(data))
    assert crc_ok(data, pos, h)
    assert (h.base_offset, h.last_offset_delta, h.producer_id, h.producer_epoch, h.base_sequence,
            h.partition_leader_epoch, h.compression, h.records_count) == (0, 2, 7, 2, 40, 5, GZIP, 2)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_all(data)] == [
        (1, b"b", b"2", NOW + 1), (2, b"a", b"3", NOW + 2)]
    assert h.max_timestamp == NOW + 2


def test_an_emptied_batch_stays_empty_only_if_it_is_its_producers_last(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=100_000))
    for seq, pid in enumerate((11, 12)):
        log.append(bytearray(encode_batch([(b"k", b"old", [], NOW)], producer_id=pid, producer_epoch=0,
                                          base_sequence=seq)))
    put(log, b"k", b"new")
    put(log, b"z", b"end")
    log._roll()
    clean_all(log, last={11: (0, 0), 12: (99, 0)})  # producer 11's last data batch is offset 0; 12 moved on
    batches = [read_header(log.read(o, 1 << 20)) for o in (0, 1)]
    assert (batches[0].base_offset, batches[0].records_count, batches[0].producer_id,
            batches[0].base_sequence) == (0, 0, 11, 0)
    assert batches[1].base_offset == 2  # producer 12's batch at offset 1 went
    assert [(r.offset, r.value) for r in everything(log)] == [(2, b"new"), (3, b"end")]


def test_tombstones_go_delete_retention_ms_after_their_first_clean(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=100_000, delete_retention_ms=1000))
    put(log, b"a", b"1")
    put(log, b"b", b"1")
    put(log, b"a", None)  # tombstone
    log._roll()
    clean_all(log, now=NOW)
    assert [(r.key, r.value) for r in everything(log)] == [(b"b", b"1"), (b"a", None)]
    h = read_header(log.read(2, 1 << 20))
    assert h.has_delete_horizon and h.base_timestamp == NOW + 1000
    assert decode_all(log.read(2, 1 << 20))[0].timestamp == NOW  # the record keeps its timestamp
    clean_all(log, now=NOW + 999, first_dirty=log.log_end_offset)
    assert [r.key for r in everything(log)] == [b"b", b"a"]
    assert clean_log(log, log.log_end_offset, log.log_end_offset, NOW + 5000, last_records={},
                     dedupe_budget_bytes=BIG).groups == 0  # unforced: nothing dirty, nothing done (Kafka)
    clean_all(log, now=NOW + 1000, first_dirty=log.log_end_offset)
    assert [(r.key, r.value) for r in everything(log)] == [(b"b", b"1")]


def txn_put(log: Log, pid: int, seq: int, *records: tuple[bytes, bytes | None], ts: int = NOW) -> int:
    data = bytearray(encode_batch([(k, v, [], ts) for k, v in records], producer_id=pid, producer_epoch=0,
                                  base_sequence=seq, transactional=True))
    return log.append(data)[0]


def end_txn(log: Log, pid: int, first: int, committed: bool, ts: int = NOW) -> int:
    """A marker as the partition writes it: an ABORT is indexed (first offset .. marker offset)."""
    offset = log.append(bytearray(encode_marker(pid, 0, committed, 0, ts)))[0]
    if not committed:
        log.add_aborted(AbortedTxn(pid, first, offset, log.log_end_offset))
    return offset


def data_records(log: Log) -> list:
    data = log.read(log.log_start_offset, 1 << 30)
    return [r for pos, h in iter_batches(data) if not h.is_control
            for r in decode_records(data[pos:pos + h.size])]


def markers(log: Log) -> list[tuple[int, int, bool]]:
    """(offset, producer id, committed) of every marker batch that still holds its record."""
    out = []
    data = log.read(log.log_start_offset, 1 << 30)
    for pos, h in iter_batches(data):
        if h.is_control and h.records_count:
            out.append((h.base_offset, h.producer_id, read_marker(data[pos:pos + h.size]).committed))
    return out


def test_committed_transactional_records_compact_like_others_and_aborted_ones_go(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=100_000, delete_retention_ms=1000))
    first = txn_put(log, 7, 0, (b"a", b"committed-1"), (b"b", b"committed-1"))   # 0-1
    end_txn(log, 7, first, committed=True)                                       # 2
    first = txn_put(log, 8, 0, (b"a", b"aborted"), (b"c", b"aborted"))           # 3-4
    end_txn(log, 8, first, committed=False)                                      # 5
    put(log, b"b", b"plain")                                                      # 6
    first = txn_put(log, 7, 1, (b"a", b"committed-2"))                           # 7
    end_txn(log, 7, first, committed=True)                                       # 8
    put(log, b"z", b"end")                                                        # 9
    log._roll()
    clean_all(log)
    # the aborted value of "a" neither stays nor shadows the committed one before it; "c" existed
    # only in the aborted transaction, so it is gone
    assert [(r.offset, r.key, r.value) for r in data_records(log)] == [
        (6, b"b", b"plain"), (7, b"a", b"committed-2"), (9, b"z", b"end")]
    # a marker stays while its transaction's batches were still there when this clean began
    # (Kafka's rule: the clean that empties them does not also judge the marker)
    assert markers(log) == [(2, 7, True), (5, 8, False), (8, 7, True)]
    assert not any(read_header(log.read(o, 1 << 20)).has_delete_horizon for o in (2, 5, 8))
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in log.aborted_between(0, 10)] == [(8, 3, 5)]
    # the next clean finds nothing left of the first two: their markers get a delete horizon and
    # the abort's index entry goes; the commit of the transaction still holding "a" stays as it was
    clean_all(log, first_dirty=log.log_end_offset)
    assert markers(log) == [(2, 7, True), (5, 8, False), (8, 7, True)]
    stamped = {o: read_header(log.read(o, 1 << 20)) for o in (2, 5, 8)}
    assert stamped[2].has_delete_horizon and stamped[2].base_timestamp == NOW + 1000
    assert stamped[5].has_delete_horizon and not stamped[8].has_delete_horizon
    assert log.aborted_between(0, 10) == []
    # before the horizon a clean keeps them; after it they go
    clean_all(log, now=NOW + 999, first_dirty=log.log_end_offset)
    assert [m[0] for m in markers(log)] == [2, 5, 8]
    clean_all(log, now=NOW + 1000, first_dirty=log.log_end_offset)
    assert markers(log) == [(8, 7, True)]
    assert [r.offset for r in data_records(log)] == [6, 7, 9]
    assert [(r.offset, r.value) for r in everything(log)][-1] == (9, b"end")


def test_an_abort_marker_stays_indexed_while_its_transaction_has_batches(tmp_path: Path):
    """Only the batches of an aborted transaction that the cleaner has seen are dropped; while any
    is left (kept empty as its producer's last), the marker and its index entry stay."""
    log = Log(tmp_path, cfg(segment_bytes=100_000))
    first = txn_put(log, 9, 0, (b"k", b"aborted"))                               # 0
    end_txn(log, 9, first, committed=False)                                      # 1
    put(log, b"z", b"end")                                                        # 2
    log._roll()
    clean_all(log, last={9: (0, 0)})  # producer 9 is active: its last data batch stays, empty
    assert read_header(log.read(0, 1 << 20)).records_count == 0
    assert markers(log) == [(1, 9, False)]
    assert log.aborted_between(0, log.log_end_offset) == [AbortedTxn(9, 0, 1, 2)]
    assert [r.value for r in data_records(log)] == [b"end"]
    log.close()  # the cleaned transaction index is what a restart reads
    reopened = Log(tmp_path, cfg(segment_bytes=100_000))
    assert reopened.aborted_between(0, reopened.log_end_offset) == [AbortedTxn(9, 0, 1, 2)]


def test_a_later_committed_transaction_of_a_producer_is_not_taken_for_its_aborted_one(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=100_000))
    first = txn_put(log, 4, 0, (b"k", b"aborted"))                               # 0
    end_txn(log, 4, first, committed=False)                                      # 1
    first = txn_put(log, 4, 1, (b"k", b"committed"))                             # 2
    end_txn(log, 4, first, committed=True)                                       # 3
    put(log, b"z", b"end")                                                        # 4
    log._roll()
    clean_all(log)
    assert [(r.offset, r.value) for r in data_records(log)] == [(2, b"committed"), (4, b"end")]


def test_an_open_transaction_is_not_cleaned(tmp_path: Path):
    """The last stable offset bounds the clean: batches of a transaction still open stay whole."""
    log = Log(tmp_path, cfg(segment_bytes=100_000))
    put(log, b"k", b"plain")                                                      # 0
    open_first = txn_put(log, 3, 0, (b"k", b"open"))                             # 1
    put(log, b"k", b"later")                                                      # 2
    log._roll()
    clean_log(log, 0, open_first, NOW, last_records={}, dedupe_budget_bytes=BIG)
    assert [(r.offset, r.value) for r in everything(log)] == [(0, b"plain"), (1, b"open"), (2, b"later")]


@pytest.mark.anyio
async def test_the_brokers_cleaner_stops_at_an_open_transaction(tmp_path: Path, monkeypatch):
    """The broker's own cleaner (the replica manager's LogCleaner: it reads each compacted
    partition's last stable offset on the event loop and cleans the due logs below it) leaves a
    transaction still open out of the clean, so its record shadows nothing: cleaned up to the log
    end instead, the open record would delete its key's committed value, and an abort would then
    leave the key with no value at all."""
    # the cleaner's file work in this process (the broker runs it in a process of its own)
    monkeypatch.setattr(LogCleaner, "_write", lambda self, plan: write_cleaned(plan, None))
    broker = open_standalone(BrokerConfig(data_dir=tmp_path, log_cleaner_backoff_ms=10))
    try:
        # segment.bytes 14: each batch fills a segment, so the open transaction's lies below the active one
        await broker.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "14",
                                           "min.cleanable.dirty.ratio": "0.01"})
        rm = broker.replica_manager
        batches = [encode_batch([(b"a", b"old")]), encode_batch([(b"a", b"new")]),             # 0, 1
                   encode_batch([(b"k", b"committed")]),                                         # 2
                   encode_batch([(b"k", b"open")], producer_id=7, producer_epoch=0, base_sequence=0,
                                transactional=True),                                             # 3: open
                   encode_batch([(b"z", b"after")])]                                             # 4: active
        for data in batches:
            [appended] = rm.append(1, 5, [("t", 0, data)])
            assert appended.error == 0, appended
        p = rm.partition("t", 0)
        assert (p.last_stable_offset, p.log_end_offset, p.log.segment_base_offsets[-1]) == (3, 5, 4)

        def stored() -> list[tuple[int, bytes, bytes]]:
            return [(r.offset, r.key, r.value) for r in everything(p.log)]

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rm.cleaner.run, rm)
                while stored()[0][0] == 0:  # until a clean has removed a's older value
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        assert stored() == [(1, b"a", b"new"), (2, b"k", b"committed"), (3, b"k", b"open"), (4, b"z", b"after")]
    finally:
        broker.close()


def test_cleaned_segments_have_valid_indexes_and_timestamp_lookups(tmp_path: Path):
    log = Log(tmp_path, cfg(segment_bytes=2000, index_interval_bytes=50))
    for i in range(400):
        put(log, f"k{i % 40}".encode(), b"v" * 10, NOW + i)
    clean_all(log)
    kept = [r.offset for r in everything(log)]
    for o in kept:
        assert decode_all(log.read(o, 1))[0].offset == o  # an index lookup lands on the batch
    assert log.offset_for_timestamp(NOW + kept[3]) == (kept[3], NOW + kept[3])
    log.close()
    for name in os.listdir(tmp_path):
        assert not name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))
    reopened = Log(tmp_path, cfg(segment_bytes=2000, index_interval_bytes=50))
    assert [r.offset for r in everything(reopened)] == kept


def _segments_files(d: Path) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if n.endswith(".log")}


def test_a_crash_before_the_swap_commits_leaves_the_old_segments(tmp_path: Path, monkeypatch):
    log = Log(tmp_path, cfg())
    for i in range(100):
        put(log, f"k{i % 5}".encode(), f"v{i}".encode())
    before = everything(log)
    original = os.replace

    def crash_on_log_swap(src, dst):
        if str(src).endswith(".log" + CLEANED_SUFFIX):
            raise SystemExit("killed")
        return original(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_log_swap)
    with pytest.raises(SystemExit):
        clean_all(log)
    monkeypatch.setattr(os, "replace", original)
    for seg in log._segments:
        seg.close()
    reopened = Log(tmp_path, cfg())
    assert [(r.offset, r.value) for r in everything(reopened)] == [(r.offset, r.value) for r in before]
    assert not [n for n in os.listdir(tmp_path) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


def test_a_crash_after_the_swap_commits_finishes_it_at_open(tmp_path: Path, monkeypatch):
    log = Log(tmp_path, cfg())
    for i in range(100):
        put(log, f"k{i % 5}".encode(), f"v{i}".encode())
    original = os.unlink
    calls = []

    def crash_after_first_unlink(path, *a, **kw):
        calls.append(path)
        if len(calls) == 2 and not str(path).endswith(CLEANED_SUFFIX):
            raise SystemExit("killed")
        return original(path, *a, **kw)

    monkeypatch.setattr(os, "unlink", crash_after_first_unlink)
    with pytest.raises(SystemExit):
        clean_all(log)
    monkeypatch.setattr(os, "unlink", original)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".log" + SWAP_SUFFIX)]
    for seg in log._segments:
        seg.close()
    reopened = Log(tmp_path, cfg())
    recs = everything(reopened)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets))  # no duplicates from old and new segments
    last = {r.key: r.offset for r in recs}
    assert last == {f"k{i}".encode(): max(o for o in range(100) if o % 5 == i) for i in range(5)}
    assert not [n for n in os.listdir(tmp_path) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


def test_a_truncation_during_the_clean_aborts_it(tmp_path: Path):
    log = Log(tmp_path, cfg())
    for i in range(100):
        put(log, f"k{i % 5}".encode(), b"v")
    segments, active, truncations = log.cleanable_segments()
    log.truncate_to(50)
    assert not log.replace_segments(segments[:2], segments[0].stem, truncations)


def test_due_by_dirty_ratio_min_and_max_compaction_lag(tmp_path: Path):
    log = Log(tmp_path, cfg(min_compaction_lag_ms=10_000))
    for i in range(100):
        put(log, f"k{i % 5}".encode(), b"v", NOW + i)
    c = cleanable_offsets(log, None, log.log_end_offset, NOW + 100)
    assert c.first_uncleanable == 0 and not c.due(0.5)  # every segment is younger than the lag
    c = cleanable_offsets(log, None, log.log_end_offset, NOW + 20_000)
    assert c.first_uncleanable == log.segment_base_offsets[-1] and c.ratio == 1.0 and c.due(0.5)
    c = cleanable_offsets(log, None, 40, NOW + 20_000)  # the last stable offset bounds it
    assert c.first_uncleanable <= 40
    log.update_config(cfg(max_compaction_lag_ms=5_000))
    c = cleanable_offsets(log, log.segment_base_offsets[-2], log.log_end_offset, NOW + 20_000)
    assert c.compaction_delay_ms > 0 and c.due(0.99)


def test_throttler_sleeps_to_keep_the_rate():
    slept = []
    clock = [0.0]
    t = Throttler(1000.0, sleep=lambda s: slept.append(s), clock=lambda: clock[0])
    clock[0] = 0.1
    t.throttle(1000)  # 1000 bytes in 0.1 s at 1000 B/s: sleep 0.9 s
    assert slept and abs(slept[0] - 0.9) < 1e-6


def test_compacted_log_is_not_touched_by_retention(tmp_path: Path):
    log = Log(tmp_path, cfg(retention_ms=1))
    for i in range(50):
        put(log, b"k", b"v", 1000)
    assert log.apply_retention(NOW) == 0
    log.update_config(cfg(retention_ms=1, delete=True))
    assert log.apply_retention(NOW) > 0


def test_follower_accepts_batches_with_gaps(tmp_path: Path):
    leader = Log(tmp_path / "l", cfg())
    for i in range(60):
        put(leader, f"k{i % 3}".encode(), b"v")
    clean_all(leader)
    follower = Log(tmp_path / "f", cfg())
    data = leader.read(0, 1 << 30)
    follower.append_with_offsets(data)
    assert [r.offset for r in everything(follower)] == [r.offset for r in everything(leader)]
    assert follower.log_end_offset == leader.log_end_offset
    assert NO_SEQUENCE == -1


@pytest.mark.anyio
@pytest.mark.parametrize("enabled", [True, False])
async def test_log_cleaner_enable_false_never_looks_at_the_logs(enabled: bool):
    """log.cleaner.enable=false: the periodic cleaner never asks for the replicas (so cleans
    nothing); the same cleaner enabled asks at once (backoff 0)."""
    from kshim.replica.cleaning import CleanerSettings
    asked = anyio.Event()

    class Replicas:
        def replicas(self):
            asked.set()
            return []

    cleaner = LogCleaner(CleanerSettings(backoff_ms=0, enabled=enabled))
    async with anyio.create_task_group() as tg:
        tg.start_soon(cleaner.run, Replicas())
        if enabled:
            await asked.wait()
        else:
            with anyio.fail_after(10):  # a cleaner that looks never blocks (backoff 0): a deadline
                await anyio.wait_all_tasks_blocked()  # the cleaner parked for good: nothing else to run
            assert not asked.is_set()
        tg.cancel_scope.cancel()
