"""A partition directory's identity and its removal, as Kafka's LogManager keeps them.

- `partition.metadata` names the topic id a directory holds (Kafka's PartitionMetadataFile:
  ``version: 0`` and ``topic_id: <base64url>``). A broker that was down while a topic was deleted
  and created again under the same name finds the old directory there: the id tells it the data
  is not the new topic's.
- A directory is removed by renaming it to ``<name>.<hex>-delete`` (or ``-stray``: see
  DirDeleter; atomic and quick, on the event loop) and deleting the files in a background thread
  once file.delete.delay.ms has passed; the renamed directories a stop or crash left are found by
  their suffix at the next start and deleted that long after it.
"""
from __future__ import annotations

import base64
import heapq
import itertools
import logging
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

from kshim.log.files import write_atomic

log = logging.getLogger("kshim.log")

METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"
# a replica's directory, or a move's unfinished copy of one (kshim.log.log_dirs), renamed to go
_RENAMED = re.compile(r"^.+-\d+(\.[0-9a-f]{32}-future)?\.[0-9a-f]{32}-(delete|stray)$")
DEFAULT_DELAY_MS = 60_000  # Kafka's file.delete.delay.ms (log.segment.delete.delay.ms) default


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id recorded in `directory`, or None (no file, an older kshim's, or unreadable)."""
    try:
        text = (directory / METADATA_FILE).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    raw = fields.get("topic_id", "").strip()
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except ValueError:
        return None


def write_topic_id(directory: Path, topic_id: uuid.UUID, *, replace: bool = True) -> None:
    """`replace` False: the directory has no readable file yet (a new replica), so it is written in
    place, one file operation instead of a temporary file and a rename: a torn one reads as no id,
    which the next start writes again (and a directory without an id is never deleted as stray)."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")
    text = f"version: 0\ntopic_id: {encoded}\n"
    if replace:
        write_atomic(directory / METADATA_FILE, text)
    else:
        with open(directory / METADATA_FILE, "w", encoding="ascii") as f:
            f.write(text)


class DirDeleter:
    """Removes partition directories as Kafka's LogManager does: renamed at once (``-delete`` for
    a replica the metadata removed, ``-stray`` for one found on disk that the metadata does not
    give this broker), logged with its topic id, reason and size, and deleted by one background
    thread only `delay_ms` later (Kafka's file.delete.delay.ms), so a wrong decision can still be
    undone by renaming the directory back while the broker is stopped."""

    def __init__(self, delay_ms: int = DEFAULT_DELAY_MS) -> None:
        self.delay_ms = delay_ms  # the broker-level file.delete.delay.ms (set by the replica manager)
        self._due: list[tuple[float, int, Path]] = []  # (monotonic due time, order, renamed path)
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending = 0

    def remove(self, directory: Path, why: str, *, stray: bool = False, topic_id: uuid.UUID | None = None) -> Path:
        """Rename `directory` out of the way at once and delete it `delay_ms` later; returns the
        new name. A stray is logged at WARNING (nobody asked for it), a removal the metadata
        decided at INFO."""
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{STRAY_SUFFIX if stray else DELETE_SUFFIX}")
        size = _size(directory)
        try:
            os.replace(directory, target)
        except FileNotFoundError:
            return target
        (log.warning if stray else log.info)(
            "%s %s (topic id %s, %d bytes): %s; renamed to %s, deleted in %.0f s",
            "stray replica" if stray else "removing replica", directory.name,
            topic_id if topic_id is not None else read_topic_id(target), size, why, target.name,
            self.delay_ms / 1000)
        self._enqueue(target, self.delay_ms)
        return target

    def sweep(self, data_dir: Path) -> int:
        """Queue the renamed directories a previous run left in `data_dir` (deleted `delay_ms`
        from now, as Kafka does with the ones it finds at start); returns how many."""
        try:
            names = os.listdir(data_dir)
        except FileNotFoundError:
            return 0
        found = [data_dir / n for n in names if _RENAMED.match(n)]
        for path in found:
            self._enqueue(path, self.delay_ms)
        return len(found)

    def wait_idle(self, timeout_s: float) -> bool:
        """Whether every queued directory is gone within `timeout_s` (tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout_s)

    def _enqueue(self, path: Path, delay_ms: int) -> None:
        with self._changed:
            self._pending += 1
            heapq.heappush(self._due, (time.monotonic() + delay_ms / 1000, next(self._order), path))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kshim-dir-deleter", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():  # bounded: waits until the next is due
                    self._changed.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _, _, path = heapq.heappop(self._due)
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not delete %s: %s", path, e)
            with self._changed:
                self._pending -= 1
                self._changed.notify_all()


def _size(directory: Path) -> int:
    """The bytes of the files in a partition directory (it has no subdirectories)."""
    try:
        with os.scandir(directory) as entries:
            return sum(e.stat(follow_symlinks=False).st_size for e in entries if e.is_file(follow_symlinks=False))
    except OSError:
        return 0
