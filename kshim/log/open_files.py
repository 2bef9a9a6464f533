"""Segment file descriptors are a cache, not a budget: every segment's files (the `.log`, and the
active segment's `.index` and `.timeindex` while it takes entries) are opened on use and closed
when the least recently used, so the number of partitions a broker hosts is bounded by memory,
not by its open-file limit.

The bound counts descriptors, not segments (an active segment holds up to three). A user must
never find a descriptor closed under it (or, worse, its number reused by another file): every use
pins the segment for its duration (:meth:`OpenSegments.pin` / :meth:`Segment.reading`: an append,
an index entry, an fsync, a read, a scan), and a pinned segment is never evicted. The bound may be
passed while more segments than it are pinned at once; the next unpinned ones go first.

Closing a descriptor loses nothing written through it (write() put the bytes in the page cache),
and an fsync on a descriptor opened again flushes the file's dirty pages (Linux): a flush policy
that fsyncs after an eviction reopens the file and syncs it (kshim.log.segment.Segment.fsync).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Protocol

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# O_APPEND: every write lands at the end even if someone got the position wrong
READ_FLAGS = os.O_RDWR | os.O_APPEND | _CLOEXEC
INDEX_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | _CLOEXEC


class Segment(Protocol):
    """What the cache needs of kshim.log.segment.Segment (which imports this module)."""
    stem: str
    _fd: int          # -1: not open, -2: closed for good
    idx_fd: int | None
    tidx_fd: int | None
    _pins: int


DEFAULT_CAPACITY = 4096


def _held(seg: Segment) -> int:
    return (seg._fd >= 0) + (seg.idx_fd is not None) + (seg.tidx_fd is not None)


class OpenSegments:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[Segment, None] = OrderedDict()  # segments holding a descriptor, LRU first
        self._count = 0   # descriptors those segments hold
        self.opened = 0   # counters, for tests and `kshim ctl status`
        self.evicted = 0

    def configure(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(4, capacity)
            self._evict()

    # ------------------------------------------------------------------ pins
    def pin(self, seg: Segment) -> int:
        """Pin `seg` and return its `.log` descriptor (opened if it has none; -1 if the segment is
        closed for good: the caller's os call then fails with EBADF). Pair with :meth:`unpin`."""
        with self._lock:
            seg._pins += 1
            fd = seg._fd
            if fd >= 0:
                self._open.move_to_end(seg)
                return fd
            if fd != -1:
                return -1
        # opened outside the lock: an open waits on the disk (milliseconds on a busy one), and the
        # threads that open thousands of replicas at a start queued behind each other's here
        try:
            opened = os.open(seg.stem + ".log", READ_FLAGS)
        except BaseException:
            self.unpin(seg)
            raise
        with self._lock:
            fd = seg._fd
            if fd == -1:
                fd = seg._fd = opened
                opened = -1
                self.opened += 1
                self._added(seg)
            elif fd >= 0:
                self._open.move_to_end(seg)
            else:
                fd = -1
        if opened >= 0:  # another thread opened it first, or it was closed for good meanwhile
            os.close(opened)
        return fd

    def unpin(self, seg: Segment) -> None:
        with self._lock:
            seg._pins -= 1
            if self._count > self.capacity:
                self._evict()

    def pinned(self, seg: Segment) -> _Pinned:
        """`with cache.pinned(seg) as fd:` the `.log` descriptor, kept open until the block ends."""
        return _Pinned(self, seg)

    # ------------------------------------------------------------------ descriptors of a segment
    def adopt(self, seg: Segment) -> None:
        """`seg` just opened its `.log` itself (a new segment): it counts toward the bound."""
        with self._lock:
            self.opened += 1
            self._added(seg)

    def index_descriptor(self, seg: Segment, time_index: bool) -> int:
        """(The caller holds a pin.) The descriptor of `seg`'s offset or time index, opened if it
        has none."""
        fd = seg.tidx_fd if time_index else seg.idx_fd
        if fd is not None:
            return fd
        fd = os.open(seg.stem + (".timeindex" if time_index else ".index"), INDEX_FLAGS, 0o644)
        with self._lock:
            if time_index:
                seg.tidx_fd = fd
            else:
                seg.idx_fd = fd
            self.opened += 1
            self._added(seg)
        return fd

    def close_indexes(self, seg: Segment) -> None:
        """`seg` stops taking index entries (a roll): its index descriptors close now."""
        with self._lock:
            for fd in (seg.idx_fd, seg.tidx_fd):
                if fd is not None:
                    os.close(fd)
                    self._count -= 1
            seg.idx_fd = seg.tidx_fd = None
            if seg._fd < 0:
                self._open.pop(seg, None)

    def close(self, seg: Segment) -> None:
        """`seg` is closing for good: its descriptors close and it leaves the cache."""
        with self._lock:
            if self._open.pop(seg, False) is None:
                self._count -= _held(seg)
            for fd in (seg.idx_fd, seg.tidx_fd, seg._fd):
                if fd is not None and fd >= 0:
                    os.close(fd)
            seg.idx_fd = seg.tidx_fd = None
            seg._fd = -2

    def drop_unpinned(self) -> None:
        """Close every descriptor no one uses now (tests; a broker short of descriptors)."""
        with self._lock:
            capacity, self.capacity = self.capacity, 0
            self._evict()
            self.capacity = capacity

    def open_count(self) -> int:
        """Descriptors held by segments now."""
        with self._lock:
            return self._count

    # ------------------------------------------------------------------ under the lock
    def _added(self, seg: Segment) -> None:
        self._count += 1
        self._open[seg] = None
        self._open.move_to_end(seg)
        if self._count > self.capacity:
            self._evict()

    def _evict(self) -> None:
        excess = self._count - self.capacity
        if excess <= 0 or not self._open:
            return
        victims = []
        for seg in self._open:  # least recently used first; pinned ones are skipped
            if excess <= 0:
                break
            if not seg._pins:
                victims.append(seg)
                excess -= _held(seg)
        for seg in victims:
            del self._open[seg]
            self._count -= _held(seg)
            for fd in (seg._fd, seg.idx_fd, seg.tidx_fd):
                if fd is not None and fd >= 0:
                    os.close(fd)
            seg._fd = -1
            seg.idx_fd = seg.tidx_fd = None
            self.evicted += 1


class _Pinned:
    __slots__ = ("_cache", "_seg")

    def __init__(self, cache: OpenSegments, seg: Segment) -> None:
        self._cache = cache
        self._seg = seg

    def __enter__(self) -> int:
        return self._cache.pin(self._seg)

    def __exit__(self, *exc: object) -> None:
        self._cache.unpin(self._seg)


# one per process: a broker process is one broker (kshim.tuning sizes it from the open-file limit)
OPEN_SEGMENTS = OpenSegments()
