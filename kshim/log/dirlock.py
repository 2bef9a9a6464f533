"""One process per data directory: an OS lock taken before anything in the directory is read.

Two brokers appending to the same logs duplicate offsets and corrupt them, so every process that
owns a data directory (`kshim serve`, the cluster's controller, each broker process) locks
`<dir>/.lock` with flock(2) first. The lock dies with its process (even on SIGKILL), so a stale
lock file never blocks a restart; the file's content only says who holds it, for the message.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

LOCK_NAME = ".lock"


class DataDirInUse(Exception):
    """Another live process holds the directory; the message says which."""


class DataDirLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def update_owner(self, owner: str) -> None:
        """Say more about the holder once it is known (the port bound for --port 0)."""
        if self._fd is not None:
            _write_owner(self._fd, owner)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def lock_data_dir(data_dir: Path, owner: str) -> DataDirLock:
    """Lock `data_dir` (created if missing) for this process, or raise DataDirInUse.

    `owner` says what holds it, e.g. "kshim serve on 127.0.0.1:9092"; the lock is held until
    `release()` or the end of the process.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe(os.pread(fd, 4096, 0))
        os.close(fd)
        raise DataDirInUse(f"data directory {data_dir} is in use by {holder}; stop it first or "
                           f"give another --data-dir") from None
    except BaseException:
        os.close(fd)
        raise
    _write_owner(fd, owner)
    return DataDirLock(path, fd)


def _write_owner(fd: int, owner: str) -> None:
    info = json.dumps({"pid": os.getpid(), "owner": owner, "since": time.strftime("%Y-%m-%d %H:%M:%S")})
    os.ftruncate(fd, 0)
    os.pwrite(fd, info.encode() + b"\n", 0)


def _describe(raw: bytes) -> str:
    try:
        info = json.loads(raw)
        return f"{info['owner']} (pid {info['pid']}, since {info['since']})"
    except (ValueError, KeyError, TypeError):
        return "another process"  # it has locked the file and not written it yet
