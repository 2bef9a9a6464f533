"""The aborted transaction index of one segment: ``<base>.txnindex`` (Kafka's TransactionIndex).

One 34-byte entry per aborted transaction whose ABORT marker lies in the segment: version int16
(0), producer id int64, first offset int64, last offset (the marker's) int64, last stable offset
int64 (the partition's first unstable offset right after the marker, or the marker's next offset).
Entries are in marker order. A read_committed fetch collects the entries that overlap what it
returns, so consumers can drop aborted records without the broker scanning the log.

The file is written with ``os.write`` as markers are appended; a torn tail entry is ignored on
load. After a crash the partition replays its log and re-adds any entry that did not make it
(:meth:`TxnIndex.append` ignores entries at or below the last one it holds).
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

from kshim.log.files import TMP_SUFFIX

TXNINDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    """The file bytes of `entries` (the cleaner writes a cleaned segment's index with it)."""
    return b"".join(_ENTRY.pack(0, *e) for e in entries)


class TxnIndex:
    __slots__ = ("path", "entries")

    def __init__(self, stem: str) -> None:
        self.path = stem + TXNINDEX_SUFFIX
        self.entries: list[AbortedTxn] = []
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        for version, *fields in _ENTRY.iter_unpack(data[:whole]):
            entry = AbortedTxn(*fields)
            if version != 0 or (self.entries and entry.last_offset <= self.entries[-1].last_offset):
                break  # not ours, or out of order: keep what came before
            self.entries.append(entry)
        if len(self.entries) * ENTRY_SIZE != len(data):
            self._rewrite()

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            return  # already indexed (a replay after a crash)
        self.entries.append(entry)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, _ENTRY.pack(0, *entry))
        finally:
            os.close(fd)

    def truncate_from(self, offset: int) -> None:
        """Forget the aborts whose marker is at or after `offset` (the log was truncated there)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self.entries = keep
            self._rewrite()

    def collect(self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]) -> bool:
        """Add the aborts overlapping [fetch_offset, upper_bound) to `into`; True once no later
        segment can hold more (an entry's last stable offset reached the upper bound)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                into.append(e)
            if e.last_stable_offset >= upper_bound:
                return True
        return False

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _rewrite(self) -> None:
        if not self.entries:
            self.delete()
            return
        tmp = self.path + TMP_SUFFIX
        with open(tmp, "wb") as f:
            f.write(b"".join(_ENTRY.pack(0, *e) for e in self.entries))
        os.replace(tmp, self.path)
