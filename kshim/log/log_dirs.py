"""A broker's log directories (Kafka's `log.dirs`): where each partition replica lives, where a
new one goes, and the files of a replica moving to another directory (AlterReplicaLogDirs).

- Each replica lives in exactly one directory, as `<dir>/<topic>-<partition>`. A new replica goes
  to the directory holding the fewest (Kafka's default placement), unless AlterReplicaLogDirs
  named one for it before it existed.
- A replica found in two directories at start is refused, as Kafka refuses it: the broker does
  not start until one of them is deleted by hand.
- A moving replica is copied to `<dest>/<topic>-<partition>.<hex>-future` (Kafka's future log).
  Once complete it holds `MOVE_COMPLETE` (written after its files are durable); then the source
  is renamed for deletion and the future directory renamed to the replica's name. At start
  (`scan`) a complete future directory finishes its move (the source, if still there, is
  deleted); an incomplete one is deleted and its move starts over (`pending_moves`). There are
  never two live copies: the source stays the replica until the marker exists, the future one is
  the replica from then on.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kshim.log.dirlock import DataDirLock, lock_data_dir
from kshim.log.files import fsync_dir, write_atomic
from kshim.log.partition_dir import DirDeleter
from kshim.log.summary import ActiveEnd, LogSummary


log = logging.getLogger("kshim.log")

FUTURE_SUFFIX = "-future"
MOVE_COMPLETE = ".kshim-move-complete"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_FUTURE_DIR = re.compile(r"^(.+-\d+)\.([0-9a-f]{32})-future$")
COPY_CHUNK = 1 << 20


CLEAN_MARKER = ".kshim-clean-shutdown"  # Kafka's .kafka_cleanshutdown, one per log dir
_CLEAN_HEADER = "kshim clean shutdown v3"
_CLEAN_HEADER_V2 = "kshim clean shutdown v2"  # an older kshim's: each log's active segment only


def write_clean_marker(log_dir: Path, logs: Mapping[str, LogSummary | ActiveEnd]) -> None:
    """Written last by a clean stop, after the file system was synced: the replica directories in
    `log_dir` whose logs were closed cleanly (listed, so a directory this run never opened, or
    one whose close failed, is never vouched for), each with its summary (kshim.log.summary:
    the active segment's base offset and size, so a log written after the stop no longer
    matches and is recovered; and what the next start serves the partition from before it opens
    it), or only the active segment for a log that cannot be summarised. Synced itself."""
    lines = [summary.line(name) if isinstance(summary, LogSummary) else f"{name} {summary[0]} {summary[1]}"
             for name, summary in sorted(logs.items())]
    write_atomic(log_dir / CLEAN_MARKER, "\n".join([_CLEAN_HEADER, *lines, ""]), fsync=True)


def take_clean_marker(log_dir: Path) -> dict[str, LogSummary | ActiveEnd]:
    """The replica directories `log_dir`'s marker vouches for, each with its summary, or its active
    segment alone (a log the stop could not summarise, or a marker of an older kshim); the marker
    is removed (and that made durable) first, so a crash from here on is seen at the next start.
    Empty without one, or for one no version of this code wrote."""
    path = log_dir / CLEAN_MARKER
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError):
        lines = []
    path.unlink(missing_ok=True)
    fsync_dir(log_dir)
    logs: dict[str, LogSummary | ActiveEnd] = {}
    topic_ids: dict[str, uuid.UUID] = {}
    for line in lines[1:] if lines and lines[0] in (_CLEAN_HEADER, _CLEAN_HEADER_V2) else ["?"]:
        name, *fields = line.split(" ")
        try:
            if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
                logs[name] = (int(fields[0]), int(fields[1]))
            else:
                logs[name] = LogSummary.parse(fields, topic_ids)
        except ValueError:
            log.warning("%s: unreadable clean-shutdown marker: every log there is recovered", path)
            return {}
    return logs


class DuplicateReplica(Exception):
    """The same partition is in two log directories: the broker must not guess which is live."""


def log_dirs_arg(text: str) -> list[Path]:
    """`--log-dirs A,B` -> [A, B] (absolute, in order; empty or a dir given twice is refused)."""
    dirs = [Path(os.path.abspath(p.strip())) for p in text.split(",") if p.strip()]
    if not dirs:
        raise argparse.ArgumentTypeError("needs at least one directory")
    if len(set(dirs)) != len(dirs):
        raise argparse.ArgumentTypeError(f"a directory is listed twice: {text}")
    return dirs


def subdirs(d: Path) -> list[str]:
    """The names of the directories in `d`, sorted (a listing's file types: no stat per entry,
    which at a start of 10,000 partitions cost a second)."""
    with os.scandir(d) as entries:
        return sorted(e.name for e in entries if e.is_dir())


def future_name(name: str, move_id: str) -> str:
    return f"{name}.{move_id}{FUTURE_SUFFIX}"


@dataclass
class ScanResult:
    located: dict[str, Path] = field(default_factory=dict)  # replica dir name -> its log dir
    pending_moves: dict[str, Path] = field(default_factory=dict)  # name -> destination log dir, to start over


def scan(dirs: list[Path], deleter: DirDeleter) -> ScanResult:
    """Find every replica directory in `dirs`, finishing or restarting interrupted moves first.
    Raises DuplicateReplica when a partition is in two of them."""
    result = ScanResult()
    futures: list[tuple[Path, str, Path]] = []
    for d in dirs:
        for entry in subdirs(d):
            m = _FUTURE_DIR.match(entry)
            if m:
                futures.append((d, m.group(1), d / entry))
    for d, name, future in futures:
        if (future / MOVE_COMPLETE).exists():
            for other in dirs:  # the source of a move that crashed before it was renamed away
                if other != d and (other / name).is_dir():
                    log.info("finishing the move of %s to %s: deleting its old copy in %s", name, d, other)
                    deleter.remove(other / name, f"its move to {d} was complete")
            if (d / name).exists():
                deleter.remove(d / name, "a completed move's copy replaces it")
            os.replace(future, d / name)
            (d / name / MOVE_COMPLETE).unlink()
            fsync_dir(str(d))
            log.info("finished the move of %s to %s (interrupted by a stop)", name, d)
        else:
            log.info("the move of %s to %s was interrupted before it was complete: it starts over", name, d)
            deleter.remove(future, "an unfinished copy of a move that starts over")
            result.pending_moves[name] = d
    for d in dirs:
        for entry in subdirs(d):
            if _PARTITION_DIR.match(entry):
                if entry in result.located:
                    raise DuplicateReplica(
                        f"partition {entry} is in two log directories, {result.located[entry]} and {d}: "
                        f"delete the copy that is not current (the one in a directory that failed "
                        f"recently) and start again")
                result.located[entry] = d
    for name in [n for n in result.pending_moves if n not in result.located]:
        del result.pending_moves[name]  # its replica is gone: nothing to move
    return result


def check_writable(d: Path) -> None:
    """Raise OSError when `d` cannot be written (checked at start for every log dir)."""
    probe = d / ".kshim-write-check"
    with open(probe, "wb") as f:
        f.write(b"ok")
        f.flush()
        os.fsync(f.fileno())
    probe.unlink()


def open_log_dirs(dirs: list[Path], data_dir: Path, owner: str) -> list[DataDirLock]:
    """At start, before anything is read: lock every log dir (one process each, as the data dir;
    the data dir itself is locked by the caller), check each can be written, and refuse a replica
    found in two of them. Raises DataDirInUse, OSError or DuplicateReplica."""
    locks = []
    try:
        for d in dirs:
            if d.absolute() != data_dir.absolute():
                locks.append(lock_data_dir(d, owner))
            check_writable(d)
        seen: dict[str, Path] = {}
        complete = {m.group(1) for d in dirs for e in os.listdir(d)
                    if (m := _FUTURE_DIR.match(e)) and (d / e / MOVE_COMPLETE).exists()}
        for d in dirs:
            for entry in subdirs(d):
                if _PARTITION_DIR.match(entry) and entry not in complete:
                    if entry in seen:
                        raise DuplicateReplica(
                            f"partition {entry} is in two log directories, {seen[entry]} and {d}: delete "
                            f"the copy that is not current (the one in a directory that failed recently) "
                            f"and start again")
                    seen[entry] = d
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    return locks


@dataclass
class _Copied:
    ino: int
    size: int
    mtime_ns: int


class DirCopier:
    """Copies one replica directory into its future directory, in rounds while the source keeps
    being appended: segment files (`.log`) are append-only, so a file whose inode is unchanged and
    that has not shrunk only needs its new tail; any other changed file (indexes, checkpoints, a
    segment replaced by the cleaner) is copied whole; files gone from the source go. The caller
    calls `reset()` after a truncation (a segment cut and appended again keeps its inode)."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self._copied: dict[str, _Copied] = {}
        self.bytes_copied = 0

    def reset(self) -> None:
        self._copied.clear()

    @property
    def size_bytes(self) -> int:
        return sum(c.size for name, c in self._copied.items() if name.endswith(".log"))

    def sync(self, fsync: bool = True, final: bool = False) -> int:
        """One round; returns the bytes copied. `final` (the last round, the source closed): every
        file but the append-only segments is copied whole again, since a same-size rewrite in
        place within one clock tick (a leader-epoch checkpoint's epoch) leaves its stat unchanged."""
        self.target.mkdir(parents=True, exist_ok=True)
        copied = 0
        names = set()
        for name in sorted(os.listdir(self.source)):
            if name == MOVE_COMPLETE:
                # never copied: a kill between an earlier move's rename and its marker's removal
                # leaves one in the replica, and copied first (it sorts first) it would make the
                # next start take this copy for complete and delete the source
                continue
            src = self.source / name
            try:
                st = os.stat(src)
            except FileNotFoundError:
                continue  # deleted under us (retention): gone from the target below too
            if not os.path.isfile(src):
                continue
            names.add(name)
            before = self._copied.get(name)
            if before is not None and before.ino == st.st_ino and before.size == st.st_size \
                    and before.mtime_ns == st.st_mtime_ns and (not final or name.endswith(".log")):
                continue
            tail = (before is not None and name.endswith(".log") and before.ino == st.st_ino
                    and st.st_size >= before.size)
            try:
                n, size = _copy(src, self.target / name, before.size if tail and before else 0, fsync)
            except FileNotFoundError:
                names.discard(name)
                continue
            copied += n
            self._copied[name] = _Copied(st.st_ino, size, st.st_mtime_ns)
        for name in list(self._copied):
            if name not in names:
                del self._copied[name]
                (self.target / name).unlink(missing_ok=True)
        for name in os.listdir(self.target):
            if name not in names and name != MOVE_COMPLETE:
                (self.target / name).unlink(missing_ok=True)
        if fsync:
            fsync_dir(str(self.target))
        self.bytes_copied += copied
        return copied


def _copy(src: Path, dst: Path, start: int, fsync: bool) -> tuple[int, int]:
    """Copy `src` from byte `start` onto `dst` (truncated there); returns (bytes copied, new size)."""
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, start)
            fin.seek(start)
            pos = start
            for _ in range(1 << 40):  # bounded by the file's size: ends at its end
                chunk = fin.read(COPY_CHUNK)
                if not chunk:
                    break
                os.pwrite(fd, chunk, pos)
                pos += len(chunk)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return pos - start, pos


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
