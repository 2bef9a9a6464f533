"""Deleting records from a log: from its end (a follower's truncation to its leader's log), from
its front (retention by time and size; DeleteRecords through Log.advance_start_offset), or all of
it (a follower starting over at its leader's log start). Whole segments go; a truncation cuts the
one holding the offset. On disk, deletions go in the order that leaves a log a start can read
if a crash comes part way (tests/test_crash_points.py).

A part of the Log (kshim.log.log), mixed into it: these methods work on the Log's segments under
its locks, as its own do. Apart from log.py because what removes records is a concern of its
own, beside what adds and reads them."""
from __future__ import annotations

import os
import threading
from bisect import bisect_right
from typing import TYPE_CHECKING, Callable

from wire.records import HEADER_SIZE, read_header

from .segment import Segment
from kshim.log.config import LogConfig


class SegmentDeletion:
    """Mixed into kshim.log.log.Log. The state below is the Log's (set by its constructor);
    public methods take its locks as the Log's do (its docstring)."""
    config: LogConfig
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    truncations: int  # bumped by truncate_to / reset: a clean planned before is void
    _lock: threading.Lock
    _write_lock: threading.Lock
    _closed: bool
    _dir: str
    _dir_dirty: bool
    _segments: list[Segment]
    _bases: list[int]
    _clock: Callable[[], int]

    if TYPE_CHECKING:  # the Log's
        def _roll(self) -> Segment: ...

        def _write_start_offset(self) -> None: ...

    def truncate_to(self, offset: int) -> bool:
        """Drop everything at or after ``offset`` (replication's divergence truncation). An offset
        inside a batch truncates to that batch's base offset, since batches are kept whole; the log
        end offset becomes that base. The log start offset follows if it ends up beyond the end.
        Returns whether anything was dropped."""
        with self._write_lock, self._lock:
            if offset >= self.log_end_offset:
                return False
            i = bisect_right(self._bases, offset) - 1
            if i < 0:
                self._reset_at(offset)
                return True
            # newest first: a crash part way leaves a prefix of the log, never a hole that a
            # start would take for data (the segments after it would still be read)
            for seg in reversed(self._segments[i + 1:]):
                seg.delete()
            del self._segments[i + 1:]
            del self._bases[i + 1:]
            seg = self._segments[i]
            pos = seg.position_of(offset)
            if pos is None:
                pos, new_next = seg.size, seg.next_offset
            else:  # the batch holding `offset`, or (a gap left by cleaning) the first after it
                with seg.reading() as fd:
                    new_next = min(offset, read_header(os.pread(fd, HEADER_SIZE, pos), 0)[0])
            self.truncations += 1
            seg.truncate(pos, new_next)
            if seg.size and seg.first_append_ms is None:
                seg.first_append_ms = self._clock()
            self.log_end_offset = seg.next_offset
            self.size_bytes = sum(s.size for s in self._segments)
            self._dir_dirty = True
            if self.log_start_offset > self.log_end_offset:
                self.log_start_offset = self.log_end_offset
                self._write_start_offset()
            return True

    def reset_to(self, offset: int) -> None:
        """Start over, empty, at ``offset``: a follower whose whole log lies below the leader's
        log start offset (retention or DeleteRecords moved on while it was away)."""
        with self._write_lock, self._lock:
            self._reset_at(offset)

    def _reset_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (log start = log end = offset)."""
        self.truncations += 1
        for seg in self._segments:
            seg.delete()
        self._segments = [Segment.create(self._dir, offset, self.config.index_interval_bytes)]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = offset
        self.size_bytes = 0
        self._dir_dirty = True
        self._write_start_offset()


    def _count_below(self, offset: int) -> int:
        n = 0
        for seg in self._segments:
            if seg.next_offset > offset:
                break
            n += 1
        return n

    def _delete_front(self, n: int) -> int:
        """Delete the n oldest segments. Taking the active one too means rolling first (as Kafka
        does), so the log keeps an empty active segment at its end offset."""
        if n >= len(self._segments):
            if self._segments[-1].size:
                self._roll()
            else:
                n = len(self._segments) - 1  # keep the empty active segment (it is the log end)
        if n <= 0:
            return 0
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for seg in doomed:
            self.size_bytes -= seg.size
            seg.delete()
        self._dir_dirty = True
        first = self._segments[0].base_offset
        if first > self.log_start_offset:
            self.log_start_offset = first
            self._write_start_offset()
        return n

    def apply_retention(self, now_ms: int | None = None, *, max_offset: int | None = None) -> int:
        """Delete the oldest whole segments whose largest timestamp is older than retention.ms,
        then the oldest while the log is larger than retention.bytes. Only segments entirely below
        ``max_offset`` (the high watermark; None = log end) qualify. A fully expired log becomes
        empty (active segment rolled first) with log start = log end. Returns segments deleted."""
        # the active segment may roll here: not while the log writer writes to it (skipped this
        # round then; retention runs every second)
        if not self._write_lock.acquire(blocking=False):
            return 0
        try:
            with self._lock:
                if self._closed:
                    return 0
                now = self._clock() if now_ms is None else now_ms
                cfg = self.config
                upper = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
                deleted = 0
                # cleanup.policy compact: only the cleaner removes records; empty: nothing does
                # (Kafka 4.2's infinite retention), only DeleteRecords
                if not cfg.delete:
                    return 0
                if cfg.retention_ms >= 0:
                    n = 0
                    for seg in self._segments:
                        if not seg.size or seg.next_offset > upper or now - seg.largest_timestamp() <= cfg.retention_ms:
                            break
                        n += 1
                    deleted += self._delete_front(n)
                if cfg.retention_bytes >= 0:
                    diff = self.size_bytes - cfg.retention_bytes
                    n = 0
                    for seg in self._segments:
                        if not seg.size or seg.next_offset > upper or diff < seg.size:
                            break
                        diff -= seg.size
                        n += 1
                    deleted += self._delete_front(n)
                return deleted
        finally:
            self._write_lock.release()
