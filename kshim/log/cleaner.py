"""Log compaction (Kafka's LogCleaner / Cleaner / OffsetMap / LogCleanerManager rules) for one log.

A clean of a log, given its first dirty offset (the cleaner checkpoint) and its first uncleanable
offset (min of the active segment's base, the last stable offset, and the first segment younger
than min.compaction.lag.ms):

1. **Offset map**: the dirty batches [first dirty, uncleanable) are read and, for every key, the
   offset of its last record is noted (a dict bounded by the dedupe budget, counted as key bytes
   plus a fixed overhead per entry; when it is full the clean stops there, as Kafka's does).
2. **Groups**: the segments from the log start up to where the map ends are grouped so that a
   group fits one segment (segment.bytes, index size, int32 relative offsets), as
   Kafka's groupSegmentsBySize.
3. **Copy**: each group is written to ``<base>.log.cleaned`` keeping a record only if no later
   record of its key is in the map, and (tombstones) if its batch has no delete horizon yet or
   the horizon is still ahead. The first clean of a batch holding a tombstone stamps it with a
   delete horizon (now + delete.retention.ms; KIP-534: base timestamp + attribute bit 6).
   Batches whose records all stay are copied byte for byte; others are rebuilt keeping base
   offset, last offset delta, producer id/epoch/base sequence, leader epoch, codec, and each kept
   record's bytes (only its timestamp delta changes when the base timestamp does); the CRC is
   computed again. A batch that loses every record goes, except (Kafka's rule) the last data
   batch of a producer still in the producer state and the batch ending the cleaned range, kept
   as an empty batch so producer state and the range end survive.
4. **Swap**: the group's files are swapped in by :meth:`Log.replace_segments` (``.cleaned`` ->
   ``.swap`` -> live names, completed or discarded at the next open).

Transactions (Kafka's CleanedTransactionMetadata): the aborted transactions of the range (the
transaction index) are tracked as the batches go by. Batches of an aborted transaction neither
enter the offset map nor stay (kept empty only under the rules above); committed transactional
records are compacted like any other. A marker stays while batches of its transaction are still
in the log; once none are, its first clean stamps a delete horizon and a clean after the horizon
removes it (the ABORT markers that stay keep their transaction-index entry in the cleaned
segment). Keyless records in a compacted log are dropped (Kafka's rule; produce refuses them).

CPU and I/O bound: the broker plans and swaps in a worker thread and writes in a process of its
own (kshim.replica.cleaning), throttled by a
:class:`Throttler` shared by all cleans (log.cleaner.io.max.bytes.per.second).
"""
from __future__ import annotations

import heapq
import logging
import os
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from kshim.log.log import CLEANED_SUFFIX, Log
from kshim.log.segment import INT32_MAX, LOG_SUFFIX, Segment, scan
from kshim.log.files import write_atomic
from kshim.log.txnindex import TXNINDEX_SUFFIX, AbortedTxn, encode_entries
from wire.compression import compress, decompress
from wire.records import (
    COMPRESSION_MASK, CONTROL_MASK, CRC_OFFSET, DELETE_HORIZON_MASK, HEADER_SIZE, LOG_OVERHEAD, NONE,
    TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, BatchHeader, _read_varint, _write_varint, compute_crc, read_header,
)
from wire.records import CONTROL_ABORT, CONTROL_COMMIT
log = logging.getLogger("kshim.log.cleaner")

_HEADER = struct.Struct(">qiibIhiqqqhii")
MAP_ENTRY_OVERHEAD = 64  # bytes counted per offset-map entry besides its key (a Python dict slot, an int)
_READ_CHUNK = 1 << 20


class CleanAborted(Exception):
    """The log changed under the clean (truncated, segments deleted, closed): try again later."""


