"""The leader epoch cache of one partition replica (Kafka's LeaderEpochFileCache, KIP-101/KIP-279).

An ordered list of (leader epoch, start offset): the first offset written in each epoch. Epochs
and start offsets both strictly increase along the list. It answers OffsetForLeaderEpoch (where
does epoch N end in this log?) so that a follower can find where its log diverges from its
leader's and truncate there, instead of at its high watermark.

Persisted in `<partition dir>/leader-epoch-checkpoint`, the text format of Kafka's
LeaderEpochCheckpointFile:

    0            version
    2            number of entries
    3 0          epoch start_offset
    5 1200

Every change overwrites the file in place (kshim.log.files.write_in_place: a temporary file
renamed over it cost ~1.5 ms on ext4, seconds for thousands of partitions taking a new epoch at
once), or, when fsync is asked (`fsync=True`), replaces it through a temporary file, fsynced. A
file torn by a crash during the overwrite (the old tail after a shorter new content) or lost by a
machine crash reads as corrupt (the count line, the order of entries), and a missing or corrupt
file is rebuilt from the batch headers of the log (`LeaderEpochCache.open`).

Semantics follow Kafka's, with these choices:
- `assign(epoch, start)` means "the log is being written at `start` by `epoch`". Entries starting
  at or after `start` are stale (a leader that recorded its epoch and wrote nothing, an unwired
  truncation) and are dropped; then the entry is appended if `epoch` is newer than the latest left.
  Kafka instead also accepts a lower epoch, dropping every entry of an epoch >= it, which can move
  an older epoch's start forward; here a lower epoch is ignored.
- `end_offset_for` answers as Kafka does since KAFKA-7415 (2.1): below the first epoch it answers
  (requested epoch, first start offset), not UNDEFINED.

Not thread-safe: a partition is used from the event loop only.
"""
from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Iterable, Protocol
from kshim.log.files import save_checkpoint

log = logging.getLogger("kshim.log.epochs")

CHECKPOINT_NAME = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class CorruptCheckpoint(ValueError):
    pass


class _Header(Protocol):
    @property
    def partition_leader_epoch(self) -> int: ...

    @property
    def base_offset(self) -> int: ...


