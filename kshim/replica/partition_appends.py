"""The appends of one replica: the leader's (a produce request's batches, a coordinator's, a
transaction marker) and the follower's (batches fetched from the leader, offsets as it assigned
them), each written on the event loop when small or handed to the log writer thread
(kshim.log.writer); and the follower's truncation of a divergent suffix.

The leader orders batches as they arrive and never reorders them. Within one produce request's
records for this partition, batches are appended one after another; an error stops the remaining
batches without rolling back those already appended.

Separate from the Partition (kshim.replica.partition), which holds the replica's state and its
reads: here is how records enter its log, the checks they pass first in
kshim.replica.partition_checks, and what they change of the producer state in
kshim.replica.partition_txns.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Awaitable

from kshim.clock import SYSTEM
from kshim.log.log import LogClosed
from kshim.log.writer import INLINE_SLOW_COUNT, Fenced, LogWriter, WriteJob
from kshim.replica.partition_checks import _DUPLICATE, HANDING_OVER, AppendResult, BatchChecks
from kshim.replica.partition_txns import TxnBookkeeping
from kshim.replica.producer_state import ProducerStateManager
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.replica.partition")

_BATCH_LENGTH = struct.Struct(">i").unpack_from
_PRODUCER_ID = struct.Struct(">q").unpack_from
_PRODUCER_ID_OFFSET = 43
# a leader's append this small is written on the event loop when the writer holds nothing of its
# partition and no flush policy would fsync it there: the hand-off to the writer thread and back
# cost more than a page-cache write of a few KiB (issue 18, transactions: 1.4 ms at the median per
# Produce on a loaded machine). 64 KiB, not 16: a page-cache write of 64 KiB takes ~15 us (warm
# pages; ~140 us on pages this VM has not touched for a while), less than the hand-off, and
# librdkafka's batches at 20,000 records/s (linger 5 ms, 4 partitions) or of a 1,000-record
# transaction are 25-30 KiB: Produce round trip p50 1.15 -> 0.77 ms, produce-to-ack p50 4.5 ->
# 4.0 ms. The kernel's writeback throttling, which the writer exists for, stalls a write of any
# size: INLINE_SLOW_S below catches it
INLINE_APPEND_MAX = 64 * 1024
# ... unless INLINE_SLOW_COUNT inline appends within INLINE_SLOW_WINDOW_S took longer than
# INLINE_SLOW_S each (the kernel throttling writeback, which the writer thread exists for): then
# every append of that data directory goes to the writer for INLINE_PAUSE_S. A slow append alone
# is the scheduler (another process ran: over 5 ms every few seconds on a loaded 2-core machine,
# several a second with CPU hogs beside it), and sending everything to the thread for it cost a
# fifth more CPU per single-record Produce; the kernel's writeback pauses are longer and sustained
INLINE_SLOW_S = 0.02
INLINE_SLOW_WINDOW_S = 1.0
INLINE_PAUSE_S = 10.0


def _producer_id(buf: bytearray | memoryview) -> int:
    """The producer id of the first batch (-1 if none, or too short to tell)."""
    return _PRODUCER_ID(buf, _PRODUCER_ID_OFFSET)[0] if len(buf) >= records.HEADER_SIZE else -1


class Appends(BatchChecks, TxnBookkeeping):
    """The appends of a Partition (kshim.replica.partition)."""

    if TYPE_CHECKING:  # the Partition's, of which this is a part
        writer: LogWriter | None
        inline_append_max: int
        _inflight: dict[int, asyncio.Future]
        _jobs_out: int
        _storage_error: str | None
        handing_over: bool

        @property
        def is_leader(self) -> bool: ...

        @property
        def log_end_offset(self) -> int: ...

        def _advance_hw(self) -> None: ...

        def wake_all(self) -> None: ...

        def update_follower_hw(self, leader_high_watermark: int) -> None: ...

    # ------------------------------------------------------------------ leader: appends
    def append(self, data: bytes | memoryview | None, from_coordinator: bool = False) -> AppendResult:
        """Validate and append a produce request's records for this partition. A writable view
        (into the request frame) is patched in place; anything else is copied first.
        `from_coordinator`: a group coordinator's transactional offset commit, which carries the
        producer's id and epoch but no sequence numbers (only the epoch is checked)."""
        result = AppendResult()
        if not data:
            result.error, result.message = ErrorCode.CORRUPT_MESSAGE, "empty or null records"
            return result
        buf = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
        pos, end = 0, len(buf)
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        while pos < end:
            header = self._prepare(buf, pos, end, now, append_time, from_coordinator, result)
            if header is None:
                break
            if header is _DUPLICATE:
                pos += result.skipped
                continue
            try:
                base, last = self.log.append(buf, pos, header.size)
            except OSError as e:  # a full disk, no descriptors: the segment is back as it was
                result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
                self._storage_failed(e)
                break
            self._appended(header, base, last, result)
            pos += header.size
        result.log_append_time = append_time
        if result.appended_batches:
            self._advance_hw()
            self.wake_all()
        return result

    def _appended(self, header: records.BatchHeader, base: int, last: int, result: AppendResult) -> None:
        self._storage_works()
        if header.producer_id >= 0:
            self.producers.update(header, base, last)
        if result.base_offset < 0:
            result.base_offset = base
        result.last_offset = last
        result.appended_batches += 1

    # ------------------------------------------------------------------ appends through the log writer
    def submit_append(self, data: bytes | memoryview | None, from_coordinator: bool = False
                      ) -> AppendResult | Awaitable[AppendResult]:
        """append(), with the write handed to the log writer (kshim.log.writer) when there is one:
        an awaitable answer, unless nothing is to be written (a refusal or a retried duplicate,
        answered at once). The checks run now, against the producer state as of the writes
        already done; so a producer whose earlier write here is still out waits for it (in a
        task of its own, which keeps the order even if nobody awaits the answer), as does a
        request holding several batches (each is checked after the one before is written)."""
        if self.writer is None or not data or len(data) < records.HEADER_SIZE:
            return self.append(data, from_coordinator)  # nothing to write, or refused at once
        if self._inline_ok(len(data)):  # small, and the writer holds nothing of ours
            started = SYSTEM.monotonic()
            result = self.append(data, from_coordinator)
            self._inline_took(started)
            return result
        # patched and written in place when it is a request's records (a writable view of the frame,
        # which the connection never reuses: the inline path above does the same); bytes are copied.
        # The copy of every produced byte was a tenth of a produce benchmark's event-loop samples
        buf = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
        pid = _producer_id(buf)
        prev = self._inflight.get(pid) if pid >= 0 else None
        if prev is not None or _BATCH_LENGTH(buf, 8)[0] + records.LOG_OVERHEAD != len(buf):
            task = asyncio.ensure_future(self._append_in_turn(buf, from_coordinator, prev))
            if pid >= 0:
                self._inflight[pid] = task
                task.add_done_callback(lambda t: self._forget_inflight(pid, t))
            return asyncio.shield(task)
        result = AppendResult()
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        result.log_append_time = append_time
        header = self._prepare(buf, 0, len(buf), now, append_time, from_coordinator, result)
        if header is None or header is _DUPLICATE:
            return result
        job = self._submit(buf, header, result)
        if pid >= 0:
            self._inflight[pid] = job.future
        return asyncio.shield(job.future)

    async def _append_in_turn(self, buf: bytearray | memoryview, from_coordinator: bool,
                              prev: asyncio.Future | None) -> AppendResult:
        if prev is not None:
            await asyncio.wait({prev})
        result = AppendResult()
        now = SYSTEM.wall_ms()
        append_time = now if self.log_append_time else -1
        result.log_append_time = append_time
        pos, end = 0, len(buf)
        while pos < end:  # bounded: each round moves past a batch or stops
            header = self._prepare(buf, pos, end, now, append_time, from_coordinator, result)
            if header is None:
                break
            if header is _DUPLICATE:
                pos += result.skipped
                continue
            job = self._submit(buf if pos == 0 and header.size == end else buf[pos:pos + header.size], header, result)
            await asyncio.wait({job.future})
            if job.error is not None:
                break
            pos += header.size
        return result

    def _submit(self, data: bytearray | memoryview, header: records.BatchHeader, result: AppendResult) -> WriteJob:
        assert self.writer is not None
        epoch = self.leader_epoch
        self._jobs_out += 1
        job = WriteJob(self.log, data, True, self._written, asyncio.get_running_loop().create_future(),
                       context=(header, result),
                       still_valid=lambda: self.is_leader and self.leader_epoch == epoch)
        self.writer.submit(job)
        return job

    def _written(self, job: WriteJob) -> AppendResult:
        """On the event loop, once the writer wrote (or failed) a leader job."""
        self._jobs_out -= 1
        header, result = job.context
        if header.producer_id >= 0:
            self._forget_inflight(header.producer_id, job.future)
        e = job.error
        if e is None and job.still_valid is not None and not job.still_valid():
            # written, then the leadership moved before this answer: a truncation may have cut
            # it; the producer retries against the new leader
            e = Fenced("leadership changed while the write was out")
        if e is None:
            self._appended(header, job.base, job.last, result)
            self._advance_hw()
            self.wake_all()
        elif isinstance(e, OSError):
            result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
            self._storage_failed(e)
        elif isinstance(e, (LogClosed, Fenced)):
            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, f"not appended: {e}"
        else:
            result.error, result.message = ErrorCode.CORRUPT_MESSAGE, str(e)
        return result

    def _forget_inflight(self, pid: int, future: asyncio.Future) -> None:
        if self._inflight.get(pid) is future:
            del self._inflight[pid]

    def _storage_works(self) -> None:
        if self._storage_error is not None:
            log.warning("%s-%d: appends work again (after: %s)", self.topic, self.index, self._storage_error)
            self._storage_error = None

    def _storage_failed(self, e: OSError) -> None:
        """Log a storage failure once per occurrence: when it starts, and (above) when it ends."""
        if self._storage_error is None:
            self._storage_error = str(e)
            log.warning("%s-%d: appends fail with KAFKA_STORAGE_ERROR until the log can be written: %s",
                        self.topic, self.index, e)

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool,
                      coordinator_epoch: int, transaction_version: int = 1) -> AppendResult:
        """The leader writes a transaction marker (WriteTxnMarkers): it ends the producer's
        transaction here, COMMIT or ABORT. A transaction version 2 marker carries the epoch its
        coordinator bumped, so it must be newer than the producer's (KIP-1228)."""
        result = AppendResult()
        if self.handing_over:  # the coordinator retries it at the new leader
            result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, HANDING_OVER
            return result
        check = self.producers.check_fence(producer_id, producer_epoch, coordinator_epoch,
                                           bumped=transaction_version >= 2)
        if check.is_error:
            result.error, result.message = ErrorCode(check.error_code), check.message
            return result
        buf = bytearray(records.encode_marker(producer_id, producer_epoch, committed, coordinator_epoch,
                                              SYSTEM.wall_ms()))
        records.set_leader_epoch(buf, 0, self.leader_epoch)
        try:
            base, last = self.log.append(buf)
        except OSError as e:  # the coordinator retries a retriable error until the marker is written
            result.error, result.message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the log: {e}"
            self._storage_failed(e)
            return result
        self._storage_works()
        header = records.read_header(buf)
        self._track(self.producers, header, marker=records.Marker(committed, coordinator_epoch))
        result.base_offset, result.last_offset, result.appended_batches = base, last, 1
        self._advance_hw()
        self.wake_all()
        return result

    # ------------------------------------------------------------------ follower: appends
    def append_as_follower(self, data: bytes | memoryview, leader_high_watermark: int) -> None:
        """Batches fetched from the leader, offsets as the leader assigned them. An OSError (a
        full disk) leaves the log as it was (a write split over segments is cut back) and is
        raised for the fetcher to try again later; it is logged once, as a leader's is."""
        if data:
            before = self.log.log_end_offset
            started = SYSTEM.monotonic()
            try:
                self.log.append_with_offsets(data)
            except OSError as e:
                self._storage_failed(e)
                if self.log.log_end_offset > before:
                    self.log.truncate_to(before)
                raise
            self._inline_took(started)
            self._took_from_leader(data)
        self.update_follower_hw(leader_high_watermark)

    def _took_from_leader(self, data: bytes | bytearray | memoryview) -> None:
        """After a follower append: the leader epochs and producer state of what it brought."""
        self._storage_works()
        for pos, header in records.iter_batches(data):
            self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            if header.producer_id >= 0:
                self._track(self.producers, header, memoryview(data)[pos:pos + header.size])

    def _inline_ok(self, size: int) -> bool:
        """Whether a write of `size` bytes is made on the event loop (INLINE_APPEND_MAX): small,
        the writer holds nothing of this partition's, no flush policy fsyncs, and its data dir's
        inline writes are not paused for being slow."""
        writer, cfg = self.writer, self.log.config
        return (writer is not None and not self._jobs_out and size <= self.inline_append_max
                and cfg.flush_messages is None and cfg.flush_ms is None
                and SYSTEM.monotonic() >= writer.inline_paused_until)

    def _inline_took(self, started: float) -> None:
        """An inline write begun at `started` is done: the slow ones counted (INLINE_SLOW_S)."""
        took = SYSTEM.monotonic() - started
        if took > INLINE_SLOW_S and self.writer is not None:
            slow = self.writer.inline_slow
            slow.append(started)
            if len(slow) == INLINE_SLOW_COUNT and started - slow[0] <= INLINE_SLOW_WINDOW_S:
                slow.clear()
                self.writer.inline_paused_until = started + took + INLINE_PAUSE_S
                log.info("%s-%d: %d appends on the event loop took over %.0f ms within %.0f s (the "
                         "last %.0f ms); appends of its data directory go through the writer thread "
                         "for %.0f s", self.topic, self.index, INLINE_SLOW_COUNT, INLINE_SLOW_S * 1000,
                         INLINE_SLOW_WINDOW_S, took * 1000, INLINE_PAUSE_S)

    def submit_follower_append(self, data: bytes | memoryview) -> asyncio.Future | None:
        """append_as_follower's write handed to the log writer (None: there is none, or the
        write is small enough for the event loop (_inline_ok, as a leader's), so the caller
        appends directly). The future's value is None, or the OSError of a failed write (logged
        here; the log is as it was). Call :meth:`follower_appended` after it."""
        if self.writer is None or self._inline_ok(len(data)):
            return None
        epoch = self.leader_epoch
        job = WriteJob(self.log, bytes(data), False, self._follower_written,
                       asyncio.get_running_loop().create_future(),
                       still_valid=lambda: not self.is_leader and self.leader_epoch == epoch)
        self.writer.submit(job)
        return job.future

    def _follower_written(self, job: WriteJob) -> BaseException | None:
        e = job.error
        if e is None:
            self._took_from_leader(job.data)
            return None
        if isinstance(e, OSError):
            self._storage_failed(e)
        return e

    # ------------------------------------------------------------------ follower: truncation
    def truncate_to(self, offset: int) -> None:
        """Drop a divergent suffix (a follower after a leader change, KIP-101). The epoch cache is
        cut even when the log is not: a term in which a former leader wrote nothing must go."""
        before, size = self.log.log_end_offset, self.log.size_bytes
        if offset < before:
            self._drop_snapshot()
        # always asked of the log: under its write lock, after any write still out (a write the
        # log writer took before the leadership changed lands first, and is cut here)
        if self.log.truncate_to(offset):
            # what a follower cuts it fetches again: after a crash this should be next to nothing
            log.warning("%s-%d: truncated from %d to %d (%d bytes, fetched again from the leader)",
                        self.topic, self.index, before, offset, size - self.log.size_bytes)
            self._high_watermark = min(self._high_watermark, self.log.log_end_offset)
            # rebuilt, not trimmed: a producer whose last 5 batches were cut still has earlier ones
            # in the log, and its retries must still be recognised (Kafka rebuilds the same way)
            self.producers = self._replay_producer_state(ProducerStateManager(snapshot_offset=self.log.log_start_offset))
        self.epochs.truncate_from_end(self.log.log_end_offset)

    def reset_to(self, offset: int) -> None:
        """Start over, empty, at the leader's log start offset (we fell behind its retention)."""
        log.warning("%s-%d: log end %d is below the leader's log start %d: starting over there",
                    self.topic, self.index, self.log.log_end_offset, offset)
        self._drop_snapshot()
        self.log.reset_to(offset)
        self.producers = ProducerStateManager(snapshot_offset=offset)
        self._unreplicated = []
        self.epochs.clear()
        self._high_watermark = offset