class Throttler:
    """Kafka's Throttler: callers report bytes of I/O; it sleeps (in the calling worker thread)
    whenever the rate since the last check exceeds ``bytes_per_second``."""

    def __init__(self, bytes_per_second: float, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = bytes_per_second
        self._sleep, self._clock = sleep, clock
        self._lock = threading.Lock()
        self._start = clock()
        self._bytes = 0.0

    def throttle(self, nbytes: int) -> None:
        with self._lock:
            self._bytes += nbytes
            now = self._clock()
            elapsed = now - self._start
            if elapsed < 0.05 and self._bytes < self.rate * 0.05:
                return
            wanted = self._bytes / self.rate
            pause = wanted - elapsed
            self._start, self._bytes = now, 0.0
        if pause > 0:
            self._sleep(pause)
            with self._lock:
                self._start = self._clock()


@dataclass
class CleanResult:
    first_dirty: int
    end_offset: int          # the new cleaner checkpoint: everything below it is clean
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    groups: int = 0
    map_entries: int = 0
    map_bytes_read: int = 0  # of bytes_read, what building the offset map read (the rest: the copy)
    seconds: float = 0.0


@dataclass
class OffsetMap:
    """Key -> offset of its last record in the dirty section (Kafka's SkimpyOffsetMap, exact)."""
    budget_bytes: int
    entries: dict[bytes, int] = field(default_factory=dict)
    used: int = 0
    latest_offset: int = -1  # last offset of the last batch fully taken in

    def put(self, key: bytes, offset: int) -> None:
        if key not in self.entries:
            self.used += len(key) + MAP_ENTRY_OVERHEAD
        self.entries[key] = offset

    @property
    def full(self) -> bool:
        return self.used >= self.budget_bytes


# ------------------------------------------------------------------ raw records
def _raw_records(h: BatchHeader, batch: memoryview) -> Iterator[tuple[int, int, bytes | None, bool, memoryview, memoryview]]:
    """Each record of a data batch as (offset delta, timestamp delta, key, has value, the bytes
    after the timestamp delta up to the end of the record, the whole record without its length)."""
    codec = h.attributes & COMPRESSION_MASK
    body = batch[HEADER_SIZE:h.size]
    data = bytes(body) if codec == NONE else decompress(codec, body, 1 << 31)
    view = memoryview(data)
    pos = 0
    for _ in range(h.records_count):
        length, start = _read_varint(data, pos)
        end = start + length
        p = start + 1  # attributes
        ts_delta, after_ts = _read_varint(data, p)
        off_delta, p = _read_varint(data, after_ts)
        klen, p = _read_varint(data, p)
        key = None
        if klen >= 0:
            key = bytes(data[p:p + klen])
            p += klen
        vlen, p = _read_varint(data, p)
        yield off_delta, ts_delta, key, vlen >= 0, view[after_ts:end], view[start:end]
        pos = end


def _rebuild(h: BatchHeader, kept: list[tuple[int, memoryview, memoryview]], horizon: int | None) -> bytes:
    """A batch holding ``kept`` records ((absolute timestamp, bytes after the timestamp delta, whole
    record)), the header's offsets and producer fields kept; ``horizon``: stamp a delete horizon."""
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    attributes = h.attributes
    if horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    if not kept:  # Kafka's writeEmptyHeader: no records, no codec, timestamps = the max timestamp
        attributes &= TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK
        base_ts = max_ts = h.max_timestamp
        payload = b""
    else:
        if h.has_delete_horizon:
            base_ts = h.base_timestamp  # the horizon stays
        elif horizon is not None:
            base_ts = horizon
        else:
            base_ts = kept[0][0]
        max_ts = h.max_timestamp if log_append else max(ts for ts, _, _ in kept)
        body = bytearray()
        rec = bytearray()
        for ts, rest, whole in kept:
            if base_ts == h.base_timestamp:
                _write_varint(body, len(whole))
                body += whole
                continue
            rec.clear()
            rec.append(whole[0])  # record attributes
            _write_varint(rec, ts - base_ts)
            rec += rest
            _write_varint(body, len(rec))
            body += rec
        codec = h.attributes & COMPRESSION_MASK
        payload = compress(codec, bytes(body)) if codec != NONE else bytes(body)
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    _HEADER.pack_into(out, 0, h.base_offset, size - LOG_OVERHEAD, h.partition_leader_epoch, h.magic, 0,
                      attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch,
                      h.base_sequence, len(kept))
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out, 0, size))
    return bytes(out)


