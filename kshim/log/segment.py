"""One log segment: ``<base>.log`` plus its sparse ``.index`` and ``.timeindex``.

File formats follow Kafka:

* ``.log``: RecordBatch v2 bytes, back to back, exactly as stored.
* ``.index``: 8-byte entries ``relative last offset (int32), file position (int32)``,
  one every ``index_interval_bytes`` of log data (Kafka's ``offsetIndex.append(batch.lastOffset,
  position)``). An entry points at the start of the batch whose last offset it names.
* ``.timeindex``: 12-byte entries ``timestamp (int64), relative offset (int32)``: the max timestamp
  seen so far and the last offset of the batch carrying it, written with each offset-index entry
  when that max grew, and once more when the segment is rolled or closed.

Entries also live in memory (``array`` columns: compact and bisectable). Index entries are written
straight to the files with ``os.write`` (they sit in the page cache at once; no fsync here).

Not thread-safe on its own: :class:`kshim.log.log.Log` serialises access.
"""
from __future__ import annotations

import logging
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import pairwise
from contextlib import AbstractContextManager
from typing import Callable, Iterator, Sequence

from wire.crc import crc32c

from kshim.log.files import TMP_SUFFIX, write_in_place  # one suffix for every temporary file: the loader removes leftovers
from kshim.log.open_files import OPEN_SEGMENTS
from kshim.log.txnindex import TXNINDEX_SUFFIX, TxnIndex
from wire.records import (
    ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH, BatchHeader, CorruptRecordError,
    read_header,
)

log = logging.getLogger("kshim.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"

_IDX = struct.Struct(">ii")    # relative offset, position
_BASE_LEN = struct.Struct(">qi").unpack_from  # baseOffset, batchLength
_INT = struct.Struct(">i").unpack_from
LAST_OFFSET_DELTA_OFFSET = 23
_TIDX = struct.Struct(">qi")   # timestamp, relative offset
IDX_ENTRY = _IDX.size
TIDX_ENTRY = _TIDX.size
INT32_MAX = 2**31 - 1
_SWAP = sys.byteorder == "little"  # index files are big-endian
# O_APPEND: every write lands at the end even if someone got the position wrong.
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
IOV_MAX = 512            # buffers per writev, under the kernel's 1024
_RECENT_MAX = 256         # recently appended batch positions kept for tailing readers
SCAN_CHUNK = 16 * 1024    # header walks between index entries (a few KiB apart)
RECOVERY_CHUNK = 1 << 20  # full CRC-checking scans read big chunks


def stem_for(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}")


def write_all(fd: int, data: memoryview | bytes) -> None:
    n = os.write(fd, data)
    while n < len(data):  # short writes only happen on odd filesystems / signals
        n += os.write(fd, data[n:])


def scan(fd: int, start: int, end: int, *, bodies: bool = False,
         chunk: int = SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
    """Yield ``(position, header, batch bytes if bodies else None)`` for each whole batch in the
    file range [start, end), reading it in chunks with pread. Ends silently at a torn tail (header
    or batch running past ``end``); bad magic or length raise CorruptRecordError. The caller knows
    where valid data ends from the last batch yielded."""
    buf = b""
    bpos = start  # file position of buf[0]
    pos = start
    while end - pos >= HEADER_SIZE:
        off = pos - bpos
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, end - pos), pos)
            bpos, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        h = read_header(buf, off)
        size = h[1] + LOG_OVERHEAD
        if pos + size > end:
            return
        if bodies:
            if off + size > len(buf):
                buf = os.pread(fd, min(max(chunk, size), end - pos), pos)
                bpos, off = pos, 0
                if len(buf) < size:
                    return
            yield pos, h, memoryview(buf)[off:off + size]
        else:
            yield pos, h, None
        pos += size


def _read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