class _LogLike(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def batch_headers(self, from_offset: int = 0) -> Iterable[_Header]: ...


def read_checkpoint(path: Path) -> list[tuple[int, int]]:
    """The entries of a checkpoint file; raises FileNotFoundError or CorruptCheckpoint."""
    text = Path(path).read_text(encoding="ascii", errors="strict")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            raise CorruptCheckpoint(f"{path}: bad version line")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise CorruptCheckpoint(f"{path}: {count} entries announced, {len(lines) - 2} present")
        entries: list[tuple[int, int]] = []
        for line in lines[2:]:
            parts = line.split()
            if len(parts) != 2:
                raise CorruptCheckpoint(f"{path}: bad entry {line!r}")
            epoch, start = int(parts[0]), int(parts[1])
            if epoch < 0 or start < 0:
                raise CorruptCheckpoint(f"{path}: negative entry {line!r}")
            if entries and (epoch <= entries[-1][0] or start <= entries[-1][1]):
                raise CorruptCheckpoint(f"{path}: entry {line!r} does not follow {entries[-1]}")
            entries.append((epoch, start))
    except ValueError as e:  # int() of garbage; CorruptCheckpoint is a ValueError too
        if isinstance(e, CorruptCheckpoint):
            raise
        raise CorruptCheckpoint(f"{path}: {e}") from None
    return entries


class LeaderEpochCache:
    """(leader epoch, start offset) entries of one replica's log, persisted on every change."""

    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        """Load the checkpoint of `directory` if present. A missing or corrupt file leaves the
        cache empty with `needs_rebuild` set (see `open`, which rebuilds it from the log)."""
        self.directory = Path(directory)
        self.path = self.directory / CHECKPOINT_NAME
        self.fsync = fsync
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.latest_epoch = UNDEFINED_EPOCH
        self.needs_rebuild = False
        self._saved: list[tuple[int, int]] | None = None  # what the file holds: a write of the same is skipped
        self._deferred = False
        self.missing = False  # no file at all (a new log): an empty rebuild writes none
        try:
            entries = read_checkpoint(self.path)
        except FileNotFoundError:
            self.needs_rebuild = self.missing = True
        except (CorruptCheckpoint, UnicodeDecodeError) as e:
            log.warning("leader epoch checkpoint is corrupt, to be rebuilt from the log: %s", e)
            self.needs_rebuild = True
        else:
            self._set(entries)
            self._saved = list(entries)

    # ------------------------------------------------------------------ construction
    @classmethod
    def rebuild(cls, directory: Path, headers: Iterable[_Header], *, fsync: bool = False,
                missing: bool = False) -> LeaderEpochCache:
        """A cache made from the batch headers of a log, in log order (a missing or corrupt
        checkpoint); written out once at the end (not at all when there was no file and no
        batch has an epoch: a new log's first assignment writes it)."""
        cache = cls.__new__(cls)
        cache.directory = Path(directory)
        cache.path = cache.directory / CHECKPOINT_NAME
        cache.fsync = fsync
        cache._epochs, cache._starts = [], []
        cache.latest_epoch = UNDEFINED_EPOCH
        cache.needs_rebuild = False
        cache._saved, cache._deferred = [] if missing else None, False
        cache.missing = missing
        for h in headers:
            cache._assign(h.partition_leader_epoch, h.base_offset)
        cache._write()
        return cache

    @classmethod
    def open(cls, directory: Path, partition_log: _LogLike, *, fsync: bool = False,
             defer_write: bool = False) -> LeaderEpochCache:
        """The cache of a log being opened: the checkpoint if it is sane, else rebuilt from the
        log's batch headers; then cut to the log's bounds (recovery may have cut the log's tail,
        DeleteRecords / retention may have moved its start), as Kafka's LogLoader does.
        ``defer_write``: the cut is written by the next change or :meth:`save` (a partition
        opened at start takes its leader epoch next, which often restores the very entry an
        empty log's cut dropped: no file is rewritten then; Kafka defers this flush too)."""
        cache = cls(directory, fsync=fsync)
        if cache.needs_rebuild:
            cache = cls.rebuild(directory, partition_log.batch_headers(partition_log.log_start_offset), fsync=fsync,
                                missing=cache.missing)
        cache._deferred = defer_write
        cache.truncate_from_end(partition_log.log_end_offset)
        cache.truncate_from_start(partition_log.log_start_offset)
        cache._deferred = False
        return cache

    def save(self) -> None:
        """Write the checkpoint if it differs from the file (a cut :meth:`open` deferred)."""
        self._write()

    # ------------------------------------------------------------------ reading
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries()})"

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka answers it:
        - the latest epoch: (it, log_end_offset), the epoch still being written;
        - an epoch below the first entry's: (requested_epoch, first entry's start), since what came
          before is gone from this log (KAFKA-7415);
        - otherwise: (the largest epoch <= requested, the start offset of the first epoch >
          requested);
        - a negative epoch, an epoch above the latest, or an empty cache: (-1, -1) (UNDEFINED)."""
        if requested_epoch < 0 or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        i = bisect_right(self._epochs, requested_epoch)  # the first epoch > requested
        if i == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[i - 1], self._starts[i]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote `offset` (that of the last entry starting at or before it), or
        None below the first entry."""
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    # ------------------------------------------------------------------ changes
    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that the log is being written at `start_offset` by `epoch` (a leader taking
        office at its log end, or a batch appended there). The common case, another batch of the
        latest epoch, returns at once. Otherwise entries starting at or after `start_offset` are
        dropped as stale, then `epoch` is appended if it is newer than the latest entry left
        (an equal or lower epoch is not). Negative epochs (unstamped batches) are ignored."""
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return
        if self._assign(epoch, start_offset):
            self._write()

    def observe(self, epoch: int, base_offset: int) -> None:
        """A batch already in the log, replayed when the log is opened (after a crash the
        checkpoint may lag the log by the last epoch change): batches before the latest entry's
        start are known history and change nothing; later ones are assigned."""
        if self._starts and base_offset < self._starts[-1]:
            return
        self.assign(epoch, base_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at `end_offset`: drop entries starting at or after it."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        i = bisect_left(self._starts, end_offset)
        log.debug("%s: dropping %s at log end %d", self.directory.name, self.entries()[i:], end_offset)
        del self._epochs[i:], self._starts[i:]
        self._latest_changed()
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: entries wholly before it go; the last entry
        starting at or before it stays, its start moved up to `start_offset`."""
        i = bisect_right(self._starts, start_offset)  # entries [0, i) start at or before it
        if i == 0 or (i == 1 and self._starts[0] == start_offset):
            return
        del self._epochs[:i - 1], self._starts[:i - 1]
        self._starts[0] = start_offset
        self._write()

    def clear(self) -> None:
        """Drop every entry (the log started over empty)."""
        if self._epochs:
            self._set([])
            self._write()

    # ------------------------------------------------------------------ internals
    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            return False
        changed = False
        if self._starts and self._starts[-1] >= start_offset:
            i = bisect_left(self._starts, start_offset)
            dropped = self.entries()[i:]
            if len(dropped) > 1 or dropped[0][1] != start_offset:
                log.warning("%s: epoch %d at %d drops conflicting entries %s", self.directory.name,
                            epoch, start_offset, dropped)
            del self._epochs[i:], self._starts[i:]
            changed = True
        if not self._epochs or epoch > self._epochs[-1]:
            self._epochs.append(epoch)
            self._starts.append(start_offset)
            changed = True
        elif epoch < self._epochs[-1]:
            log.warning("%s: epoch %d at %d is older than the latest entry (%d, %d): ignored",
                        self.directory.name, epoch, start_offset, self._epochs[-1], self._starts[-1])
        self._latest_changed()
        return changed

    def _set(self, entries: list[tuple[int, int]]) -> None:
        self._epochs = [e for e, _ in entries]
        self._starts = [s for _, s in entries]
        self._latest_changed()

    def _latest_changed(self) -> None:
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def _write(self) -> None:
        if self._deferred or self._saved == self.entries():
            return
        if not self.directory.is_dir():
            return  # the partition was deleted under us (Kafka's writeIfDirExists)
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts)]
        # on a full disk the cache stays in memory: the next change writes it whole, and a start
        # after a crash recovers the epochs of the batches in the log
        # in place unless fsync is asked: read_checkpoint's count line and order checks catch a
        # torn file, which is then rebuilt from the log (a rename over the old file cost ~1.5 ms)
        if save_checkpoint(self.path, "\n".join(lines) + "\n", "leader-epoch checkpoint", fsync=self.fsync,
                           in_place=True):
            self._saved = self.entries()


__all__ = ["LeaderEpochCache", "CorruptCheckpoint", "read_checkpoint", "CHECKPOINT_NAME",
           "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]
