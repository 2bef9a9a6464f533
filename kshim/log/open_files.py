"""The descriptors of inactive segments: opened on first use, closed by a least-recently-used
bound, so a broker with many partitions and long logs stays within its open-file limit.

Each partition's active segment keeps its `.log` open (appends go there), and its two index files
once it took an index entry; an older segment
is read only by fetches from far back, the cleaner, retention and ListOffsets, so its `.log`
descriptor is opened when one of them needs it and closed when more than `capacity` older
segments are open. A reader must never find its descriptor closed (or, worse, reused by another
file): every use of an older segment's descriptor pins the segment for its duration
(`Segment.reading`), and a pinned segment is never evicted.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator, Protocol


class Segment(Protocol):
    """What the bound needs of kshim.log.segment.Segment (which imports this module)."""
    stem: str
    _fd: int
    _pins: int
    active: bool

DEFAULT_CAPACITY = 1024
_READ_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class OpenSegments:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[Segment, None] = OrderedDict()  # inactive segments with a descriptor
        self.opened = 0  # counters, for tests and `kshim ctl status`
        self.evicted = 0

    def configure(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(1, capacity)
            self._evict()

    def descriptor(self, seg: Segment) -> int:
        """`seg`'s `.log` descriptor, opened if it has none (it then counts as inactive)."""
        with self._lock:
            fd = seg._fd
            if fd >= 0:
                return self._used(seg, fd)
            if fd != -1:
                return -1  # closed for good: the caller's os call fails with EBADF
        # opened outside the lock: an open waits on the disk (milliseconds on a busy one), and the
        # threads that open thousands of replicas at a start queued behind each other's here
        opened = os.open(seg.stem + ".log", _READ_FLAGS)
        with self._lock:
            fd = seg._fd
            if fd == -1:
                fd = seg._fd = opened
                self.opened += 1
                opened = -1
            elif fd < -1:
                fd = -1  # closed for good meanwhile
            if fd >= 0:
                fd = self._used(seg, fd)
        if opened >= 0:  # another thread opened it first, or it was closed for good meanwhile
            os.close(opened)
        return fd

    def _used(self, seg: Segment, fd: int) -> int:
        """(Under the lock.) An inactive segment counts toward the bound, most recent last."""
        if not seg.active:
            self._open[seg] = None
            self._open.move_to_end(seg)
            self._evict()
        return fd

    def touch(self, seg: Segment) -> None:
        with self._lock:
            if seg in self._open:
                self._open.move_to_end(seg)

    def activated(self, seg: Segment) -> None:
        """`seg` became the active segment again (a truncation): it keeps its descriptor."""
        with self._lock:
            self._open.pop(seg, None)

    def deactivated(self, seg: Segment) -> None:
        """`seg` was rolled: from now on its descriptor is one of the bounded ones."""
        with self._lock:
            if seg._fd >= 0:
                self._open[seg] = None
                self._evict()

    def forget(self, seg: Segment) -> None:
        """`seg` is closing: it leaves the bound (Segment.close closes the descriptor itself)."""
        with self._lock:
            self._open.pop(seg, None)

    @contextmanager
    def pinned(self, seg: Segment) -> Iterator[int]:
        """`seg`'s descriptor, kept open until the block ends (a scan of the whole segment)."""
        with self._lock:
            seg._pins += 1
        try:
            yield self.descriptor(seg)
        finally:
            with self._lock:
                seg._pins -= 1

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)

    def _evict(self) -> None:
        excess = len(self._open) - self.capacity
        if excess <= 0:
            return
        for seg in list(self._open):
            if excess <= 0:
                break
            if seg._pins:
                continue  # in use: the next eviction takes it
            del self._open[seg]
            fd, seg._fd = seg._fd, -1
            os.close(fd)
            self.evicted += 1
            excess -= 1


# one per process: a broker process is one broker (kshim.tuning sizes it from the open-file limit)
OPEN_SEGMENTS = OpenSegments()
