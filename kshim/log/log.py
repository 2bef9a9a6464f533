"""A partition's log: a directory of segments holding RecordBatch v2 bytes as stored.

Layout (Kafka's): ``<20-digit base offset>.log`` / ``.index`` / ``.timeindex`` per segment, plus
``log-start-offset`` (checkpoint, written atomically on change). A log is opened without
recovery when its log dir's clean-shutdown marker named it with the active segment's base offset
and size it still has (``clean``: a broker's clean stop, kshim.replica.manager; a log written
after the marker is recovered), or its own ``.kshim-clean-shutdown`` is there (:meth:`Log.close`
alone, a replica move); that file is removed on open, so its absence means a crash.

Durability: appends go to the kernel with ``os.write`` right away (no user-space buffering), so a
killed broker loses nothing; fsync happens only per the flush policy (flush.messages / flush.ms),
on :meth:`Log.flush` and on :meth:`Log.close`.

Offsets only grow: a batch starts at or after the end of the previous one. They are contiguous
until the log cleaner (cleaner.py, compacted topics) removes whole batches, leaving gaps; recovery
treats a batch whose offsets go back as the end of valid data. Cleaned segments are swapped in
with Kafka's ``.cleaned`` -> ``.swap`` -> rename sequence (:meth:`Log.replace_segments`), and
the open completes or discards a half-done swap.

All public methods take the log's lock, so a Log may be shared with worker threads
(batch_headers() reads outside it: do not truncate or delete while iterating).

The Log's parts: this module holds its state, appends, reads, flushes, close and the cleaner's
swap; opening its directory (recovery at open, the file names) is kshim.log.loader, the checks
of the batches an append brings kshim.log.batches, the deletion of records (truncation,
retention, a reset) kshim.log.retention, its settings kshim.log.config. Their names the rest of
kshim uses (LogConfig, CLEAN_SHUTDOWN_FILE, ...) are importable from here.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from bisect import bisect_right
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal, Sequence, overload

from wire.primitives import FileRecords
from wire.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, CorruptRecordError, read_header, record_times

from .segment import IDX_ENTRY, INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, TIDX_ENTRY, TIMEINDEX_SUFFIX, Segment, scan
from kshim.clock import SYSTEM, Clock
from kshim.log.batches import follower_metas, leader_metas, unpack_header
from kshim.log.config import LogConfig
from kshim.log.files import fsync_dir, save_checkpoint
from kshim.log.loader import (
    CLEAN_SHUTDOWN_FILE, CLEANED_SUFFIX, SEGMENT_SUFFIXES, START_OFFSET_FILE, SWAP_SUFFIX, load_segments,
    read_start_offset,
)
from kshim.log.retention import SegmentDeletion
from kshim.log.summary import ActiveEnd, LogSummary
from kshim.log.txnindex import TXNINDEX_SUFFIX, AbortedTxn

from kshim.log.writer import Fenced

if TYPE_CHECKING:
    from kshim.log.writer import WriteJob

log = logging.getLogger("kshim.log")

RETIRED_GRACE_S = 60.0  # replaced segments' files stay open this long for lock-free readers
_SMALL_READ = 64 * 1024  # reads up to this size are cut in memory; larger ones are read exactly
# Fetch's file regions (read(regions=True)): a piece smaller than this is copied (a pread costs
# less than the dup, sendfile and close of a region), and at most MAX_REGION_FDS duplicated
# descriptors are held by responses in flight in the process (kshim.tuning sizes it from the
# open-file limit): past it reads copy, so a flood of fetches never runs the broker out of them
REGION_MIN_BYTES = 16 * 1024
MAX_REGION_FDS = 1024


class OffsetOutOfRange(Exception):
    """A read at an offset below the log start or above the log end."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


def _draw_jitter(config: LogConfig) -> int:
    """A segment's share of segment.jitter.ms, as Kafka's LogConfig.randomSegmentJitter."""
    if config.segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.roll_ms))


def _index_full(seg: Segment, index_bytes: int) -> bool:
    """Kafka rolls a segment whose offset or time index reached segment.index.bytes (rounded down to
    whole entries); kshim's index files have Kafka's entry sizes."""
    return len(seg.idx_off) >= index_bytes // IDX_ENTRY or len(seg.ts_ts) >= index_bytes // TIDX_ENTRY


