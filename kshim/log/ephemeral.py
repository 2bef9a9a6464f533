"""Where ephemeral data goes. Standard library only: the pytest plugin makes these directories
before any broker code is loaded in the test process."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def ephemeral_dir(prefix: str = "kshim-ephemeral-") -> Path:
    """A new directory for data that must not outlive its process (`kshim serve --ephemeral`, the
    test fixtures): on /dev/shm (tmpfs: memory, no disk writeback) when it is there and writable,
    else in the system's temporary directory. The caller deletes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_base()))


def _base() -> Path:
    """/dev/shm when it is there and writable, else the system's temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def abandoned_dirs(prefix: str = "kshim-ephemeral-") -> list[tuple[Path, int]]:
    """The ephemeral data directories a killed `kshim serve --ephemeral` left behind (a SIGKILL
    skips its cleanup): a broker ran there (its `.lock` file is there) and no process holds the
    lock any more. Each with its size in bytes; tmpfs keeps them in memory until deleted."""
    import fcntl  # here: the pytest plugin imports this module before anything else
    found = []
    for d in _base().glob(f"{prefix}*"):
        try:
            fd = os.open(d / ".lock", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # no broker ever locked it (being made now), or not ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live broker holds it
        finally:
            os.close(fd)
        found.append((d, sum(f.stat().st_size for f in d.rglob("*") if f.is_file())))
    return found
