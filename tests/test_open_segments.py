"""Segments open their files on use and an LRU bound on descriptors closes them
(kshim/log/open_files.py), the active segments' as the older ones': a log with many segments keeps
at most the bound open, reads stay right across evictions, a use in progress keeps its segment,
and an evicted descriptor is closed at once."""
from __future__ import annotations

import os

import pytest

from kshim.log import open_files
from kshim.log.log import Log, LogConfig
from kshim.log.open_files import OpenSegments
from wire.records import decode_all, encode_batch

SEGMENTS = 30


@pytest.fixture
def bound(monkeypatch):
    """A fresh process-wide bound of 4 older segments."""
    fresh = OpenSegments(4)
    monkeypatch.setattr(open_files, "OPEN_SEGMENTS", fresh)
    from kshim.log import segment

    monkeypatch.setattr(segment, "OPEN_SEGMENTS", fresh)
    return fresh


def fill(path, n: int = SEGMENTS) -> Log:
    log = Log(path, LogConfig(segment_bytes=200))
    for i in range(n):
        log.append(bytearray(encode_batch([(None, b"value-%03d" % i + b"x" * 100)])))
    return log


def values(log: Log, start: int = 0) -> list[bytes]:
    return [r.value[:9] for r in decode_all(log.read(start, 1 << 20))]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_reads_across_many_segments_keep_at_most_the_bound_open(tmp_path, bound):
    log = fill(tmp_path / "t-0")
    try:
        assert len(log.segment_base_offsets) == SEGMENTS
        assert bound.open_count() <= 4
        for start in range(SEGMENTS):  # each read opens a segment far back, evicting another
            assert values(log, start)[0] == b"value-%03d" % start
            assert bound.open_count() <= 4
        assert values(log) == [b"value-%03d" % i for i in range(SEGMENTS)]
        assert bound.evicted >= SEGMENTS - 4
    finally:
        log.close()
    assert bound.open_count() == 0


def test_a_reopened_log_opens_no_older_segment_until_it_is_read(tmp_path, bound):
    fill(tmp_path / "t-0").close()  # (its close reopened evicted segments to fsync them)
    before, opened = open_fds(), bound.opened
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    try:
        assert bound.opened - opened <= 1 and bound.open_count() == 1  # only the active segment's log
        assert open_fds() - before <= 1
        assert [r.value[:9] for r in decode_all(log.read(3, 150))] == [b"value-003"]  # one batch
        assert bound.open_count() == 2
    finally:
        log.close()


def test_a_scan_keeps_its_segment_open_while_others_are_evicted(tmp_path, bound):
    log = fill(tmp_path / "t-0")
    try:
        headers = log.batch_headers(0)
        first = [next(headers).base_offset for _ in range(3)]
        for start in range(5, SEGMENTS):  # evict everything that is not pinned
            values(log, start)
        rest = [h.base_offset for h in headers]
        assert first + rest == list(range(SEGMENTS))
    finally:
        log.close()


def test_an_evicted_descriptor_is_closed_at_once(tmp_path, bound):
    log = fill(tmp_path / "t-0")
    try:
        values(log, 0)
        before = open_fds()
        for start in range(SEGMENTS):
            values(log, start)
        assert open_fds() <= before + 1  # the bound holds; nothing waits to be closed
        assert values(log) == [b"value-%03d" % i for i in range(SEGMENTS)]
    finally:
        log.close()


def test_a_truncation_into_an_older_segment_makes_it_active_again(tmp_path, bound):
    log = fill(tmp_path / "t-0")
    try:
        for start in range(10, SEGMENTS):
            values(log, start)  # segment 2 is evicted by now
        log.truncate_to(3)
        assert log.log_end_offset == 3 and values(log) == [b"value-000", b"value-001", b"value-002"]
        log.append(bytearray(encode_batch([(None, b"after-003")])))
        assert values(log, 3) == [b"after-003"]
    finally:
        log.close()
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    try:
        assert values(log) == [b"value-000", b"value-001", b"value-002", b"after-003"]
    finally:
        log.close()


def test_an_active_segment_opens_its_index_files_at_its_first_index_entry(tmp_path):
    """One descriptor per partition until it took an index entry (index.interval.bytes appended):
    10,000 mostly idle partitions fit in a 20,000-descriptor limit. Entries written after that
    land in the files, and a restart after a clean close trusts them."""
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    seg = log._segments[-1]
    log.append(bytearray(encode_batch([(None, b"small")])))
    assert seg.active and seg.idx_fd is None and seg.tidx_fd is None
    for i in range(10):
        log.append(bytearray(encode_batch([(None, b"v%d" % i + b"x" * 100)])))
    assert seg.idx_fd is not None and seg.tidx_fd is not None
    entries = len(seg.idx_off)
    assert entries and os.path.getsize(seg.stem + ".index") == 8 * entries
    log.close()
    log = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=300))
    try:
        assert not log.recovered and len(log._segments[-1].idx_off) == entries
        assert [r.value[:2] for r in decode_all(log.read(1, 1 << 20))] == [b"v%d" % i for i in range(10)]
    finally:
        log.close()


