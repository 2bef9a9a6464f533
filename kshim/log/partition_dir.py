"""A partition directory's identity and its removal, as Kafka's LogManager keeps them.

- `partition.metadata` names the topic id a directory holds (Kafka's PartitionMetadataFile:
  ``version: 0`` and ``topic_id: <base64url>``). A broker that was down while a topic was deleted
  and created again under the same name finds the old directory there: the id tells it the data
  is not the new topic's.
- A directory is removed by renaming it to ``<name>.<hex>-delete`` (atomic and quick, on the
  event loop) and deleting the files in a background thread; leftovers of a crash are found by
  their suffix at the next start and deleted then.
"""
from __future__ import annotations

import base64
import logging
import os
import queue
import re
import shutil
import threading
import uuid
from pathlib import Path

from kshim.log.files import write_atomic

log = logging.getLogger("kshim.log")

METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"
_DELETED = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")


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
    """Deletes renamed partition directories in one background thread, in the order given."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def remove(self, directory: Path) -> Path:
        """Rename `directory` out of the way at once and delete it later; returns the new name."""
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        try:
            os.replace(directory, target)
        except FileNotFoundError:
            return target
        self._enqueue(target)
        return target

    def sweep(self, data_dir: Path) -> int:
        """Queue the renamed directories a crash left in `data_dir`; returns how many."""
        try:
            names = os.listdir(data_dir)
        except FileNotFoundError:
            return 0
        found = [data_dir / n for n in names if _DELETED.match(n)]
        for path in found:
            self._enqueue(path)
        return len(found)

    def wait_idle(self, timeout_s: float) -> bool:
        """Whether every queued directory is gone within `timeout_s` (tests, clean shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def _enqueue(self, path: Path) -> None:
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kshim-dir-deleter", daemon=True)
                self._thread.start()
        self._queue.put(path)

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            if path is None:
                return
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not delete %s: %s", path, e)
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
