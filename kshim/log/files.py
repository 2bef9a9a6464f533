"""Small file helpers shared by the log's checkpoints: atomic replacement and directory fsync."""
from __future__ import annotations

import os

TMP_SUFFIX = ".tmp"


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make renames and new files in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str, *, fsync: bool = False) -> None:
    """Replace `path` with `text` through a temporary file: a crash leaves the old or the new
    content, never a torn mix. With fsync, also durable against a machine crash."""
    tmp = f"{os.fspath(path)}{TMP_SUFFIX}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(os.fspath(path)) or ".")
