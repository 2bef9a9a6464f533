"""Small file helpers shared by the log's checkpoints: atomic replacement and directory fsync."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger("kshim.log")

TMP_SUFFIX = ".tmp"
_failing: set[str] = set()  # checkpoints whose last write failed: logged once until one works


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make renames and new files in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(directory: str | os.PathLike) -> None:
    """Make everything written to the file system holding `directory` durable with one syncfs(2)
    (a clean stop of thousands of partitions: one call instead of an fsync per file); os.sync()
    where syncfs is missing."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _syncfs is None or _syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    # CDLL(None) is the process's own symbols (libc among them); ctypes.util.find_library would
    # run ldconfig in a subprocess, ~50 ms of every start
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_syncfs = _load_syncfs()


def write_atomic(path: str | os.PathLike, text: str | bytes, *, fsync: bool = False) -> None:
    """Replace `path` with `text` through a temporary file: a crash leaves the old or the new
    content, never a torn mix. With fsync, also durable against a machine crash."""
    tmp = f"{os.fspath(path)}{TMP_SUFFIX}"
    data = text if isinstance(text, bytes) else text.encode("ascii")
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(os.fspath(path)) or ".")


def save_checkpoint(path: str | os.PathLike, text: str, what: str, *, fsync: bool = False) -> bool:
    """write_atomic for state the log can rebuild or that a later write repeats (high watermark,
    log start offset, leader epochs): on a full disk it is kept in memory and saved again later,
    instead of failing the request or the housekeeping that wrote it. Logged once per file while
    it fails, and once when it works again. Returns whether it was written."""
    key = os.fspath(path)
    try:
        write_atomic(path, text, fsync=fsync)
    except OSError as e:
        try:
            os.unlink(f"{key}{TMP_SUFFIX}")
        except OSError:
            pass
        if key not in _failing:
            _failing.add(key)
            log.warning("cannot save the %s (%s): kept in memory, saved again later: %s", what, key, e)
        return False
    if key in _failing:
        _failing.discard(key)
        log.warning("saved the %s again (%s)", what, key)
    return True


