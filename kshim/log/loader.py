"""Opening a log's directory (Kafka's LogLoader): what a crash or an interrupted clean left there
is put right before the Log serves. A half-done swap of cleaned segments is finished or
discarded, leftover files go (interrupted index rewrites, index files of deleted segments), the
segments are opened, and the active one is recovered (scanned whole, a torn tail cut) unless a
clean stop vouched for it.

Apart from the Log (kshim.log.log), which calls load_segments from its constructor: this runs
once, before the Log has any state or lock, works on the directory alone and hands the Log its
segments. The file names a log directory holds are defined here, the Log's own included."""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Callable

from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, TMP_SUFFIX, Segment, scan
from kshim.log.files import fsync_dir
from kshim.log.summary import ActiveEnd
from kshim.log.txnindex import TXNINDEX_SUFFIX

log = logging.getLogger("kshim.log")

CLEAN_SHUTDOWN_FILE = ".kshim-clean-shutdown"
START_OFFSET_FILE = "log-start-offset"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_INDEX_NAME = re.compile(r"^(\d{20})\.(?:index|timeindex|txnindex)$")
_SWAP_NAME = re.compile(r"^(\d{20})\.log\.swap$")
CLEANED_SUFFIX = ".cleaned"  # a cleaned segment being written (discarded at open)
SWAP_SUFFIX = ".swap"        # a cleaned segment ready to replace its originals (completed at open)
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)


@dataclass
class LoadedSegments:
    segments: list[Segment]  # oldest first; empty when the directory held none
    files_at_open: frozenset[str]  # the directory's files once the swaps were finished (see Log)
    recovered: bool  # the active segment was scanned whole (no clean stop vouched for it)
    swapped: bool  # an interrupted swap was finished: the directory changed


def load_segments(directory: str, interval: int, vouched: ActiveEnd | None,
                  now_ms: Callable[[], int]) -> LoadedSegments:
    """The segments of the log in `directory`, the directory put right first. ``vouched``: the
    (base offset, size) of the active segment the log dir's clean-shutdown marker recorded for this
    log (the caller removed the marker): clean if the segment is still that one at that size (else
    something wrote it after the stop). A marker of the log's own (a log closed alone: a replica
    move) vouches too, and is removed: from here on, a crash must be detectable."""
    clean = False
    names = os.listdir(directory)
    if CLEAN_SHUTDOWN_FILE in names:
        os.unlink(os.path.join(directory, CLEAN_SHUTDOWN_FILE))  # from here on, a crash must be detectable
        names.remove(CLEAN_SHUTDOWN_FILE)
        clean = True
    swapped = False
    if any(n.endswith(CLEANED_SUFFIX) or n.endswith(SWAP_SUFFIX) for n in names):
        swapped = finish_swaps(directory)  # an interrupted clean (rare): list again after it
        names = os.listdir(directory)
    # what the directory held at open: the partition's own files (checkpoints, snapshot) are
    # read only when listed here (no failed open per missing file at a start of thousands)
    files_at_open = frozenset(names)
    bases = sorted(int(m.group(1)) for n in names if (m := _SEGMENT_NAME.match(n)))
    have = set(bases)
    for name in names:  # leftovers: interrupted index rewrites, index files of deleted segments
        m = _INDEX_NAME.match(name)
        if name.endswith(TMP_SUFFIX) or name.endswith(".deleted") or (m and int(m.group(1)) not in have):
            os.unlink(os.path.join(directory, name))
    segments: list[Segment] = []
    recovered = False
    for i, base in enumerate(bases):
        seg = Segment.open(directory, base, interval)
        segments.append(seg)
        if i + 1 < len(bases):
            seg.next_offset = bases[i + 1]
            seg.open_inactive()
        else:
            if vouched is not None and (base, seg.size) == vouched:
                clean = True
            elif vouched is not None and not clean:
                log.warning("%s: written after its clean-shutdown marker (active segment %d of %d "
                            "bytes, the marker says %d of %d): recovered", directory, base,
                            seg.size, *vouched)
            recovered = not seg.open_active(clean)
            if seg.first_append_ms is None and seg.size:
                seg.first_append_ms = now_ms()
    return LoadedSegments(segments, files_at_open, recovered, swapped)


def finish_swaps(directory: str) -> bool:
    """Recovery of an interrupted clean (Kafka's): ``.cleaned`` files were never committed, so
    they go; a ``<base>.log.swap`` was complete when renamed (Log.replace_segments), so the swap
    is finished: the segments it replaces (base offsets in [base, its next offset)) go and it
    takes their place. Returns whether a swap was finished."""
    swapped = False
    names = os.listdir(directory)
    for name in names:
        if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not _SWAP_NAME.match(name)
                                             and not os.path.exists(os.path.join(
                                                 directory, name[:20] + LOG_SUFFIX + SWAP_SUFFIX))):
            os.unlink(os.path.join(directory, name))  # index swaps without their log swap too
    for name in sorted(names):
        m = _SWAP_NAME.match(name)
        if not m:
            continue
        base = int(m.group(1))
        swap = os.path.join(directory, name)
        fd = os.open(swap, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            end = base
            for _, h, _ in scan(fd, 0, os.fstat(fd).st_size, chunk=1 << 16):
                end = h[0] + h[6] + 1
        finally:
            os.close(fd)
        for other in os.listdir(directory):
            om = _SEGMENT_NAME.match(other)
            if om and base <= int(om.group(1)) < max(end, base + 1):
                stem = os.path.join(directory, om.group(1))
                for suffix in SEGMENT_SUFFIXES:
                    try:
                        os.unlink(stem + suffix)
                    except FileNotFoundError:
                        pass
        stem = os.path.join(directory, m.group(1))
        for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            if os.path.exists(stem + suffix + SWAP_SUFFIX):
                os.replace(stem + suffix + SWAP_SUFFIX, stem + suffix)
        os.replace(swap, stem + LOG_SUFFIX)
        fsync_dir(directory)
        swapped = True
    return swapped


def read_start_offset(directory: str) -> int | None:
    """The log start offset the Log checkpointed (START_OFFSET_FILE), None if none or unreadable."""
    try:
        with open(os.path.join(directory, START_OFFSET_FILE)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None