def _batches(seg: SegmentFile, throttler: Throttler | None, result: CleanResult) -> Iterator[tuple[BatchHeader, memoryview]]:
    with seg.pinned() as fd:
        for _, h, body in scan(fd, 0, seg.size, bodies=True, chunk=_READ_CHUNK):
            assert body is not None
            result.bytes_read += h.size
            if throttler is not None:
                throttler.throttle(h.size)
            yield h, body


class TxnTracker:
    """Kafka's CleanedTransactionMetadata: which transactions are open as the cleaner walks the log
    in offset order, so that it knows which batches are aborted and which markers may go."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._known: set[AbortedTxn] = set()
        self._aborted: dict[int, list] = {}   # producer id -> [its aborted txn, last batch seen or -1]
        self._committed: set[int] = set()      # producers with a (committed) transaction's batch seen
        self.cleaned_index: list[AbortedTxn] = []  # entries the cleaned segment's txn index keeps

    def add(self, entries: list[AbortedTxn]) -> None:
        for e in entries:
            if e not in self._known:
                self._known.add(e)
                heapq.heappush(self._pending, (e.first_offset, e.last_offset, e))

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            e = heapq.heappop(self._pending)[2]
            self._aborted.setdefault(e.producer_id, [e, -1])

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (it may go)."""
        last = h.base_offset + h.last_offset_delta
        self._reach(last)
        if not h.attributes & TRANSACTIONAL_MASK:
            return False
        ongoing = self._aborted.get(h.producer_id)
        if ongoing is not None:
            ongoing[1] = last
            return True
        self._committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, kind: int | None) -> bool:
        """A control batch (``kind``: its control type, None if it holds no record): True if no
        batch of its transaction is left, so that it may go once its delete horizon passes."""
        self._reach(h.base_offset + h.last_offset_delta)
        if kind is None:
            return True  # emptied by an earlier clean
        if kind == CONTROL_ABORT:
            ongoing = self._aborted.pop(h.producer_id, None)
            if ongoing is not None and ongoing[1] >= 0:
                self.cleaned_index.append(ongoing[0])  # data of it is still here: marker and entry stay
                return False
            return True
        if kind == CONTROL_COMMIT:
            if h.producer_id in self._committed:
                self._committed.discard(h.producer_id)
                return False
            return True
        return False


def _control_kind(h: BatchHeader, body: memoryview) -> int | None:
    for _, _, key, _, _, _ in _raw_records(h, body):
        if key is not None and len(key) >= 4:
            return struct.unpack_from(">h", key, 2)[0]
        return -1  # a control record of no type we know: it stays
    return None


# ------------------------------------------------------------------ the clean
def build_offset_map(segments: list[SegmentFile], first_dirty: int, upper: int, offset_map: OffsetMap,
                     throttler: Throttler | None, result: CleanResult,
                     aborted: list[AbortedTxn] | None = None) -> None:
    """Kafka's buildOffsetMap: keys of the dirty records [first_dirty, upper), records of aborted
    transactions (``aborted``: the transaction index over that range) and markers left out; stops
    after the batch that fills the map (latest_offset says how far it got)."""
    txns = TxnTracker()
    txns.add(aborted or [])
    for seg in segments:
        if seg.next_offset <= first_dirty or seg.base_offset >= upper:
            continue
        for h, body in _batches(seg, throttler, result):
            last = h.base_offset + h.last_offset_delta
            if last < first_dirty:
                continue
            if h.base_offset >= upper:
                return
            if h.attributes & CONTROL_MASK:
                txns.on_marker(h, _control_kind(h, body))
            elif not txns.on_batch(h):
                for off_delta, _, key, _, _, _ in _raw_records(h, body):
                    offset = h.base_offset + off_delta
                    if key is not None and first_dirty <= offset < upper:
                        offset_map.put(key, offset)
            offset_map.latest_offset = min(last, upper - 1)
            if offset_map.full:
                return


