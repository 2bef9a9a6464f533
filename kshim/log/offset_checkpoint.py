"""Kafka's per-log-dir offset checkpoint files (OffsetCheckpointFile): one file per log dir
holding one offset per partition, in place of a small file in every partition directory.

    0                 <- version
    2                 <- number of entries
    topic 0 1234      <- topic, partition, offset (whitespace-separated)
    topic 1 17

`replication-offset-checkpoint` holds each replica's high watermark (Kafka's name and format);
written whole through a temporary file and a rename, so a crash leaves the old or the new one.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable

from kshim.log.files import save_checkpoint

log = logging.getLogger("kshim.log")

VERSION = 0
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


def format_offsets(entries: Iterable[tuple[str, int, int]]) -> str:
    """(topic, partition, offset) entries as the file's text."""
    lines = [f"{topic} {index} {offset}" for topic, index, offset in entries]
    return "\n".join([str(VERSION), str(len(lines)), *lines, ""])


def write_offsets(path: Path, text: str, what: str, *, fsync: bool) -> bool:
    """Replace the file with `text` (format_offsets); False (logged once) when it cannot be written."""
    return save_checkpoint(path, text, what, fsync=fsync)


def read_offsets(path: Path) -> dict[str, int]:
    """`<topic>-<partition>` -> offset from the file; empty when it is missing. A file that is not
    in the format (a torn copy, another version) is logged and read as empty: every replica then
    falls back to its own older file or to 0, which a leader moves on from."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        log.warning("%s: unreadable (%s): ignored", path, e)
        return {}
    try:
        if len(lines) < 2 or int(lines[0]) != VERSION or int(lines[1]) != len(lines) - 2:
            raise ValueError("version or entry count does not match")
        out = {}
        for line in lines[2:]:
            topic, index, offset = line.split()
            out[f"{topic}-{int(index)}"] = int(offset)
        return out
    except ValueError as e:
        log.warning("%s: not an offset checkpoint (%s): ignored", path, e)
        return {}


__all__ = ["REPLICATION_OFFSET_CHECKPOINT", "format_offsets", "read_offsets", "write_offsets"]