def test_threads_opening_one_segment_at_once_share_one_descriptor(tmp_path, bound, monkeypatch):
    """The open happens outside the bound's lock (replicas open in 8 threads at a start): two
    threads that find the same segment without a descriptor end with one, the other closed."""
    import threading
    log = fill(tmp_path / "t-0", 3)
    try:
        seg = log._segments[0]
        bound.drop_unpinned()
        real_open = os.open
        both_opening = threading.Barrier(2, timeout=10)

        def slow_open(*args, **kwargs):  # each thread opens before the other stores its descriptor
            fd = real_open(*args, **kwargs)
            both_opening.wait()
            return fd
        monkeypatch.setattr(open_files.os, "open", slow_open)
        before, got = open_fds(), []
        threads = [threading.Thread(target=lambda: got.append(bound.pin(seg))) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        monkeypatch.setattr(open_files.os, "open", real_open)
        assert len(got) == 2 and got[0] == got[1] == seg._fd >= 0
        assert open_fds() == before + 1  # the second descriptor was closed
        bound.unpin(seg)
        bound.unpin(seg)
        assert values(log)[0] == b"value-000"
    finally:
        log.close()


LOGS = 40


def test_active_segments_share_the_bound_with_the_older_ones(tmp_path, bound):
    """Far more partitions than descriptors: appends (with index entries), reads, flushes and a
    clean reopen of every log stay right while at most the bound is open between uses."""
    bound.configure(8)
    config = LogConfig(index_interval_bytes=150, flush_messages=3)
    logs = [Log(tmp_path / f"t-{i}", config) for i in range(LOGS)]
    base_fds = open_fds()
    try:
        for round_ in range(6):
            for i, log in enumerate(logs):
                log.append(bytearray(encode_batch([(None, b"v%02d-%d" % (i, round_) + b"x" * 100)])))
                assert bound.open_count() <= 8
        assert open_fds() <= base_fds + 8
        assert bound.evicted >= LOGS
        for i, log in enumerate(logs):
            assert [r.value[:5] for r in decode_all(log.read(0, 1 << 20))] == [b"v%02d-%d" % (i, r) for r in range(6)]
            assert len(log._segments[-1].idx_off) >= 2  # index entries were written
    finally:
        for log in logs:
            log.close()
    assert bound.open_count() == 0
    for i in range(LOGS):
        log = Log(tmp_path / f"t-{i}", config)
        try:
            assert not log.recovered  # the index files held every entry: the clean path was taken
            assert len(decode_all(log.read(0, 1 << 20))) == 6
        finally:
            log.close()


def test_a_pinned_active_segment_keeps_its_descriptor(tmp_path, bound):
    logs = [Log(tmp_path / f"t-{i}", LogConfig()) for i in range(10)]
    try:
        seg = logs[0]._segments[-1]
        with seg.pinned() as fd:
            for log in logs[1:]:  # each opens its active segment, evicting the least recent unpinned
                log.append(bytearray(encode_batch([(None, b"v")])))
            assert seg._fd == fd and os.fstat(fd).st_ino == os.stat(seg.stem + ".log").st_ino
        logs[0].append(bytearray(encode_batch([(None, b"after")])))
        assert [r.value for r in decode_all(logs[0].read(0, 1 << 20))] == [b"after"]
    finally:
        for log in logs:
            log.close()


def test_a_flush_after_an_eviction_fsyncs_the_file_it_wrote(tmp_path, bound, monkeypatch):
    """The write went through a descriptor the cache closed since: the flush opens the file
    again and fsyncs it (flush.messages / flush.ms must never skip a file)."""
    from kshim.log import segment
    logs = [Log(tmp_path / f"t-{i}", LogConfig()) for i in range(10)]
    try:
        logs[0].append(bytearray(encode_batch([(None, b"v" * 100)])))
        seg = logs[0]._segments[-1]
        for log in logs[1:]:
            log.append(bytearray(encode_batch([(None, b"v")])))
        assert seg._fd == -1  # evicted
        synced: list[int] = []
        real_fsync = os.fsync
        monkeypatch.setattr(segment.os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real_fsync(fd)))
        logs[0].flush()
        assert os.stat(seg.stem + ".log").st_ino in synced
    finally:
        for log in logs:
            log.close()


def test_every_use_of_a_segment_descriptor_holds_a_pin(tmp_path, bound, monkeypatch):
    """Writes, index entries, fsyncs, truncations and reads all run under a pin: a descriptor the
    cache may close is never used bare."""
    from kshim.log import segment
    bound.configure(6)
    logs = [Log(tmp_path / f"t-{i}", LogConfig(index_interval_bytes=150, flush_messages=2, segment_bytes=900))
            for i in range(8)]
    bare: list[str] = []

    def checked(m, name: str) -> None:
        real = getattr(os, name)

        def call(fd, *args):
            owner = [s for log in logs for s in log._segments if fd in (s._fd, s.idx_fd, s.tidx_fd)]
            if owner and not all(s._pins for s in owner):
                bare.append(f"{name} on {owner[0].stem}")
            return real(fd, *args)
        m.setattr(segment.os, name, call)
    try:
        with monkeypatch.context() as m:
            for name in ("write", "writev", "fsync", "ftruncate", "pread", "fstat"):
                checked(m, name)
            for round_ in range(8):
                for i, log in enumerate(logs):
                    log.append(bytearray(encode_batch([(None, b"v%d-%d" % (i, round_) + b"x" * 100)])))
            for log in logs:
                assert len(decode_all(log.read(0, 1 << 20))) == 8
                log.truncate_to(5)
                log.flush()
        assert not bare, bare[:5]
    finally:
        for log in logs:
            log.close()