def group_segments(segments: list[SegmentFile], max_bytes: int, max_index_bytes: int) -> list[list[SegmentFile]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose sum fits one segment (bytes, index
    entries) and whose offsets stay within int32 of the group's base."""
    groups: list[list[SegmentFile]] = []
    for seg in segments:
        if groups:
            g = groups[-1]
            if (sum(s.size for s in g) + seg.size <= max_bytes
                    and seg.next_offset - 1 - g[0].base_offset <= INT32_MAX
                    and sum(s.size for s in g) // max(g[0].interval, 1) + seg.size // max(seg.interval, 1)
                    <= max_index_bytes // 8):
                g.append(seg)
                continue
        groups.append([seg])
    return groups


LastRecords = Mapping[int, tuple[int, int]]  # producer id -> (its last data offset or -1, its epoch)


@dataclass(frozen=True)
class SegmentFile:
    """What a clean reads of a segment below the active one (picklable: the copy may run in
    another process, which opens the file itself)."""
    stem: str
    base_offset: int
    next_offset: int
    size: int
    interval: int

    @contextmanager
    def pinned(self) -> Iterator[int]:
        try:
            fd = os.open(self.stem + LOG_SUFFIX, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError as e:  # deleted by retention since the plan: the log changed
            raise CleanAborted(f"{self.stem}: segment gone") from e
        try:
            yield fd
        finally:
            os.close(fd)


@dataclass
class CleanPlan:
    """Everything a clean of one log needs, taken from the log at its start (:func:`plan_clean`);
    :func:`write_cleaned` turns it into ``.cleaned`` files anywhere, :func:`swap_cleaned` swaps
    them in under the log's lock."""
    directory: str
    segments: list[SegmentFile]
    aborted: list[list[AbortedTxn]]  # per segment: the aborted transactions overlapping it
    map_aborted: list[AbortedTxn]    # those overlapping the dirty range
    active_base: int
    first_dirty: int
    upper: int
    now_ms: int
    last_records: dict[int, tuple[int, int]]
    dedupe_budget_bytes: int
    force: bool
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int


@dataclass
class Written:
    result: CleanResult
    groups: list[tuple[int, int]] = field(default_factory=list)  # [start, end) into plan.segments


def clean_log(log_: Log, first_dirty: int, first_uncleanable: int, now_ms: int, *,
              last_records: LastRecords, dedupe_budget_bytes: int,
              throttler: Throttler | None = None, force: bool = False) -> CleanResult:
    """Clean ``log_`` in this thread (see the module docstring; the broker's cleaner runs the
    middle step, :func:`write_cleaned`, in a process of its own). ``first_uncleanable`` already
    accounts for the active segment, the last stable offset and min.compaction.lag.ms;
    ``last_records``: each active producer's last data offset (-1 if none) and epoch (Kafka's
    lastRecordsOfActiveProducers: the batch holding that offset stays, maybe empty; with no data
    offset, the producer's marker of that epoch does). Raises CleanAborted if the log changed
    meanwhile (what was swapped in before stays: it is consistent). ``force`` (`kshim ctl
    compact`): clean the already clean segments even if nothing is dirty, so that tombstones and
    markers past their delete horizon go now (Kafka waits for new dirty data)."""
    started = time.monotonic()
    plan, live, truncations = plan_clean(log_, first_dirty, first_uncleanable, now_ms, last_records=last_records,
                                         dedupe_budget_bytes=dedupe_budget_bytes, force=force)
    written = write_cleaned(plan, throttler)
    swap_cleaned(log_, plan, written, live, truncations)
    written.result.seconds = time.monotonic() - started
    return written.result


def plan_clean(log_: Log, first_dirty: int, first_uncleanable: int, now_ms: int, *, last_records: LastRecords,
               dedupe_budget_bytes: int, force: bool = False) -> tuple[CleanPlan, list[Segment], int]:
    """The plan, the live segments it names (for the swap) and the log's truncation count."""
    segments, active_base, truncations = log_.cleanable_segments()
    upper = min(first_uncleanable, active_base)
    files = [SegmentFile(s.stem, s.base_offset, s.next_offset, s.size, s.interval) for s in segments]
    bounds = [s.base_offset for s in segments[1:]] + [active_base]
    cfg = log_.config
    plan = CleanPlan(
        str(log_.directory), files, [log_.aborted_between(s.base_offset, nxt) for s, nxt in zip(segments, bounds)],
        log_.aborted_between(first_dirty, upper) if upper > first_dirty else [], active_base, first_dirty, upper,
        now_ms, dict(last_records), dedupe_budget_bytes, force, cfg.segment_bytes, cfg.segment_index_bytes,
        cfg.index_interval_bytes, cfg.delete_retention_ms)
    return plan, segments, truncations


def write_cleaned(plan: CleanPlan, throttler: Throttler | None) -> Written:
    """Build the offset map and write each group's ``.cleaned`` files (no swap). Pure file work on
    the plan: safe in another process."""
    started = time.monotonic()
    written = Written(CleanResult(plan.first_dirty, plan.first_dirty))
    result = written.result
    segments = plan.segments
    try:
        if not segments:
            return written
        offset_map = OffsetMap(plan.dedupe_budget_bytes)
        if plan.upper > plan.first_dirty:
            build_offset_map(segments, plan.first_dirty, plan.upper, offset_map, throttler, result, plan.map_aborted)
        result.map_entries = len(offset_map.entries)
        result.map_bytes_read = result.bytes_read
        if offset_map.latest_offset < plan.first_dirty:
            if not plan.force:
                return written
            offset_map.latest_offset = min(plan.first_dirty, plan.upper) - 1  # nothing dirty: horizons only
        end = offset_map.latest_offset + 1
        to_clean = [s for s in segments if s.base_offset < end]
        txns = TxnTracker()  # carried from group to group, as Kafka's is
        start = 0
        try:
            for group in group_segments(to_clean, min(plan.segment_bytes, INT32_MAX), plan.segment_index_bytes):
                stop = start + len(group)
                next_offset = segments[stop].base_offset if stop < len(segments) else plan.active_base
                _clean_group(plan, start, stop, next_offset, offset_map, txns, throttler, result)
                written.groups.append((start, stop))
                start = stop
        except BaseException:
            for a, _ in written.groups:
                _discard(segments[a].stem)
            raise
        result.end_offset = end
        return written
    finally:
        result.seconds = time.monotonic() - started


def swap_cleaned(log_: Log, plan: CleanPlan, written: Written, live: list[Segment], truncations: int) -> None:
    """Swap the written groups in, in order (:meth:`Log.replace_segments`); CleanAborted, the
    rest discarded, as soon as one cannot be (the log changed: truncated, segments deleted)."""
    for k, (a, b) in enumerate(written.groups):
        if not log_.replace_segments(live[a:b], plan.segments[a].stem, truncations):
            for a2, _ in written.groups[k:]:
                _discard(plan.segments[a2].stem)
            raise CleanAborted(f"{log_.directory}: the log changed during the clean")
        written.result.groups += 1


def _discard(stem: str) -> None:
    for suffix in (LOG_SUFFIX, ".index", ".timeindex", TXNINDEX_SUFFIX):
        try:
            os.unlink(stem + suffix + CLEANED_SUFFIX)
        except FileNotFoundError:
            pass


def _clean_group(plan: CleanPlan, start: int, stop: int, next_offset: int, offset_map: OffsetMap,
                 txns: TxnTracker, throttler: Throttler | None, result: CleanResult) -> None:
    """Write ``<base>.log.cleaned`` (and its index files) for ``plan.segments[start:stop]``."""
    group = plan.segments[start:stop]
    stem = group[0].stem
    fd = os.open(stem + LOG_SUFFIX + CLEANED_SUFFIX,
                 os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    # an index builder: a Segment over the cleaned file, fed as appends would feed it
    index = Segment(stem, group[0].base_offset, fd, 0, plan.index_interval_bytes)
    try:
        out = bytearray()
        last_kept: tuple[int, int] | None = None  # a group keeps at least one batch (never an empty file)
        pending_empty: BatchHeader | None = None
        txns.cleaned_index = []
        for k, seg in enumerate(group):
            # the aborted transactions overlapping this segment (whole: its cleaned index is rebuilt)
            txns.add(plan.aborted[start + k])
            for h, body in _batches(seg, throttler, result):
                kept_bytes = _filter_batch(h, body, offset_map, plan.upper, plan.now_ms, plan.delete_retention_ms,
                                           plan.last_records, txns, result)
                if kept_bytes is None:
                    pending_empty = h
                    continue
                pending_empty = None
                _write(index, out, kept_bytes, h)
                last_kept = (h.base_offset, h.last_offset_delta)
                if len(out) >= _READ_CHUNK:
                    _flush(fd, out, throttler, result)
        if last_kept is None and pending_empty is not None:
            _write(index, out, _rebuild(pending_empty, [], None), pending_empty)
        _flush(fd, out, throttler, result)
        os.fsync(fd)
        index.next_offset = next_offset
        if index.max_ts > (index.ts_ts[-1] if index.ts_ts else -1):
            index._add_time_entry(write=False)  # the final entry a roll writes
        index._write_index_files(CLEANED_SUFFIX)
        if txns.cleaned_index:  # the ABORT markers that stay keep their entries
            with open(stem + TXNINDEX_SUFFIX + CLEANED_SUFFIX, "wb") as f:
                f.write(encode_entries(txns.cleaned_index))
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        os.close(fd)
        _discard(stem)
        raise
    os.close(fd)


def _write(index: Segment, out: bytearray, data: bytes | memoryview, h: BatchHeader) -> None:
    pos = index.size
    out += data
    index.size += len(data)
    max_ts = _HEADER.unpack_from(data, 0)[8]
    index._track(pos, len(data), h.base_offset + h.last_offset_delta, max_ts, index.interval, False)
    index.next_offset = h.base_offset + h.last_offset_delta + 1


def _flush(fd: int, out: bytearray, throttler: Throttler | None, result: CleanResult) -> None:
    if out:
        view = memoryview(out)
        n = 0
        while n < len(out):
            n += os.write(fd, view[n:])
        view.release()
        result.bytes_written += len(out)
        if throttler is not None:
            throttler.throttle(len(out))
        out.clear()


def _filter_batch(h: BatchHeader, body: memoryview, offset_map: OffsetMap, upper: int, now_ms: int,
                  delete_retention_ms: int, last_records: LastRecords, txns: TxnTracker,
                  result: CleanResult) -> bytes | memoryview | None:
    """The batch as it stays (its bytes, rebuilt or not), or None if it goes (Kafka's
    checkBatchRetention and shouldRetainRecord)."""
    last = h.base_offset + h.last_offset_delta
    control = bool(h.attributes & CONTROL_MASK)
    if control:
        discardable = txns.on_marker(h, _control_kind(h, body))
        # a marker with nothing left of its transaction goes once its delete horizon has passed
        discard_records = discardable and h.has_delete_horizon and h.base_timestamp <= now_ms
    else:
        discardable = discard_records = txns.on_batch(h)  # a batch of an aborted transaction
    # Kafka keeps these, emptied if need be: a producer's batch holding its last sequence (or,
    # with no data left, its marker of the current epoch, for fencing), and the round's last batch
    keep_empty = last + 1 == upper
    if h.producer_id >= 0 and h.producer_id in last_records:
        last_data, epoch = last_records[h.producer_id]
        keep_empty = keep_empty or (last == last_data if last_data >= 0 else control and h.producer_epoch == epoch)
    if discard_records:
        result.records_read += h.records_count
        return _rebuild(h, [], None) if keep_empty else None
    if control:
        result.records_read += h.records_count
        result.records_kept += h.records_count
        if h.records_count == 0:
            return body if keep_empty else None
        if discardable and not h.has_delete_horizon:  # its first clean with nothing left: the horizon
            marker = [(h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else h.base_timestamp + ts_delta,
                       rest, whole) for _, ts_delta, _, _, rest, whole in _raw_records(h, body)]
            return _rebuild(h, marker, now_ms + delete_retention_ms)
        return body
    retain_deletes = not h.has_delete_horizon or now_ms < h.base_timestamp
    kept: list[tuple[int, memoryview, memoryview]] = []
    all_kept = True
    tombstones = False
    latest = offset_map.latest_offset
    entries = offset_map.entries
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    for off_delta, ts_delta, key, has_value, rest, whole in _raw_records(h, body):
        result.records_read += 1
        offset = h.base_offset + off_delta
        keep = offset > latest or (key is not None and offset >= entries.get(key, -1)
                                   and (has_value or retain_deletes))
        if keep:
            ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
            kept.append((ts, rest, whole))
            tombstones = tombstones or not has_value
        else:
            all_kept = False
    result.records_kept += len(kept)
    if kept:
        needs_horizon = tombstones and not h.has_delete_horizon
        if all_kept and not needs_horizon:
            return body
        return _rebuild(h, kept, now_ms + delete_retention_ms if needs_horizon else None)
    return _rebuild(h, [], None) if keep_empty else None


# ------------------------------------------------------------------ when to clean (LogCleanerManager)
CHECKPOINT_FILE = "cleaner-offset-checkpoint"


def read_checkpoint(directory: str | os.PathLike) -> int | None:
    """The first dirty offset the last clean left (one file per partition directory)."""
    try:
        with open(os.path.join(directory, CHECKPOINT_FILE)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_checkpoint(directory: str | os.PathLike, offset: int) -> None:
    write_atomic(os.path.join(directory, CHECKPOINT_FILE), f"{offset}\n")


@dataclass(frozen=True)
class Cleanable:
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int       # segments below first_dirty
    cleanable_bytes: int   # segments in [first_dirty, first_uncleanable)
    compaction_delay_ms: int  # > 0: max.compaction.lag.ms is overdue by this much

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def due(self, min_ratio: float) -> bool:
        """Kafka's grabFilthiestCompactedLog filter: overdue by max.compaction.lag.ms with something
        to clean, or dirty above min.cleanable.dirty.ratio."""
        return (self.compaction_delay_ms > 0 and self.cleanable_bytes > 0) or (
            self.cleanable_bytes > 0 and self.ratio > min_ratio)


def cleanable_offsets(log_: Log, checkpoint: int | None, last_stable_offset: int, now_ms: int) -> Cleanable:
    """Kafka's LogCleanerManager.cleanableOffsets and calculateCleanableBytes: the first dirty
    offset (the checkpoint, reset to the log start when out of range) and the first uncleanable
    one: min(last stable offset, active segment base, first segment younger than
    min.compaction.lag.ms), moved down to a segment boundary."""
    segments, active_base, _ = log_.cleanable_segments()
    cfg = log_.config
    start, end = log_.log_start_offset, log_.log_end_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    uncleanable = min(last_stable_offset, active_base)
    lag = max(cfg.min_compaction_lag_ms, 0)
    dirty = [s for s in segments if s.next_offset > first_dirty]
    if lag > 0:
        for seg in dirty:
            if seg.largest_timestamp() > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    # calculateCleanableBytes: up to the base of the segment holding the uncleanable offset
    boundary = active_base
    for seg in segments:
        if seg.next_offset > uncleanable:
            boundary = seg.base_offset
            break
    uncleanable = max(first_dirty, min(uncleanable, boundary))
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    cleanable = sum(s.size for s in segments if s.next_offset > first_dirty and s.base_offset < boundary)
    delay = 0
    max_lag = max(cfg.max_compaction_lag_ms, 0)
    firsts = [t for t in (_first_batch_timestamp(s) for s in dirty) if t > 0]
    if firsts and max_lag < (1 << 62):
        until = now_ms - max_lag
        if min(firsts) < until:
            delay = until - min(firsts)
    return Cleanable(first_dirty, uncleanable, clean, cleanable, delay)


def _first_batch_timestamp(seg: Segment) -> int:
    if seg.size < HEADER_SIZE:
        return -1
    with seg.reading() as fd:
        h = read_header(os.pread(fd, HEADER_SIZE, 0), 0)
    return h.max_timestamp if h.has_delete_horizon else h.base_timestamp
