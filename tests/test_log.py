"""The on-disk partition log (kshim.log): segments, indexes, reads, retention, recovery."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from kshim.clock import ManualClock
from kshim.log.log import CLEAN_SHUTDOWN_FILE, Log, LogConfig, OffsetOutOfRange
from wire.records import (
    LOG_APPEND_TIME, CorruptRecordError, decode_all, encode_batch, iter_batches,
)


def batch(n: int = 1, ts: int = 1000, *, size: int = 10, step: int = 1, **kw) -> bytearray:
    """n records with timestamps ts, ts+step, ..."""
    return bytearray(encode_batch([(b"k", b"v" * size, None, ts + i * step) for i in range(n)], **kw))


def offsets(data: bytes) -> list[int]:
    return [r.offset for r in decode_all(data)]


def batch_bases(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(data)]


def crash(log: Log) -> None:
    """Drop the log like a killed process: fds go away, no clean-shutdown marker."""
    for seg in log._segments:
        seg.close()
    log._closed = True


def files(d: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(suffix))


def make(tmp_path: Path, clock: ManualClock | None = None, **cfg) -> Log:
    kw = {"clock": clock} if clock else {}
    return Log(tmp_path / "p0", LogConfig(**cfg), **kw)


def fill(log: Log, batches: int, records: int = 3, ts: int = 1000, **kw) -> list[tuple[int, int]]:
    return [log.append(batch(records, ts + i * 10, **kw)) for i in range(batches)]


def everything(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30)


# ---------------------------------------------------------------------------------------------- basics

def test_empty_log(tmp_path):
    log = make(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp() is None
    assert list(log.batch_headers()) == []
    assert files(tmp_path / "p0", ".log") == ["00000000000000000000.log"]


def test_append_assigns_offsets_and_patches_the_buffer(tmp_path):
    log = make(tmp_path)
    b = batch(3)
    assert log.append(b) == (0, 2)
    assert struct.unpack_from(">q", b, 0)[0] == 0
    b2 = batch(2)
    struct.pack_into(">q", b2, 0, 777)  # whatever the producer sent is overwritten
    assert log.append(b2) == (3, 4)
    assert struct.unpack_from(">q", b2, 0)[0] == 3
    assert log.log_end_offset == 5
    assert log.size_bytes == len(b) + len(b2)
    assert offsets(log.read(0, 1 << 20)) == [0, 1, 2, 3, 4]
    assert log.read(0, 1 << 20) == bytes(b) + bytes(b2)


def test_append_slice_of_a_larger_buffer_with_two_batches(tmp_path):
    log = make(tmp_path)
    one, two = batch(2), batch(3)
    buf = bytearray(b"xx") + one + two + bytearray(b"yy")
    assert log.append(buf, 2, len(one) + len(two)) == (0, 4)
    assert batch_bases(log.read(0, 1 << 20)) == [0, 2]
    assert buf[:2] == b"xx" and buf[-2:] == b"yy"


def test_append_rejects_garbage(tmp_path):
    log = make(tmp_path)
    with pytest.raises(CorruptRecordError):
        log.append(bytearray(b"\x00" * 100))
    b = batch(2)
    with pytest.raises(CorruptRecordError):
        log.append(b, 0, len(b) - 1)  # truncated
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_round_trip_across_several_segments(tmp_path):
    log = make(tmp_path, segment_bytes=1000, index_interval_bytes=200)
    results = fill(log, 60)
    assert results == [(3 * i, 3 * i + 2) for i in range(60)]
    assert len(files(tmp_path / "p0", ".log")) > 5
    assert offsets(everything(log)) == list(range(180))
    # every segment honours segment.bytes and is named by its base offset
    for name in files(tmp_path / "p0", ".log"):
        assert (tmp_path / "p0" / name).stat().st_size <= 1000
    assert [int(n[:20]) for n in files(tmp_path / "p0", ".log")] == log.segment_base_offsets
    # reads starting at every offset return the batch containing it first, then the rest
    for off in range(180):
        data = log.read(off, 1 << 20)
        assert batch_bases(data)[0] == off - off % 3
        assert offsets(data)[-1] == 179


def test_read_max_bytes(tmp_path):
    log = make(tmp_path, segment_bytes=700)
    fill(log, 20)
    size = len(log.read(0, 1))  # one batch, returned whole although larger than 1 byte
    assert batch_bases(log.read(0, 1)) == [0]
    assert batch_bases(log.read(0, 0)) == [0]
    assert batch_bases(log.read(0, size)) == [0]
    assert batch_bases(log.read(0, 2 * size + size // 2)) == [0, 3]
    assert batch_bases(log.read(0, 3 * size)) == [0, 3, 6]
    # across segment boundaries
    data = log.read(0, 10 * size)
    assert batch_bases(data) == [3 * i for i in range(10)]
    assert len(data) == 10 * size
    assert batch_bases(log.read(3, 10 * size - 1)) == [3 * i for i in range(1, 10)]


def test_first_batch_whole_even_when_huge(tmp_path):
    log = make(tmp_path, segment_bytes=1000)
    log.append(batch(1))
    big = batch(5, size=3000)  # larger than a segment: gets one of its own
    log.append(big)
    log.append(batch(1))
    assert log.segment_base_offsets == [0, 1, 6]
    assert log.read(1, 100) == bytes(big)
    assert batch_bases(log.read(0, 200)) == [0]


def test_read_max_offset_bound(tmp_path):
    log = make(tmp_path, segment_bytes=600)
    fill(log, 10)  # batches [0-2] [3-5] ... [27-29]
    assert batch_bases(log.read(0, 1 << 20, 9)) == [0, 3, 6]
    assert batch_bases(log.read(0, 1 << 20, 8)) == [0, 3]  # batch 6-8 has last offset 8 >= 8
    assert log.read(0, 1 << 20, 0) == b""
    assert log.read(4, 1 << 20, 5) == b""
    assert batch_bases(log.read(4, 1 << 20, 6)) == [3]
    assert batch_bases(log.read(4, 1 << 20, 100)) == [3 * i for i in range(1, 10)]
    assert batch_bases(log.read(0, 1 << 20, 30)) == [3 * i for i in range(10)]
    assert log.read(30, 1 << 20, 30) == b""


def test_read_in_the_middle_of_a_batch(tmp_path):
    log = make(tmp_path, index_interval_bytes=1)
    fill(log, 5, records=10)
    assert batch_bases(log.read(15, 1)) == [10]
    assert offsets(log.read(19, 1)) == list(range(10, 20))
    assert batch_bases(log.read(41, 1 << 20)) == [40]


def test_offset_out_of_range(tmp_path):
    log = make(tmp_path)
    fill(log, 2)
    with pytest.raises(OffsetOutOfRange) as e:
        log.read(7, 100)
    assert (e.value.log_start_offset, e.value.log_end_offset) == (0, 6)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.read(6, 100) == b""


def test_sparse_index_and_lookups(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, index_interval_bytes=300, segment_bytes=1 << 20)
    fill(log, 100, records=2)
    idx = (d / "00000000000000000000.index").read_bytes()
    entries = list(struct.iter_unpack(">ii", idx))
    assert 0 < len(entries) < 100
    # each entry names the last offset of the batch at its position
    data = everything(log)
    for rel, pos in entries:
        h = dict(iter_batches(data))[pos]
        assert h.last_offset == rel
    tidx = list(struct.iter_unpack(">qi", (d / "00000000000000000000.timeindex").read_bytes()))
    assert tidx and all(a[0] < b[0] for a, b in zip(tidx, tidx[1:]))
    for off in range(0, 200, 7):
        assert batch_bases(log.read(off, 1))[0] == off - off % 2


def _expected_read(batches, offset, max_bytes, bound):
    """Reference model of Log.read over a list of (base, last, bytes)."""
    out, total = [], 0
    for base, last, data in batches:
        if last < offset:
            continue
        if last >= bound or (out and total + len(data) > max_bytes):
            break
        out.append(data)
        total += len(data)
        if total > max_bytes:  # only the first batch may exceed max_bytes
            break
    return b"".join(out)


def test_reads_match_a_reference_model(tmp_path):
    import random
    rnd = random.Random(7)
    log = make(tmp_path, segment_bytes=200_000, index_interval_bytes=4096)
    batches = []
    for _ in range(400):
        b = batch(rnd.randint(1, 6), size=rnd.choice([10, 100, 1000, 5000]))
        base, last = log.append(b)
        batches.append((base, last, bytes(b)))
    assert len(log.segment_base_offsets) > 3 and log.size_bytes > 700_000
    leo = log.log_end_offset
    for reopen in (False, True):
        if reopen:
            log.close()
            log = make(tmp_path, segment_bytes=200_000)  # lazily loaded indexes now
        for _ in range(600):
            offset = rnd.randrange(leo + 1)
            max_bytes = rnd.choice([0, 1, 500, 5000, 30_000, 65_536, 70_000, 150_000, 300_000, 10**7])
            bound = rnd.choice([None, leo, rnd.randrange(leo + 1)])
            got = log.read(offset, max_bytes, bound)
            assert got == _expected_read(batches, offset, max_bytes, leo if bound is None else bound), \
                (offset, max_bytes, bound)


def test_multi_batch_append_splits_across_segments(tmp_path):
    one = batch(2)
    log = make(tmp_path, segment_bytes=3 * len(one))
    buf = bytearray(b"".join(batch(2) for _ in range(7)))
    assert log.append(buf) == (0, 13)
    assert log.segment_base_offsets == [0, 6, 12]
    assert batch_bases(everything(log)) == [0, 2, 4, 6, 8, 10, 12]
    assert batch_bases(bytes(buf)) == [0, 2, 4, 6, 8, 10, 12]  # patched in place


# ---------------------------------------------------------------------------------------------- rolling

def test_roll_by_size(tmp_path):
    b = batch(1)
    log = make(tmp_path, segment_bytes=3 * len(b))
    for _ in range(7):
        log.append(batch(1))
    assert log.segment_base_offsets == [0, 3, 6]
    assert log.size_bytes == 7 * len(b)


def test_roll_by_time(tmp_path):
    clock = ManualClock(wall_ms=1_000_000)
    log = make(tmp_path, clock, segment_ms=1000)
    log.append(batch(1))
    clock.advance(ms=1000)
    log.append(batch(1))  # not older than segment.ms yet
    assert log.segment_base_offsets == [0]
    clock.advance(ms=1)
    log.append(batch(1))
    assert log.segment_base_offsets == [0, 2]
    clock.advance(ms=5000)  # an empty active segment never rolls; a non-empty one does
    log.append(batch(1))
    assert log.segment_base_offsets == [0, 2, 3]
    assert offsets(everything(log)) == [0, 1, 2, 3]


def test_update_config_applies_to_next_append(tmp_path):
    log = make(tmp_path)
    fill(log, 5)
    assert len(log.segment_base_offsets) == 1
    log.update_config(LogConfig(segment_bytes=1))
    fill(log, 2)
    assert log.segment_base_offsets == [0, 15, 18]


# ---------------------------------------------------------------------------------------------- retention

def test_retention_by_time(tmp_path):
    clock = ManualClock(wall_ms=100_000)
    log = make(tmp_path, clock, segment_bytes=500, retention_ms=10_000)
    for i in range(30):
        log.append(batch(2, ts=50_000 + i * 1000))  # timestamps 50s .. 79s
    bases = log.segment_base_offsets
    assert len(bases) > 3
    # at now=85s everything with a largest timestamp before 75s goes
    deleted = log.apply_retention(85_000)
    assert deleted > 0
    assert log.segment_base_offsets == bases[deleted:]
    assert log.log_start_offset == bases[deleted]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    data = everything(log)
    assert offsets(data)[0] == log.log_start_offset and offsets(data)[-1] == 59
    first_ts = decode_all(log.read(log.log_start_offset, 1))[-1].timestamp
    assert first_ts >= 75_000 - 1000
    # everything expired: the active segment is rolled and deleted too
    assert log.apply_retention(1_000_000) > 0
    assert log.log_start_offset == log.log_end_offset == 60
    assert log.size_bytes == 0 and log.segment_base_offsets == [60]
    assert log.read(60, 100) == b""
    assert log.append(batch(1)) == (60, 60)
    assert log.apply_retention(-1) == 0  # nothing is older than retention.ms at time -1


def test_retention_unlimited_and_future_timestamps(tmp_path):
    log = make(tmp_path, segment_bytes=300, retention_ms=-1)
    fill(log, 10, ts=0)
    assert log.apply_retention(10**12) == 0
    log.update_config(LogConfig(segment_bytes=300, retention_ms=1000))
    fill(log, 3, ts=10**13)  # producer clock far ahead: those segments are kept
    n = log.apply_retention(10**12)
    assert n > 0 and log.log_end_offset == 39 and log.log_start_offset > 0
    assert log.size_bytes > 0


def test_retention_by_bytes(tmp_path):
    b = batch(1)
    log = make(tmp_path, segment_bytes=2 * len(b), retention_bytes=5 * len(b), retention_ms=-1)
    for _ in range(10):
        log.append(batch(1))
    assert log.segment_base_offsets == [0, 2, 4, 6, 8]
    # as Kafka: delete oldest segments only while the log stays at or above retention.bytes
    assert log.apply_retention() == 2
    assert log.segment_base_offsets == [4, 6, 8]
    assert log.log_start_offset == 4 and log.size_bytes == 6 * len(b)
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    assert offsets(everything(log)) == [4, 5, 6, 7, 8, 9]
    assert log.apply_retention() == 0


def test_retention_only_below_max_offset(tmp_path):
    clock = ManualClock(wall_ms=10**9)
    log = make(tmp_path, clock, segment_bytes=300, retention_ms=1)
    fill(log, 10, ts=0)
    bases = log.segment_base_offsets
    assert log.apply_retention(max_offset=bases[2]) == 2
    assert log.log_start_offset == bases[2]


# ---------------------------------------------------------------------------------------------- start offset

def test_advance_start_offset(tmp_path):
    log = make(tmp_path, segment_bytes=400)
    fill(log, 12)
    bases = log.segment_base_offsets
    target = bases[2] + 1
    log.advance_start_offset(target)
    assert log.log_start_offset == target
    assert log.segment_base_offsets == bases[2:]
    with pytest.raises(OffsetOutOfRange):
        log.read(target - 1, 100)
    # the batch containing the start offset is still served whole
    assert batch_bases(log.read(target, 1))[0] == target - target % 3
    log.advance_start_offset(0)  # never backwards
    assert log.log_start_offset == target
    with pytest.raises(OffsetOutOfRange):
        log.advance_start_offset(log.log_end_offset + 1)
    log.close()
    log = make(tmp_path, segment_bytes=400)  # persisted
    assert log.log_start_offset == target
    log.advance_start_offset(log.log_end_offset)  # delete everything
    assert log.log_start_offset == log.log_end_offset == 36 and log.size_bytes == 0
    assert log.append(batch(1)) == (36, 36)
    log.close()
    log = make(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (36, 37)


# ---------------------------------------------------------------------------------------------- timestamps

def test_offset_for_timestamp(tmp_path):
    log = make(tmp_path, segment_bytes=400, index_interval_bytes=100)
    for i in range(20):
        log.append(batch(5, ts=10_000 + 100 * i, step=10))  # record j of batch i: 10000 + 100i + 10j
    assert log.offset_for_timestamp(0) == (0, 10_000)
    assert log.offset_for_timestamp(10_000) == (0, 10_000)
    assert log.offset_for_timestamp(10_001) == (1, 10_010)
    assert log.offset_for_timestamp(10_045) == (5, 10_100)
    assert log.offset_for_timestamp(11_520) == (77, 11_520)
    assert log.offset_for_timestamp(11_940) == (99, 11_940)
    assert log.offset_for_timestamp(11_941) is None
    for i in range(20):
        for j in range(5):
            assert log.offset_for_timestamp(10_000 + 100 * i + 10 * j) == (5 * i + j, 10_000 + 100 * i + 10 * j)
    # below the log start offset nothing is found
    log.advance_start_offset(52)
    assert log.offset_for_timestamp(0) == (52, 11_020)
    log.close()
    log = make(tmp_path)  # time indexes from disk (lazily loaded) give the same answers
    assert log.offset_for_timestamp(11_520) == (77, 11_520)
    assert log.offset_for_timestamp(0) == (52, 11_020)


def test_offset_for_timestamp_out_of_order(tmp_path):
    log = make(tmp_path, index_interval_bytes=1)
    log.append(batch(3, ts=5000, step=-1000))  # 5000 4000 3000
    log.append(batch(2, ts=1000))              # 1000 1001
    log.append(batch(2, ts=6000))              # 6000 6001
    assert log.offset_for_timestamp(3500) == (0, 5000)
    assert log.offset_for_timestamp(5500) == (5, 6000)
    assert log.offset_for_timestamp(1001) == (0, 5000)


def test_max_timestamp(tmp_path):
    log = make(tmp_path, segment_bytes=400)
    assert log.max_timestamp() is None
    fill(log, 10)
    log.append(bytearray(encode_batch([(b"a", b"1", None, 10), (b"b", b"2", None, 99_999),
                                       (b"c", b"3", None, 50)])))  # offsets 30..32
    fill(log, 10)
    log.append(batch(1, ts=99_999))  # a tie later on: the earliest wins
    assert log.max_timestamp() == (99_999, 31)
    log.close()
    log = make(tmp_path)
    assert log.max_timestamp() == (99_999, 31)


def test_log_append_time_batches(tmp_path):
    log = make(tmp_path)
    log.append(bytearray(encode_batch([(b"a", b"1", None, 5), (b"b", b"2", None, 7)],
                                      timestamp_type=LOG_APPEND_TIME, max_timestamp=500)))
    assert log.max_timestamp() == (500, 0)
    assert log.offset_for_timestamp(100) == (0, 500)
    assert log.offset_for_timestamp(501) is None


# ---------------------------------------------------------------------------------------------- truncation

def test_truncate_to(tmp_path):
    log = make(tmp_path, segment_bytes=400, index_interval_bytes=100)
    fill(log, 20)
    bases = log.segment_base_offsets
    log.truncate_to(60)  # at or beyond the end: no-op
    assert log.log_end_offset == 60
    log.truncate_to(40)  # inside batch [39-41]: truncated to 39
    assert log.log_end_offset == 39
    assert offsets(everything(log)) == list(range(39))
    assert log.segment_base_offsets == [b for b in bases if b < 39]
    assert log.append(batch(2)) == (39, 40)
    log.truncate_to(bases[2])  # exactly at a segment's base: that segment becomes empty
    assert log.log_end_offset == bases[2]
    assert log.segment_base_offsets == bases[:3]
    assert log.size_bytes == sum(len(batch(3)) for _ in range(bases[2] // 3))
    assert log.append(batch(3)) == (bases[2], bases[2] + 2)
    assert offsets(everything(log)) == list(range(bases[2] + 3))
    log.truncate_to(4)
    assert offsets(everything(log)) == [0, 1, 2]
    assert log.segment_base_offsets == [0]
    assert log.max_timestamp() == (1002, 2)
    log.close()
    log = make(tmp_path)
    assert log.log_end_offset == 3 and offsets(everything(log)) == [0, 1, 2]


def test_truncate_below_log_start(tmp_path):
    log = make(tmp_path, segment_bytes=400)
    fill(log, 20)
    log.advance_start_offset(30)
    first = log.segment_base_offsets[0]
    log.truncate_to(first - 5)
    assert log.log_start_offset == log.log_end_offset == first - 5
    assert log.append(batch(1)) == (first - 5, first - 5)
    log2 = make(tmp_path / "other", segment_bytes=400)
    fill(log2, 20)
    log2.advance_start_offset(31)  # inside batch [30-32]
    log2.truncate_to(31)           # LEO 30 < LSO 31: the start follows
    assert log2.log_start_offset == log2.log_end_offset == 30
    assert log2.read(30, 100) == b""


def test_truncate_keeps_indexes_consistent(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, index_interval_bytes=100)
    fill(log, 30)
    log.truncate_to(50)
    fill(log, 10, ts=5000)
    log.close()
    before = {n: (d / n).read_bytes() for n in files(d, "index")}
    for n in before:
        (d / n).unlink()
    log = make(tmp_path, index_interval_bytes=100)
    log.close()
    after = {n: (d / n).read_bytes() for n in files(d, "index")}
    assert before == after


# ---------------------------------------------------------------------------------------------- reopen / recovery

def test_reopen_after_close_keeps_everything(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, segment_bytes=500, index_interval_bytes=100)
    fill(log, 40)
    data, size, bases = everything(log), log.size_bytes, log.segment_base_offsets
    log.close()
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    log = make(tmp_path, segment_bytes=500, index_interval_bytes=100)
    assert not (d / CLEAN_SHUTDOWN_FILE).exists()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 120, size)
    assert log.segment_base_offsets == bases
    assert everything(log) == data
    for off in range(0, 120, 5):
        assert batch_bases(log.read(off, 1))[0] == off - off % 3
    assert log.append(batch(2)) == (120, 121)
    log.close()
    log.close()  # idempotent


def test_unclean_reopen_keeps_everything(tmp_path):
    log = make(tmp_path, segment_bytes=500, index_interval_bytes=100)
    fill(log, 40)
    data = everything(log)
    crash(log)
    log = make(tmp_path, segment_bytes=500, index_interval_bytes=100)
    assert log.log_end_offset == 120 and everything(log) == data
    assert log.max_timestamp() == (1392, 119)
    assert log.append(batch(1)) == (120, 120)


def test_recovery_truncates_torn_tail(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, segment_bytes=500)
    fill(log, 20)
    crash(log)
    last = d / files(d, ".log")[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 10)
    log = make(tmp_path, segment_bytes=500)
    assert log.log_end_offset == 57
    assert offsets(everything(log)) == list(range(57))
    assert log.append(batch(3)) == (57, 59)
    assert offsets(everything(log)) == list(range(60))


def test_recovery_truncates_bad_crc(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, segment_bytes=500)
    fill(log, 20)
    last_batch_size = len(batch(3))
    crash(log)
    last = d / files(d, ".log")[-1]
    size = last.stat().st_size
    with open(last, "r+b") as f:
        f.seek(size - 3)
        f.write(b"\xff\xfe\xfd")
    log = make(tmp_path, segment_bytes=500)
    assert log.log_end_offset == 57
    assert last.stat().st_size == size - last_batch_size
    assert log.append(batch(3)) == (57, 59)
    assert offsets(everything(log)) == list(range(60))


def test_recovery_truncates_offsets_that_go_back(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path)
    fill(log, 5)
    crash(log)
    seg = d / "00000000000000000000.log"
    with open(seg, "ab") as f:
        f.write(encode_batch([(b"k", b"v", None, 1)], base_offset=3))
    log = make(tmp_path)
    assert log.log_end_offset == 15


def test_recovery_keeps_batches_after_a_gap(tmp_path):
    """The cleaner of a compacted topic removes whole batches: offsets jump, and that is valid."""
    d = tmp_path / "p0"
    log = make(tmp_path)
    fill(log, 5)
    crash(log)
    seg = d / "00000000000000000000.log"
    with open(seg, "ab") as f:
        f.write(encode_batch([(b"k", b"v", None, 1)], base_offset=100))
    log = make(tmp_path)
    assert log.log_end_offset == 101


def test_clean_marker_does_not_vouch_for_a_broken_tail(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path)
    fill(log, 5)
    log.close()
    seg = d / "00000000000000000000.log"
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 1)
    log = make(tmp_path)
    assert log.log_end_offset == 12


def test_deleted_and_broken_index_files_are_rebuilt(tmp_path):
    d = tmp_path / "p0"
    cfg = dict(segment_bytes=600, index_interval_bytes=100)
    log = make(tmp_path, **cfg)
    for i in range(30):
        log.append(batch(3, ts=1000 + 10 * i))
    log.close()
    originals = {n: (d / n).read_bytes() for n in files(d, "index")}
    names = sorted(originals)
    for n in names[::2]:
        (d / n).unlink()
    with open(d / names[1], "ab") as f:
        f.write(b"\x00\x01\x02")  # not a whole number of entries
    (d / "00000000000000099999.index").write_bytes(b"stray")
    (d / "00000000000000000000.index.tmp").write_bytes(b"partial")
    log = make(tmp_path, **cfg)
    assert not (d / "00000000000000099999.index").exists()
    assert not (d / "00000000000000000000.index.tmp").exists()
    assert offsets(everything(log)) == list(range(90))
    for off in range(0, 90, 4):
        assert batch_bases(log.read(off, 1))[0] == off - off % 3
    assert log.offset_for_timestamp(1150) == (45, 1150)
    assert log.max_timestamp() == (1292, 89)
    log.close()
    assert {n: (d / n).read_bytes() for n in files(d, "index")} == originals


def test_index_pointing_past_the_data_is_rebuilt(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path, index_interval_bytes=100)
    fill(log, 20)
    log.close()
    with open(d / "00000000000000000000.index", "ab") as f:
        f.write(struct.pack(">ii", 100, 1 << 20))
    log = make(tmp_path, index_interval_bytes=100)
    assert offsets(everything(log)) == list(range(60))
    assert batch_bases(log.read(44, 1)) == [42]


def test_checkpoint_ahead_of_data(tmp_path):
    d = tmp_path / "p0"
    log = make(tmp_path)
    fill(log, 5)
    log.advance_start_offset(15)
    log.close()
    (d / "log-start-offset").write_text("40\n")
    log = make(tmp_path)
    assert log.log_start_offset == log.log_end_offset == 40
    assert log.append(batch(1)) == (40, 40)


def test_segment_time_roll_survives_reopen(tmp_path):
    clock = ManualClock(wall_ms=10_000)
    log = make(tmp_path, clock, segment_ms=1000)
    log.append(batch(1, ts=10_000))
    log.close()
    clock.advance(ms=10_000)
    log = make(tmp_path, clock, segment_ms=1000)
    log.append(batch(1))  # first batch's timestamp stands in for its append time
    assert log.segment_base_offsets == [0, 1]


# ---------------------------------------------------------------------------------------------- follower appends

def test_append_with_offsets(tmp_path):
    leader = make(tmp_path / "a", segment_bytes=500)
    fill(leader, 10)
    follower = make(tmp_path / "b", segment_bytes=500)
    data = leader.read(0, 400)
    n = len(batch_bases(data))
    assert follower.append_with_offsets(data) == 3 * n
    with pytest.raises(ValueError):
        follower.append_with_offsets(leader.read(0, 1 << 20))  # offsets going back
    rest = bytearray(leader.read(3 * n, 1 << 20))
    rest[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_with_offsets(bytes(rest))
    assert follower.log_end_offset == 3 * n
    assert follower.append_with_offsets(leader.read(3 * n, 1 << 20)) == 30
    assert everything(follower) == everything(leader)
    assert follower.segment_base_offsets == leader.segment_base_offsets
    assert follower.append_with_offsets(b"") == 30


def test_batch_headers(tmp_path):
    log = make(tmp_path, segment_bytes=300)
    log.append(batch(2, producer_id=7, producer_epoch=1, base_sequence=0))
    fill(log, 10)
    hs = list(log.batch_headers())
    assert [h.base_offset for h in hs] == [0] + [2 + 3 * i for i in range(10)]
    assert hs[0].producer_id == 7 and hs[0].last_offset == 1
    assert [h.base_offset for h in log.batch_headers(13)] == [11 + 3 * i for i in range(7)]
    assert list(log.batch_headers(32)) == []


# ---------------------------------------------------------------------------------------------- flushing

def test_flush_messages_fsyncs(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    log = make(tmp_path, flush_messages=5)
    log.append(batch(2))
    log.append(batch(2))
    assert calls == []
    log.append(batch(2))  # 6 records since the last flush
    assert calls
    n = len(calls)
    log.append(batch(4))
    assert len(calls) == n
    log.append(batch(1))
    assert len(calls) > n


def test_no_fsync_without_policy(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    log = make(tmp_path, segment_bytes=300, index_interval_bytes=100)
    fill(log, 30)
    log.read(0, 1 << 20)
    log.apply_retention()
    assert calls == []
    log.close()  # a clean shutdown makes everything durable before writing its marker
    assert calls


def test_flush_ms(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    clock = ManualClock(wall_ms=1_000_000)
    log = make(tmp_path, clock, flush_ms=1000)
    log.append(batch(1))
    assert calls == []
    assert not log.maybe_flush(clock.wall_ms() + 999)
    assert log.maybe_flush(clock.wall_ms() + 1000)
    assert calls
    clock.advance(ms=1000)
    n = len(calls)
    assert not log.maybe_flush()  # nothing new to flush
    clock.advance(ms=1000)
    log.append(batch(1))  # the last flush is old enough: this append flushes
    assert len(calls) > n
