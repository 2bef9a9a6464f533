"""Process tuning applied once at broker start-up.

glibc serves allocations above a (dynamic) threshold with fresh mmap()ed pages and returns freed
heap tops to the kernel. A broker allocates a megabyte-sized buffer per produce request and per
socket read, so by default nearly every such buffer comes back zero-filled from the kernel: on a
200 MB produce run that was ~160k minor page faults and more system time than all the Python code.
Raising both thresholds keeps freed buffers in the heap for reuse. Elsewhere than glibc this does
nothing. The garbage collector is told to leave the loaded code alone (freeze_loaded_objects), and
the memory sizes the partition budget and the open-file limit the cache of segment
descriptors (below).
"""
from __future__ import annotations

import ctypes
import gc
import logging

from kshim.configs.broker import BYTES_PER_PARTITION
from kshim.log import log as log_module
from kshim.log.open_files import OPEN_SEGMENTS

log = logging.getLogger("kshim.tuning")

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper bound for this setting on 64-bit
TRIM_THRESHOLD = 256 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Returns whether the allocator accepted the settings."""
    try:
        # the process's own symbols, libc's among them: find_library("c") would run ldconfig
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    log.debug("malloc thresholds %s", "raised" if ok else "unchanged")
    return ok


def freeze_loaded_objects() -> int:
    """Take every object alive now out of the cyclic garbage collector's passes (gc.freeze); the
    number frozen. Called once a server process has imported its code and before it opens any
    data: what exists then (modules, classes, functions, the codecs' tables: ~37,000 objects of a
    broker's ~50,000) lives as long as the process, so no collection has anything to find there.
    A full collection walked them all: 15-30 ms in which a broker answered nothing, a few times a
    minute under load (issue 18: acks=all on 3 brokers, the slowest Produce 14-27 ms before, 5-7
    ms after). Objects made later (partitions, connections, requests) are collected as before.
    No full collection first: it walks every loaded object (12-18 ms of a 0.25-0.3 s start) to
    find a handful of garbage objects (5 in a `kshim serve`, 15 in a cluster's broker), which
    staying frozen costs nothing worth that."""
    gc.freeze()
    return gc.get_freeze_count()


# ------------------------------------------------------------------ partitions, memory, descriptors
MEMORY_SHARE = 2  # idle partitions may take half the memory the broker may use
MIN_PARTITIONS = 16
FD_RESERVE_SHARE = 4  # a quarter of the open-file limit stays for connections, the metadata store, sockets
REGION_FDS_SHARE = 16  # of that quarter, a sixteenth of the limit for Fetch's file regions in flight
MIN_SEGMENT_FDS = 16
FD_TARGET = 1 << 20


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one (capped), as servers do; return the soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = FD_TARGET if hard == resource.RLIM_INFINITY else min(hard, FD_TARGET)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, e)
    return soft


def memory_limit() -> int:
    """Bytes the broker may use: the machine's memory, or less when its cgroup allows less."""
    total = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if not total:
        import os
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            total = 8 << 30  # unknown: assume a small server
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def default_partition_budget(memory_bytes: int) -> int:
    """Partition replicas a broker may host: a memory budget (segment descriptors are a cache,
    kshim.log.open_files, so the open-file limit no longer bounds them)."""
    return max(MIN_PARTITIONS, memory_bytes // MEMORY_SHARE // BYTES_PER_PARTITION)


def default_open_segments(fd_limit: int) -> int:
    """Segment descriptors (`.log`, `.index`, `.timeindex`) open at once: the open-file limit but
    the quarter kept for connections, the metadata store and Fetch's file regions."""
    return max(MIN_SEGMENT_FDS, fd_limit - fd_limit // FD_RESERVE_SHARE)


def configure_open_segments(requested: int | None) -> int:
    """Size the process's descriptor cache of segment files: `requested`, or from the open-file limit."""
    import resource

    fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    capacity = requested or default_open_segments(fd_limit)
    OPEN_SEGMENTS.configure(capacity)
    log_module.MAX_REGION_FDS = max(64, fd_limit // REGION_FDS_SHARE)  # Fetch's sendfile regions
    return capacity
