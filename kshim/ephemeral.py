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
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
