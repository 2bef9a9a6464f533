"""Process tuning applied once at broker start-up.

glibc serves allocations above a (dynamic) threshold with fresh mmap()ed pages and returns freed
heap tops to the kernel. A broker allocates a megabyte-sized buffer per produce request and per
socket read, so by default nearly every such buffer comes back zero-filled from the kernel: on a
200 MB produce run that was ~160k minor page faults and more system time than all the Python code.
Raising both thresholds keeps freed buffers in the heap for reuse. Elsewhere than glibc this does
nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("kshim.tuning")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper bound for this setting on 64-bit
TRIM_THRESHOLD = 256 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Returns whether the allocator accepted the settings."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    log.debug("malloc thresholds %s", "raised" if ok else "unchanged")
    return ok