class Segment:
    __slots__ = ("base_offset", "stem", "_fd", "_pins", "size", "next_offset", "idx_off", "idx_pos",
                 "ts_ts", "ts_off", "loaded", "idx_fd", "tidx_fd", "bytes_since_index",
                 "max_ts", "max_ts_offset", "first_append_ms", "dirty", "interval", "_recent", "_txn",
                 "index_lost", "active")

    def __init__(self, stem: str, base_offset: int, fd: int, size: int, interval: int) -> None:
        self.base_offset = base_offset
        self.stem = stem
        # descriptors (kshim.log.open_files: a cache; every use pins the segment)
        self._fd = fd      # -1: not open (opened on use), -2: closed for good
        self._pins = 0     # uses under way: never evicted meanwhile
        self.size = size
        self.next_offset = base_offset       # one past the last offset stored here
        self.idx_off = array("i")            # relative last offsets of indexed batches
        self.idx_pos = array("i")            # their file positions
        self.ts_ts = array("q")              # time index: max timestamp so far
        self.ts_off = array("i")             # ... and the relative offset carrying it
        self.loaded = True                   # False: index files not read yet (older segments load lazily)
        # Index files take appends only while the segment is active, and their descriptors are
        # opened at the first entry (one per 4 KiB appended), then cached as the `.log`'s is
        self.active = False
        self.idx_fd: int | None = None
        self.tidx_fd: int | None = None
        self.index_lost = False              # an index write failed (disk full): files dropped, memory kept
        self.bytes_since_index = 0
        self.max_ts = -1                     # largest batch max timestamp in the segment
        self.max_ts_offset = -1              # last offset of the (first) batch carrying it
        self.first_append_ms: int | None = None  # wall time of the first append: segment.ms rolls
        self.dirty = False                   # written since the last fsync
        self.interval = interval             # index.interval.bytes (the Log updates it on config change)
        self._recent: dict[int, int] = {}    # base offset -> position of recently appended batches
        self._txn: TxnIndex | None = None    # aborted transactions, read on first use

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, directory: str, base_offset: int, interval: int) -> Segment:
        """A new, empty, active segment (any leftover files of that name are empty by
        construction: segments are only created at the log end offset)."""
        stem = stem_for(directory, base_offset)
        fd = os.open(stem + LOG_SUFFIX, _OPEN_FLAGS | os.O_TRUNC, 0o644)
        seg = cls(stem, base_offset, fd, 0, interval)
        OPEN_SEGMENTS.adopt(seg)
        for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
            os.close(os.open(stem + suffix, _OPEN_FLAGS | os.O_TRUNC, 0o644))
        seg.open_index_files()
        return seg

    @classmethod
    def open(cls, directory: str, base_offset: int, interval: int) -> Segment:
        """An existing segment, its `.log` not opened yet (older segments open it on use)."""
        stem = stem_for(directory, base_offset)
        return cls(stem, base_offset, -1, os.stat(stem + LOG_SUFFIX).st_size, interval)

    def pinned(self) -> AbstractContextManager[int]:
        """The `.log` descriptor (opened if the cache closed it), kept open until the block ends:
        every use of a segment's descriptors holds a pin (kshim.log.open_files)."""
        return OPEN_SEGMENTS.pinned(self)

    reading = pinned  # a read's pin: the active segment's descriptors are cached like the others'

    def open_index_files(self) -> None:
        """The segment becomes active: its index files take appends (opened on use)."""
        self.active = True

    def _index_fd(self) -> int:
        """(Under a pin.)"""
        return OPEN_SEGMENTS.index_descriptor(self, False)

    def _time_index_fd(self) -> int:
        """(Under a pin.)"""
        return OPEN_SEGMENTS.index_descriptor(self, True)

    def close_index_files(self) -> None:
        self.active = False
        if self.idx_fd is not None or self.tidx_fd is not None:
            OPEN_SEGMENTS.close_indexes(self)

    def finish(self) -> None:
        """Becoming inactive (roll) or closing: append the final time index entry, as Kafka does,
        so the segment's max timestamp can be read back from the file's last entry."""
        if self.max_ts > (self.ts_ts[-1] if self.ts_ts else -1):
            with self.pinned():
                self._add_time_entry(write=self.active)
            self.dirty = True  # the next flush must sync that entry
        self.close_index_files()
        self._recent.clear()

    def close(self) -> None:
        self.active = False
        OPEN_SEGMENTS.close(self)

    @property
    def is_open(self) -> bool:
        return self._fd != -2

    @property
    def txn_index(self) -> TxnIndex:
        if self._txn is None:
            self._txn = TxnIndex(self.stem)
        return self._txn

    def delete(self) -> None:
        self.close()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            try:
                os.unlink(self.stem + suffix)
            except FileNotFoundError:
                pass

    def fsync(self) -> None:
        """fsync the files. A descriptor the cache closed after the write is opened again: an
        fsync on any descriptor of a file flushes its dirty pages (Linux)."""
        with self.pinned() as log_fd:
            os.fsync(log_fd)
            self._fsync_indexes()
        self.dirty = False

    def _fsync_indexes(self) -> None:
        for fd, suffix in ((self.idx_fd, INDEX_SUFFIX), (self.tidx_fd, TIMEINDEX_SUFFIX)):
            if fd is not None:
                os.fsync(fd)
            else:  # closed (a roll, or the cache): the file may still hold unsynced entries
                try:
                    tmp = os.open(self.stem + suffix, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(tmp)
                finally:
                    os.close(tmp)

    def largest_timestamp(self) -> int:
        """For retention.ms: the max record timestamp, or the file's mtime when batches carry
        none (Kafka's LogSegment.largestTimestamp)."""
        if self.max_ts >= 0:
            return self.max_ts
        with self.reading() as fd:
            return os.fstat(fd).st_mtime_ns // 1_000_000

    # ------------------------------------------------------------------ appends
    def append(self, data: bytes | bytearray | memoryview, metas: list[tuple[int, int, int, int]], rel0: int,
               now_ms: int) -> None:
        """Write ``data`` (whole batches, offsets already assigned) at the end of the segment.
        ``metas`` holds ``(position, size, last offset, max timestamp)`` per batch, positions
        counted from ``rel0`` (data[0])."""
        start = self.write((data,))
        self.account(start, len(data), metas, rel0, now_ms)

    def write(self, datas: Sequence[bytes | bytearray | memoryview]) -> int:
        """Write ``datas`` back to back at the end of the file, in one vectored write (the log
        writer coalesces what is queued for this segment), without accounting them: the caller
        then calls :meth:`account` for each, in order. Returns the position written at. On failure
        the file is cut back to where it was: never a torn batch behind a failed write."""
        start = self.size
        fd = OPEN_SEGMENTS.pin(self)
        try:
            if len(datas) == 1:
                data = datas[0]
                n = os.write(fd, data)
                if n < len(data):  # short writes only happen on odd filesystems / signals
                    write_all(fd, memoryview(data)[n:])
            else:
                for i in range(0, len(datas), IOV_MAX):
                    chunk = datas[i:i + IOV_MAX]
                    n = os.writev(fd, chunk)
                    total = sum(len(d) for d in chunk)
                    if n < total:
                        write_all(fd, memoryview(b"".join(chunk))[n:])
        except BaseException:
            os.ftruncate(fd, start)
            raise
        finally:
            OPEN_SEGMENTS.unpin(self)
        return start

    def account(self, start: int, nbytes: int, metas: list[tuple[int, int, int, int]], rel0: int,
                now_ms: int) -> None:
        """Take in ``nbytes`` written at ``start`` by :meth:`write`: size, indexes, tail state."""
        if start == 0:
            self.first_append_ms = now_ms
        self.size = start + nbytes
        self.dirty = True
        recent = self._recent
        start -= rel0
        # one pin for the index entries of the whole write (one per index.interval.bytes), taken
        # when these bytes can reach the interval (no entry is written otherwise)
        pinned = self.bytes_since_index + nbytes > self.interval and self.active and not self.index_lost
        if pinned:
            OPEN_SEGMENTS.pin(self)
        try:
            for rel, size, last, max_ts in metas:
                # _track() inlined: this runs once per appended batch
                if max_ts > self.max_ts:
                    self.max_ts = max_ts
                    self.max_ts_offset = last
                if self.bytes_since_index > self.interval:
                    self._index_entry(start + rel, last, True)
                self.bytes_since_index += size
                recent[self.next_offset] = start + rel  # this batch's base offset -> its position
                self.next_offset = last + 1
        finally:
            if pinned:
                OPEN_SEGMENTS.unpin(self)
        if len(recent) > 2 * _RECENT_MAX:  # amortised eviction: keep the newest half
            self._recent = dict(list(recent.items())[-_RECENT_MAX:])

    def _track(self, pos: int, size: int, last: int, max_ts: int, interval: int, write: bool) -> None:
        """Account one batch as Kafka's LogSegment.append does: max timestamp first, then an index
        entry for this batch if more than ``interval`` bytes went by since the last one."""
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.max_ts_offset = last
        if self.bytes_since_index > interval:
            self._index_entry(pos, last, write)
        self.bytes_since_index += size

    def _index_entry(self, pos: int, last: int, write: bool) -> None:
        """Offset index entry for the batch at ``pos``, plus a time index entry if the max
        timestamp grew since the last one."""
        rel = last - self.base_offset
        self.idx_off.append(rel)
        self.idx_pos.append(pos)
        if write and self.active:
            self._write_index(self._index_fd, _IDX.pack(rel, pos))
        if self.max_ts > (self.ts_ts[-1] if self.ts_ts else -1):
            self._add_time_entry(write)
        self.bytes_since_index = 0

    def _add_time_entry(self, write: bool) -> None:
        rel = self.max_ts_offset - self.base_offset
        self.ts_ts.append(self.max_ts)
        self.ts_off.append(rel)
        if write and self.active:
            self._write_index(self._time_index_fd, _TIDX.pack(self.max_ts, rel))

    def _write_index(self, fd: Callable[[], int], entry: bytes) -> None:
        """Append an index entry (the caller holds a pin). The indexes derive from the log, so a
        failed write (a full disk) must not fail an append whose records are already written: the index files are dropped,
        the next open rebuilds them from the log, and lookups use the entries in memory."""
        if self.index_lost:
            return
        try:
            write_all(fd(), entry)
        except OSError as e:
            self.index_lost = True
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                try:
                    os.unlink(self.stem + suffix)
                except OSError:
                    pass
            log.warning("index of segment %s dropped after a failed write (%s): rebuilt from the log at the next "
                        "start", self.stem, e)

    # ------------------------------------------------------------------ lookups
    def position_of(self, offset: int) -> int | None:
        """File position of the batch containing ``offset`` (the first whose last offset is
        >= offset), or None if the segment ends before it."""
        if offset >= self.next_offset:
            return None
        pos = self._recent.get(offset)
        if pos is not None:
            return pos
        if not self.loaded:
            self.ensure_loaded()
        rel = offset - self.base_offset
        j = bisect_right(self.idx_off, rel) - 1  # last indexed batch ending at or before offset
        if j >= 0:
            pos = self.idx_pos[j]
            if self.idx_off[j] == rel:
                return pos
        else:
            pos = 0
        # walk the headers between index entries (a few KiB): only base offset, length and
        # lastOffsetDelta are needed, so no full header parse
        end = self.size
        buf = b""
        bpos = pos
        with self.reading() as fd:
            while end - pos >= HEADER_SIZE:
                off = pos - bpos
                if off + HEADER_SIZE > len(buf):
                    buf = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
                    bpos, off = pos, 0
                    if len(buf) < HEADER_SIZE:
                        break
                base, length = _BASE_LEN(buf, off)
                if base + _INT(buf, off + LAST_OFFSET_DELTA_OFFSET)[0] >= offset:
                    return pos
                if length < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"batch length {length} too small at {pos} in {self.stem}")
                pos += length + LOG_OVERHEAD
        return None

    def last_boundary(self, start: int, limit: int, data: bytes | None = None) -> int:
        """The last batch boundary in [start, limit]: batches from ``start`` up to it fit within
        ``limit``. Walks headers from the closest index entry at or before ``limit``, in ``data``
        (the file bytes from ``start``) if given, else with small preads."""
        limit = min(limit, self.size)
        if not self.loaded:
            self.ensure_loaded()
        j = bisect_right(self.idx_pos, limit) - 1
        cut = self.idx_pos[j] if j >= 0 and self.idx_pos[j] > start else start
        if data is not None:
            p, n = cut - start, min(limit - start, len(data))
            while p + LOG_OVERHEAD <= n:
                length = _BASE_LEN(data, p)[1]
                if length < MIN_BATCH_LENGTH or p + length + LOG_OVERHEAD > n:
                    break
                p += length + LOG_OVERHEAD
            return start + p
        with self.pinned() as fd:
            for p, h, _ in scan(fd, cut, limit, chunk=min(SCAN_CHUNK, max(limit - cut, 1))):
                cut = p + h[1] + LOG_OVERHEAD
        return cut

    def time_scan_start(self, ts: int) -> int:
        """An offset to start looking for the first timestamp >= ts: every batch up to the last
        time index entry below ts has smaller timestamps."""
        if not self.loaded:
            self.ensure_loaded()
        j = bisect_left(self.ts_ts, ts) - 1
        return self.base_offset + self.ts_off[j] if j >= 0 else self.base_offset

    def batch_at(self, pos: int) -> tuple[BatchHeader, bytes]:
        with self.reading() as fd:
            head = os.pread(fd, HEADER_SIZE, pos)
            h = read_header(head, 0)
            return h, os.pread(fd, h[1] + LOG_OVERHEAD, pos)

    # ------------------------------------------------------------------ indexes on open
    def index_sizes_sane(self) -> bool:
        isz = _file_size(self.stem + INDEX_SUFFIX)
        tsz = _file_size(self.stem + TIMEINDEX_SUFFIX)
        if isz is None or tsz is None or isz % IDX_ENTRY or tsz % TIDX_ENTRY:
            return False
        # an entry per index interval at most, so never more entries than batches
        return isz // IDX_ENTRY <= self.size // HEADER_SIZE

    def open_inactive(self) -> None:
        """An older segment (``next_offset`` already set): trust index files of sane sizes and load
        them lazily; only the time index's last entry is read now (max timestamp for retention)."""
        if not self.index_sizes_sane():
            self.rebuild(validate=False)
            return
        self.loaded = False
        tsz = os.stat(self.stem + TIMEINDEX_SUFFIX).st_size
        if tsz:
            with open(self.stem + TIMEINDEX_SUFFIX, "rb") as f:
                f.seek(tsz - TIDX_ENTRY)
                ts, rel = _TIDX.unpack(f.read(TIDX_ENTRY))
            if 0 <= rel < self.next_offset - self.base_offset:
                self.max_ts, self.max_ts_offset = ts, self.base_offset + rel
            else:
                self.rebuild(validate=False)

    def ensure_loaded(self) -> None:
        if not self.loaded and not self._load_indexes(complete=True):
            self.rebuild(validate=False)

    def _load_indexes(self, complete: bool) -> bool:
        """Read both index files into memory; False if missing or inconsistent. ``complete``: the
        segment's ``next_offset`` is known (older segments), so offsets can be range-checked."""
        idata = _read_file(self.stem + INDEX_SUFFIX)
        tdata = _read_file(self.stem + TIMEINDEX_SUFFIX)
        if idata is None or tdata is None or len(idata) % IDX_ENTRY or len(tdata) % TIDX_ENTRY:
            return False
        both = array("i")
        both.frombytes(idata)
        if _SWAP:
            both.byteswap()
        offs, poss = both[0::2], both[1::2]
        tss = array("q")
        toffs = array("i")
        for ts, rel in _TIDX.iter_unpack(tdata):
            tss.append(ts)
            toffs.append(rel)
        limit = self.next_offset - self.base_offset if complete else INT32_MAX
        if offs and not (0 <= offs[0] and offs[-1] < limit and 0 <= poss[0] and poss[-1] < self.size
                         and all(a < b for a, b in pairwise(offs))
                         and all(a < b for a, b in pairwise(poss))):
            return False
        if toffs and not (0 <= toffs[0] and toffs[-1] < limit
                          and all(a <= b for a, b in pairwise(toffs))
                          and all(a <= b for a, b in pairwise(tss))):
            return False
        self.idx_off, self.idx_pos, self.ts_ts, self.ts_off = offs, poss, tss, toffs
        self.loaded = True
        return True

    def _reset_tail_state(self) -> None:
        """Tail state as implied by the kept index entries (replay continues from the last one)."""
        self.bytes_since_index = 0
        if self.ts_ts:
            self.max_ts, self.max_ts_offset = self.ts_ts[-1], self.base_offset + self.ts_off[-1]
        else:
            self.max_ts, self.max_ts_offset = -1, -1
        self.next_offset = self.base_offset
        self._recent.clear()

    def _replay(self, from_pos: int, *, validate: bool, write: bool) -> int:
        """Re-derive indexes and tail state from the batches at [from_pos, size), as appending them
        would. ``from_pos`` is 0 or the position of the last kept index entry. Stops at the first
        torn or malformed batch, offsets that do not follow on, or (validate) a CRC mismatch.
        Returns where valid data ends."""
        expected = self.base_offset if from_pos == 0 else None
        end = from_pos
        interval = self.interval
        try:
            with self.pinned() as fd:
                for pos, h, body in scan(fd, from_pos, self.size, bodies=validate,
                                         chunk=RECOVERY_CHUNK if validate else SCAN_CHUNK):
                    last = h[0] + h[6]
                    if h[6] < 0 or (expected is not None and h[0] < expected):
                        break  # offsets go back: not ours (gaps are fine: compaction removes whole batches)
                    if expected is None and last - self.base_offset != self.idx_off[-1]:
                        break  # the last index entry does not name this batch: index is stale
                    if validate and body is not None and crc32c(body[ATTRIBUTES_OFFSET:]) != h[4]:
                        break
                    self._track(pos, h[1] + LOG_OVERHEAD, last, h[8], interval, write)
                    expected = last + 1
                    end = pos + h[1] + LOG_OVERHEAD
        except CorruptRecordError:
            pass
        if expected is not None:
            self.next_offset = expected
        return end

    def _write_index_files(self, extra_suffix: str = "", if_changed: bool = False) -> None:
        """Replace both index files atomically with the in-memory entries (``extra_suffix``: write
        ``<stem>.index<extra_suffix>`` instead, the cleaner's ``.cleaned`` files). ``if_changed``
        (a rebuild): a file already holding exactly those entries is left alone and a differing
        one is overwritten in place (recovery after a kill -9 of thousands of small logs: two reads
        and at most two small writes each, no replacement)."""
        both = array("i", bytes(8 * len(self.idx_off)))
        both[0::2] = self.idx_off
        both[1::2] = self.idx_pos
        if _SWAP:
            both.byteswap()
        for suffix, data in ((INDEX_SUFFIX, both.tobytes()),
                             (TIMEINDEX_SUFFIX, b"".join(map(_TIDX.pack, self.ts_ts, self.ts_off)))):
            if if_changed:  # a rebuild: only a differing file is written, and in place (~80 us,
                # not a replacement's ~1.5 ms: kshim.log.files.write_in_place); a file torn by a
                # crash meanwhile fails its sanity checks at the next open and is rebuilt again
                if _read_file(self.stem + suffix + extra_suffix) != data:
                    write_in_place(self.stem + suffix + extra_suffix, data)
                continue
            tmp = self.stem + suffix + extra_suffix + TMP_SUFFIX
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.stem + suffix + extra_suffix)

    def rebuild(self, *, validate: bool) -> None:
        """Rebuild both indexes from the log file. With ``validate`` (recovery of the active
        segment) CRCs are checked and the file is truncated after the last good batch."""
        was_active = self.active
        self.close_index_files()
        self.idx_off, self.idx_pos, self.ts_ts, self.ts_off = array("i"), array("i"), array("q"), array("i")
        self.loaded = True
        keep_next = self.next_offset
        self._reset_tail_state()
        end = self._replay(0, validate=validate, write=False)
        if validate:
            if end < self.size:
                with self.pinned() as fd:
                    os.ftruncate(fd, end)
                self.size = end
            self._keep_final_time_entry()
        else:
            self.next_offset = max(keep_next, self.next_offset)  # older segment: next base is authoritative
            if self.max_ts > (self.ts_ts[-1] if self.ts_ts else -1):
                self._add_time_entry(write=False)  # the final entry a roll writes
        self._write_index_files(if_changed=True)
        if was_active:
            self.open_index_files()

    def _keep_final_time_entry(self) -> None:
        """An active segment rebuilt after a crash keeps the final time-index entry a clean close
        (or an earlier one) wrote, when the file holds the rebuilt entries and then exactly that
        one: the state a clean open would load. Otherwise rewriting the file would drop it, and
        the rewrite of a file shrunk to nothing (a log of one batch) costs ~0.7 ms on ext4, which
        frees its block, where the whole recovery of such a log is about a millisecond."""
        if self.max_ts <= (self.ts_ts[-1] if self.ts_ts else -1):
            return
        held = _read_file(self.stem + TIMEINDEX_SUFFIX)
        if held is not None and len(held) == TIDX_ENTRY * (len(self.ts_ts) + 1) and \
                _TIDX.unpack_from(held, len(held) - TIDX_ENTRY) == (self.max_ts, self.max_ts_offset - self.base_offset) \
                and held[:-TIDX_ENTRY] == b"".join(map(_TIDX.pack, self.ts_ts, self.ts_off)):
            self._add_time_entry(write=False)

    def open_active(self, clean: bool) -> bool:
        """Open the last segment. After a clean shutdown load its indexes and replay only the tail
        after the last index entry (CRC-checked, cheap); otherwise, or if anything is off, scan the
        whole segment, truncate at the first bad batch and rebuild the indexes. Returns whether the
        clean path was taken (False: recovered)."""
        with self.pinned():  # one open of the `.log` for the whole recovery
            return self._open_active(clean)

    def _open_active(self, clean: bool) -> bool:
        if clean and self.index_sizes_sane() and self._load_indexes(complete=False):
            self._reset_tail_state()
            from_pos = self.idx_pos[-1] if self.idx_pos else 0
            self.open_index_files()
            end = self._replay(from_pos, validate=True, write=True)
            if end == self.size and (not self.ts_off or self.ts_off[-1] < self.next_offset - self.base_offset):
                self._init_first_append()
                return True
            self.close_index_files()
        self.rebuild(validate=True)
        self.open_index_files()
        self._init_first_append()
        return False

    def _init_first_append(self) -> None:
        # The first append's wall time is not stored; like Kafka on reload, use the first batch's
        # max timestamp (None: the Log substitutes its clock).
        self.first_append_ms = None
        if self.size >= HEADER_SIZE:
            with self.pinned() as fd:
                ts = read_header(os.pread(fd, HEADER_SIZE, 0), 0)[8]
            if ts >= 0:
                self.first_append_ms = ts

    # ------------------------------------------------------------------ truncation
    def truncate(self, pos: int, new_next: int) -> None:
        """Drop the batches at ``pos`` and after (``new_next``: the base offset of the batch at
        ``pos``); trims the indexes and re-derives the tail state. Leaves the segment active."""
        if not self.loaded:
            self.ensure_loaded()
        self.open_index_files()
        with self.pinned() as fd:
            os.ftruncate(fd, pos)
        self.size = pos
        self.dirty = True
        k = bisect_left(self.idx_pos, pos)
        del self.idx_off[k:]
        del self.idx_pos[k:]
        # Time entries naming a kept batch stay valid even if written later: their max is carried
        # by a kept batch, so it is still the max of what is left (Kafka's TimeIndex.truncateTo).
        kt = bisect_left(self.ts_off, new_next - self.base_offset)
        del self.ts_ts[kt:]
        del self.ts_off[kt:]
        with self.pinned():
            os.ftruncate(self._index_fd(), len(self.idx_off) * IDX_ENTRY)
            os.ftruncate(self._time_index_fd(), len(self.ts_off) * TIDX_ENTRY)
        self._reset_tail_state()
        self._replay(self.idx_pos[-1] if self.idx_pos else 0, validate=False, write=True)
        self.txn_index.truncate_from(self.next_offset)
        if pos == 0:
            self.first_append_ms = None