class LogClosed(ValueError):
    """An append to a log that was closed (the replica was removed, or the broker is stopping)."""


class Log(SegmentDeletion):
    config: LogConfig
    log_start_offset: int   # first offset readable
    log_end_offset: int     # next offset to assign
    size_bytes: int         # total bytes over segments

    def __init__(self, directory: Path, config: LogConfig, *,
                 clock: Clock = SYSTEM, clean: ActiveEnd | None = None) -> None:
        self.directory = Path(directory)
        self.config = config
        self._clock = clock.wall_ms
        self._lock = threading.Lock()  # not reentrant: public methods never call each other under it
        # held (before _lock) by whoever changes the active segment: appends, the log writer's
        # whole write, truncation, rolls, close; readers take _lock alone
        self._write_lock = threading.Lock()
        self._dir = str(self.directory)
        self._segments: list[Segment] = []
        self._bases: list[int] = []      # segment base offsets, for bisect
        self._unflushed_records = 0
        self._dir_dirty = False          # segment files created/deleted since the last flush
        self._closed = False
        self._start_offset_unsaved = False
        self.truncations = 0             # bumped by truncate_to / reset: a clean planned before is void
        self._retired: list[tuple[float, Segment]] = []  # replaced by cleaned ones: (when, segment)
        self._roll_jitter_ms = _draw_jitter(config)  # the active segment's, drawn when it starts (Kafka's rollJitterMs)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.recovered = False           # the active segment was scanned whole at open (no clean stop)
        self._open(clean)
        self._last_flush_ms = self._clock()

    # ================================================================== open / recovery
    def _open(self, vouched: ActiveEnd | None) -> None:
        """The directory's segments (kshim.log.loader: recovery at open; ``vouched``: the active
        segment's end as the log dir's clean-shutdown marker recorded it), then the log start
        offset: the checkpointed one, unless the segments start later."""
        loaded = load_segments(self._dir, self.config.index_interval_bytes, vouched, self._clock)
        self.files_at_open = loaded.files_at_open
        self.recovered = loaded.recovered
        self._segments = loaded.segments
        self._bases = [seg.base_offset for seg in loaded.segments]
        if loaded.swapped:
            self._dir_dirty = True
        interval = self.config.index_interval_bytes
        checkpoint = read_start_offset(self._dir) if START_OFFSET_FILE in self.files_at_open else None
        if not self._segments:
            start = checkpoint or 0
            self._segments.append(Segment.create(self._dir, start, interval))
            self._bases.append(start)
            self._dir_dirty = True
        active = self._segments[-1]
        self.log_end_offset = active.next_offset
        active.txn_index.truncate_from(self.log_end_offset)  # aborts whose marker a crash tore off
        self.size_bytes = sum(s.size for s in self._segments)
        first = self._segments[0].base_offset
        self.log_start_offset = max(first, checkpoint if checkpoint is not None else first)
        if self.log_start_offset > self.log_end_offset:
            # the checkpoint is ahead of the data (lost tail): nothing left is readable
            self._reset_at(self.log_start_offset)
        else:
            self._delete_front(self._count_below(self.log_start_offset))
        if checkpoint is not None and checkpoint != self.log_start_offset:
            self._write_start_offset()  # none is needed while the log starts at its first segment

    # ================================================================== appends
    def append(self, batch: bytearray | memoryview, pos: int = 0, length: int | None = None) -> tuple[int, int]:
        """Leader append of the whole batches in ``batch[pos:pos+length]``: each batch's base offset
        is patched in place to the next offset (the caller already checked the CRC and set the
        leader epoch; the base offset is outside the CRC). Rolls first if the active segment would
        exceed segment.bytes or is older than segment.ms, writes, indexes, applies the flush
        policy. Returns (base offset of the first batch, last offset of the last)."""
        end = len(batch) if length is None else pos + length
        with self._write_lock, self._lock:
            if self._closed:
                raise LogClosed("log is closed")
            base = self.log_end_offset
            metas, last, records = leader_metas(batch, pos, end, base)
            data = batch if pos == 0 and end == len(batch) else memoryview(batch)[pos:end]
            self._append(data, metas, last, records)
            return base, last

    def append_with_offsets(self, data: bytes | memoryview) -> int:
        """Follower append: whole batches that already carry their offsets, the first starting at
        log_end_offset and each following on (ValueError otherwise); CRCs are checked since the
        bytes came over the network (CorruptRecordError). Returns the new log end offset."""
        with self._write_lock, self._lock:
            if self._closed:
                raise LogClosed("log is closed")
            metas, last, records = follower_metas(data, self.log_end_offset)
            if metas:
                self._append(memoryview(data), metas, last, records)
            return self.log_end_offset

    def write_jobs(self, jobs: Sequence[WriteJob]) -> None:
        """The log writer's thread (kshim.log.writer): append ``jobs`` in order, each getting its
        offsets or its error, as :meth:`append` / :meth:`append_with_offsets` one by one would.
        The jobs that fit in the active segment are written with one vectored write, outside the
        lock readers take: a fetch never waits for the disk, and sees a job only once it is
        written and accounted. A job that needs a roll first, or a split over segments, is
        appended as :meth:`append` does."""
        with self._write_lock:
            i, n = 0, len(jobs)
            while i < n:  # bounded: each round settles at least one job
                with self._lock:
                    if self._closed:
                        for job in jobs[i:]:
                            job.error = LogClosed("log is closed")
                        return
                    seg, planned, now = self._plan(jobs, i)
                    if not planned:
                        job = jobs[i]
                        i += 1
                        if job.error is None:
                            self._append_job(job)
                        continue
                try:
                    start = seg.write([job.data for job in planned])
                except OSError:
                    with self._lock:  # the file is as it was: each job on its own, as separate appends
                        for job in planned:
                            self._append_job(job)
                    i += len(planned)
                    continue
                with self._lock:
                    for job in planned:
                        nbytes = len(job.data)
                        seg.account(start, nbytes, job.metas, 0, now)
                        start += nbytes
                        self.log_end_offset = job.last + 1
                        self.size_bytes += nbytes
                        self._unflushed_records += job.records
                    self._apply_flush_policy(now)
                i += len(planned)

    def _plan(self, jobs: Sequence[WriteJob], i: int) -> tuple[Segment, list[WriteJob], int]:
        """Under the lock: the active segment (rolled first on segment.ms or a full index) and the
        jobs from ``jobs[i]`` on that fit in it, their offsets assigned. A job that is malformed or
        does not follow on is given its error if it is the first (else it is the next round's)."""
        now = self._clock()
        cfg = self.config
        limit = min(cfg.segment_bytes, INT32_MAX)
        seg = self._segments[-1]
        if seg.size and (seg.first_append_ms is not None
                         and now - seg.first_append_ms > cfg.roll_ms - self._roll_jitter_ms
                         or _index_full(seg, cfg.segment_index_bytes)):
            seg = self._roll()
        size = seg.size
        next_offset = self.log_end_offset
        planned: list[WriteJob] = []
        for k in range(i, len(jobs)):
            job = jobs[k]
            data = job.data
            try:
                if job.still_valid is not None and not job.still_valid():
                    raise Fenced("leadership changed before the write")
                if job.leader:
                    metas, last, records = leader_metas(data, 0, len(data), next_offset)
                else:
                    metas, last, records = follower_metas(data, next_offset)
                    if not metas:
                        raise ValueError("no record batch to append")
            except (CorruptRecordError, ValueError, Fenced) as e:
                if not planned:
                    job.error = e
                break
            nbytes = len(data)
            if not ((size + nbytes <= limit or (not size and len(metas) == 1))
                    and last - seg.base_offset <= INT32_MAX):
                break
            job.metas, job.last, job.records = metas, last, records
            job.base = next_offset if job.leader else unpack_header(data, 0)[0]
            planned.append(job)
            size += nbytes
            next_offset = last + 1
        return seg, planned, now

    def _append_job(self, job: WriteJob) -> None:
        """One job appended under the locks, as append / append_with_offsets would (rolling and
        splitting as needed); its outcome recorded on it."""
        try:
            if job.still_valid is not None and not job.still_valid():
                raise Fenced("leadership changed before the write")
            data = job.data
            base = self.log_end_offset
            if job.leader:
                metas, last, records = leader_metas(data, 0, len(data), base)
            else:
                metas, last, records = follower_metas(data, base)
                if not metas:
                    raise ValueError("no record batch to append")
                base = unpack_header(data, 0)[0]
            self._append(memoryview(data), metas, last, records)
            job.base, job.last, job.error = base, last, None
        except (OSError, CorruptRecordError, ValueError, Fenced) as e:
            job.error = e

    def _append(self, data, metas: list, last_offset: int, records: int) -> None:
        """Write batches (``metas``: position in data, size, last offset, max timestamp), rolling
        first when segment.ms has passed or the data would overflow the active segment; batches
        that do not all fit are split between segments (an empty segment takes a batch even if
        it alone is larger than segment.bytes)."""
        now = self._clock()
        cfg = self.config
        limit = min(cfg.segment_bytes, INT32_MAX)  # positions in the index are int32
        seg = self._segments[-1]
        if seg.size and (seg.first_append_ms is not None
                         and now - seg.first_append_ms > cfg.roll_ms - self._roll_jitter_ms
                         or _index_full(seg, cfg.segment_index_bytes)):
            seg = self._roll()
        nbytes = len(data)
        if ((seg.size + nbytes <= limit or (not seg.size and len(metas) == 1))
                and last_offset - seg.base_offset <= INT32_MAX):
            seg.append(data, metas, 0, now)  # all fits (or an empty segment takes one big batch)
            self.log_end_offset = last_offset + 1
            self.size_bytes += nbytes
        else:
            self._append_split(data, metas, now, limit)
        self._unflushed_records += records
        self._apply_flush_policy(now)

    def _apply_flush_policy(self, now: int) -> None:
        cfg = self.config
        if cfg.flush_messages is not None and self._unflushed_records >= cfg.flush_messages:
            self._flush(now)
        elif cfg.flush_ms is not None and now - self._last_flush_ms >= cfg.flush_ms:
            self._flush(now)

    def _append_split(self, data: memoryview, metas: list, now: int, limit: int) -> None:
        """Several batches that do not all fit: fill the active segment batch by batch, rolling
        whenever the next one would overflow it (size or int32 relative offsets)."""
        seg = self._segments[-1]
        i, n = 0, len(metas)
        while i < n:
            g0 = metas[i][0]
            room = limit - seg.size + g0
            j = i
            while j < n and metas[j][0] + metas[j][1] <= room and metas[j][2] - seg.base_offset <= INT32_MAX:
                j += 1
            if j == i:
                if seg.size:
                    seg = self._roll()
                    continue
                j = i + 1  # an empty segment takes a batch even if it alone is too large
            g1 = metas[j - 1][0] + metas[j - 1][1]
            seg.append(data[g0:g1], metas[i:j], g0, now)
            self.log_end_offset = metas[j - 1][2] + 1
            self.size_bytes += g1 - g0
            i = j

    def _roll(self) -> Segment:
        """Start a new active segment at the log end offset; the old one keeps serving reads."""
        self._segments[-1].finish()
        seg = Segment.create(self._dir, self.log_end_offset, self.config.index_interval_bytes)
        self._roll_jitter_ms = _draw_jitter(self.config)
        self._segments.append(seg)
        self._bases.append(seg.base_offset)
        self._dir_dirty = True
        return seg

    # ================================================================== reads
    @overload
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one: bool = True,
             regions: Literal[False] = False) -> bytes: ...

    @overload
    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool,
             regions: bool) -> bytes | FileRecords: ...

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one: bool = True,
             regions: bool = False) -> bytes | FileRecords:
        """Whole batches from the one containing ``offset``, across segments: stops before a batch
        that would exceed ``max_bytes`` (with ``min_one``, the first batch is returned whole even if
        larger, KIP-74) and before any batch whose last offset is >= ``max_offset`` (e.g. the high
        watermark; None = log end). Raises OffsetOutOfRange outside [log start, log end].
        With ``regions`` the same bytes come as FileRecords (file regions, read by the sender:
        os.sendfile on plaintext connections) where a piece is at least REGION_MIN_BYTES and the
        process holds fewer than MAX_REGION_FDS region descriptors; the caller closes them."""
        with self._lock:
            if self._closed:  # a replica removed under a fetch in flight: its files are closed
                return b""
            leo = self.log_end_offset
            if offset < self.log_start_offset or offset > leo:
                raise OffsetOutOfRange(offset, self.log_start_offset, leo)
            bound = leo if max_offset is None or max_offset > leo else max_offset
            if offset >= bound:
                return b""
            segs = self._segments
            i = bisect_right(self._bases, offset) - 1
            out: list[bytes | tuple[int, int, int]] = []
            budget = max_bytes

            def take(fd: int, n: int, pos: int) -> bytes | tuple[int, int, int]:
                # a duplicate descriptor: the region outlives the segment's pin (and its deletion)
                if regions and n >= REGION_MIN_BYTES and FileRecords.open_fds + len(out) < MAX_REGION_FDS:
                    return (os.dup(fd), pos, n)
                return os.pread(fd, n, pos)

            while i < len(segs):
                seg = segs[i]
                i += 1
                with seg.reading() as fd:  # pinned: its descriptor stays open meanwhile
                    pos = 0 if out else seg.position_of(offset)
                    if pos is None:
                        continue
                    more = bound >= seg.next_offset  # the bound lies beyond this segment
                    stop = seg.size if more else seg.position_of(bound)
                    if stop is None:
                        stop, more = seg.size, False
                    if stop <= pos:
                        break
                    if stop - pos <= budget:
                        out.append(take(fd, stop - pos, pos))
                        budget -= stop - pos
                        if more and budget > 0:
                            continue
                        break
                    if 0 < budget <= _SMALL_READ:  # one pread, find the cut in memory, slice
                        data = os.pread(fd, budget, pos)
                        cut = seg.last_boundary(pos, pos + budget, data)
                        if cut > pos:
                            out.append(data[:cut - pos])
                    else:  # find the cut with small header preads, then read exactly that
                        cut = seg.last_boundary(pos, pos + max(budget, 0))
                        if cut > pos:
                            out.append(take(fd, cut - pos, pos))
                    if cut == pos and not out and min_one:  # KIP-74: the first batch whole, so consumers progress
                        h = read_header(os.pread(fd, HEADER_SIZE, pos), 0)
                        out.append(take(fd, h[1] + LOG_OVERHEAD, pos))
                    break
            if regions and any(not isinstance(p, bytes) for p in out):
                return FileRecords(out)
            if len(out) == 1:
                return out[0]  # type: ignore[return-value]
            return b"".join(out)  # type: ignore[arg-type]

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start whose timestamp is
        >= ts; None if there is none. Segments are skipped by their max timestamp, the time index
        narrows the start, then batch headers; then one batch's records are walked, outside the
        lock (appends go on) and lazily (it stops at the record). Run it off the event loop."""
        from_offset = 0
        while True:  # bounded: each round starts past the batch the last one walked
            with self._lock:
                lso = self.log_start_offset
                candidate = self._batch_reaching(ts, max(from_offset, lso))
            if candidate is None:
                return None
            data, last = candidate
            for offset, timestamp in record_times(data):
                if timestamp >= ts and offset >= lso:
                    return offset, timestamp
            from_offset = last + 1

    def _batch_reaching(self, ts: int, from_offset: int) -> tuple[bytes, int] | None:
        """The first stored batch holding `from_offset` or later whose max timestamp is >= ts:
        (its bytes, its last offset)."""
        for seg in self._segments:
            if not seg.size or seg.max_ts < ts or seg.next_offset <= from_offset:
                continue
            pos = seg.position_of(max(seg.time_scan_start(ts), from_offset))
            if pos is None:
                continue
            with seg.pinned() as fd:
                for p, h, _ in scan(fd, pos, seg.size):
                    if h[8] >= ts and h[0] + h[6] >= from_offset:
                        return os.pread(fd, h[1] + LOG_OVERHEAD, p), h[0] + h[6]
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp, the earliest on ties
        (ListOffsets -3, KIP-734); None if the log holds no timestamped batch."""
        with self._lock:
            best: Segment | None = None
            for seg in self._segments:
                if seg.size and seg.next_offset > self.log_start_offset and (
                        best is None or seg.max_ts > best.max_ts):
                    best = seg
            if best is None or best.max_ts < 0:
                return None
            pos = best.position_of(best.max_ts_offset)
            if pos is None:
                return None
            h, data = best.batch_at(pos)
        for offset, timestamp in record_times(data):  # outside the lock, lazily
            if timestamp == h[8]:
                return timestamp, offset
        return h[8], h[0] + h[6]  # records disagree with the header: name the batch

    def batch_headers(self, from_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of the stored batches from the one containing ``from_offset`` (rebuilding
        producer state). Iterates a snapshot of the segments: do not truncate or delete
        segments while iterating."""
        with self._lock:
            i = max(bisect_right(self._bases, from_offset) - 1, 0)
            segs = self._segments[i:]
            starts: list[tuple[Segment, int | None]] = []
            for seg in segs:  # position of the first batch to report in each segment
                pos = seg.position_of(from_offset) if not starts or starts[-1][1] is None else 0
                starts.append((seg, pos))
        for seg, pos in starts:
            if pos is not None:
                with seg.pinned() as fd:
                    for _, h, _ in scan(fd, pos, seg.size, chunk=1 << 16):
                        yield h

    # ================================================================== aborted transactions
    def add_aborted(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its ABORT marker."""
        with self._lock:
            i = bisect_right(self._bases, entry.last_offset) - 1
            if i >= 0:
                self._segments[i].txn_index.append(entry)

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound): those a consumer
        reading that range must drop (a read_committed fetch's aborted_transactions)."""
        found: list[AbortedTxn] = []
        with self._lock:
            i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
            for seg in self._segments[i:]:
                if seg.txn_index.collect(fetch_offset, upper_bound, found):
                    break
        return found

    # ================================================================== log start offset
    # (the deletions of segments, here and by truncation and retention: kshim.log.retention)
    def advance_start_offset(self, offset: int) -> None:
        """DeleteRecords: make ``offset`` the first readable offset (persisted) and delete the
        segments entirely below it. Never moves backwards; beyond the log end is OffsetOutOfRange."""
        with self._write_lock, self._lock:
            if offset > self.log_end_offset:
                raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
            if offset <= self.log_start_offset:
                return
            self.log_start_offset = offset
            # segments first: on a full disk, deleting them is what makes room for the checkpoint
            self._delete_front(self._count_below(offset))
            self._write_start_offset()

    def _write_start_offset(self) -> None:
        # on a full disk the offset stays in memory and is saved at the next flush check
        self._start_offset_unsaved = not save_checkpoint(
            os.path.join(self._dir, START_OFFSET_FILE), f"{self.log_start_offset}\n", "log start offset")
        self._dir_dirty = True

    # ================================================================== config / flush / close
    def update_config(self, config: LogConfig) -> None:
        """New topic configs take effect from the next append / retention run."""
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.interval = config.index_interval_bytes

    def flush(self) -> None:
        """fsync every segment written since the last flush (and the directory after file
        creation or deletion)."""
        with self._lock:
            if not self._closed:
                self._flush(self._clock())

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """For a periodic timer: flush if flush.ms is set, data is unflushed and the last flush is
        at least flush.ms old. Returns whether it flushed."""
        with self._lock:
            cfg = self.config
            if self._start_offset_unsaved and not self._closed:
                self._write_start_offset()
            if self._closed or cfg.flush_ms is None:
                return False
            now = self._clock() if now_ms is None else now_ms
            if now - self._last_flush_ms < cfg.flush_ms:
                return False
            if not (self._unflushed_records or self._dir_dirty or any(s.dirty for s in self._segments)):
                return False
            self._flush(now)
            return True

    def _flush(self, now: int) -> None:
        for seg in self._segments:
            if seg.dirty:
                seg.fsync()
        if self._dir_dirty:
            fsync_dir(self._dir)
            self._dir_dirty = False
        self._unflushed_records = 0
        self._last_flush_ms = now

    def close(self, durable: bool = True) -> LogSummary | None:
        """Write the final time index entry, fsync everything, then write the clean-shutdown
        marker (after the data is durable, so the marker never vouches for lost bytes). With
        ``durable`` False neither: the caller syncs the file system and writes the log dir's
        marker (kshim.replica.manager). Returns the log's summary for that marker when the log
        may be marked clean (kshim.log.summary), else None."""
        with self._write_lock, self._lock:
            if self._closed:
                return None
            self._segments[-1].finish()
            if durable:
                self._flush(self._clock())
            active, first = self._segments[-1], self._segments[0]
            with active.reading() as fd:
                mtime_ns = os.fstat(fd).st_mtime_ns
            summary = LogSummary(active.base_offset, active.size, mtime_ns, self.log_start_offset, self.log_end_offset,
                                 self.size_bytes, first.next_offset, first.size,
                                 first.largest_timestamp() if first.size else -1)
            for seg in self._segments:
                seg.close()
            self._close_retired()
            self._closed = True
            if self._start_offset_unsaved:
                self._write_start_offset()
                if self._start_offset_unsaved:
                    return None  # no clean-shutdown marker: the next start recovers instead
            if not durable:
                return summary
            try:
                with open(os.path.join(self._dir, CLEAN_SHUTDOWN_FILE), "w"):
                    pass
            except OSError as e:  # a full disk: the next start recovers the log instead
                log.warning("%s: no clean-shutdown marker (%s); the next start recovers the log", self._dir, e)
                return None
            self._dir_dirty = True
            self._flush(self._clock())
            return summary

    def discard(self) -> None:
        """Close the files of a log that is being deleted: nothing is flushed or marked clean."""
        with self._write_lock, self._lock:
            if self._closed:
                return
            for seg in self._segments:
                seg.close()
            self._close_retired()
            self._closed = True

    # ================================================================== cleaning (kshim.log.cleaner)
    def cleanable_segments(self) -> tuple[list[Segment], int, int]:
        """The segments below the active one (a snapshot: their files stay readable even if they
        are replaced or deleted meanwhile), the active segment's base offset and the truncation
        count to hand back to :meth:`replace_segments`."""
        with self._lock:
            self._close_retired(time.monotonic() - RETIRED_GRACE_S)
            return list(self._segments[:-1]), self._segments[-1].base_offset, self.truncations

    def replace_segments(self, old: list[Segment], cleaned_stem: str, truncations: int) -> bool:
        """Swap in the cleaned segment written as ``<cleaned_stem>.log.cleaned`` (plus its index
        files, same suffix) for ``old``, contiguous segments of this log. Crash-safe as Kafka's
        replaceSegments: ``.cleaned`` -> ``.swap`` (the commit point), the old files go, ``.swap`` ->
        the live name; kshim.log.loader.finish_swaps redoes the rest after a crash. False (nothing
        done) if the log changed under the cleaner: ``old`` no longer all here, or a truncation."""
        with self._lock:
            if self._closed or truncations != self.truncations or not old:
                return False
            try:
                i = next(k for k, seg in enumerate(self._segments) if seg is old[0])
            except StopIteration:
                return False
            if (i + len(old) >= len(self._segments)
                    or any(a is not b for a, b in zip(self._segments[i:i + len(old)], old))):
                return False
            stem = old[0].stem
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX):  # log last: the commit
                if os.path.exists(cleaned_stem + suffix + CLEANED_SUFFIX):
                    os.replace(cleaned_stem + suffix + CLEANED_SUFFIX, stem + suffix + SWAP_SUFFIX)
            fsync_dir(self._dir)
            for seg in old:
                for suffix in SEGMENT_SUFFIXES:
                    try:
                        os.unlink(seg.stem + suffix)
                    except FileNotFoundError:
                        pass
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX):
                if os.path.exists(stem + suffix + SWAP_SUFFIX):
                    os.replace(stem + suffix + SWAP_SUFFIX, stem + suffix)
            fsync_dir(self._dir)
            new = Segment.open(self._dir, old[0].base_offset, self.config.index_interval_bytes)
            new.next_offset = self._segments[i + len(old)].base_offset
            new.open_inactive()
            self._segments[i:i + len(old)] = [new]
            self._bases[i:i + len(old)] = [new.base_offset]
            now = time.monotonic()
            self._retired.extend((now, seg) for seg in old)
            self.size_bytes = sum(s.size for s in self._segments)
            return True

    def _close_retired(self, before: float = float("inf")) -> None:
        """Close the files of segments replaced by a clean before ``before`` (monotonic): a reader
        that took a segment without the lock (batch_headers) finishes with its (unlinked) file
        first, as Kafka's file.delete.delay.ms lets readers finish."""
        keep = []
        for when, seg in self._retired:
            if when < before:
                if seg.is_open:
                    seg.close()
            else:
                keep.append((when, seg))
        self._retired = keep

    # ================================================================== introspection
    @property
    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def __repr__(self) -> str:
        return (f"Log({self._dir!r}, start={self.log_start_offset}, end={self.log_end_offset}, "
                f"segments={len(self._segments)}, bytes={self.size_bytes})")


__all__ = ["Log", "LogClosed", "LogConfig", "OffsetOutOfRange", "CLEAN_SHUTDOWN_FILE", "START_OFFSET_FILE",
           "INDEX_SUFFIX", "LOG_SUFFIX", "TIMEINDEX_SUFFIX"]
