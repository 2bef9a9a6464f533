"""What a clean stop records of each log in its log dir's clean-shutdown marker (kshim.log.log_dirs),
so that the next start can serve the partition without opening a file of it: a dormant partition
(kshim.replica.partition) answers its offsets, size and leader epoch from here, and opens its log, leader
epochs and producer state on first use.

A log is summarised only when nothing of it lives in memory alone: no transaction open or ended
and not yet below the high watermark (the last stable offset would need the producer state). The
oldest segment's figures let retention decide without opening the log whether it would delete
anything (it deletes from the front, so nothing is due while the oldest segment is not).
"""
from __future__ import annotations

import os
import uuid
from typing import NamedTuple

ActiveEnd = tuple[int, int]  # a log's active segment: (base offset, size in bytes), as a clean stop left it


class LogSummary(NamedTuple):  # a tuple: 10,000 of them are read at a start
    active_base: int           # the active segment's base offset, size and .log mtime: a log changed
    active_size: int           # since is not dormant (and recovered when the size changed)
    active_mtime_ns: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    first_next_offset: int     # the oldest segment's end (exclusive), size and largest timestamp
    first_size: int
    first_max_timestamp: int
    topic_id: uuid.UUID = uuid.UUID(int=0)
    leader_epoch: int = -1     # the leader-epoch cache's latest entry (-1: none)
    leader_epoch_start: int = -1

    @property
    def active(self) -> ActiveEnd:
        return self.active_base, self.active_size

    def retention_due(self, now_ms: int, retention_ms: int, retention_bytes: int, upper: int) -> bool:
        """Whether Log.apply_retention would delete a segment with these settings, the log being
        as summarised (``upper``: the bound segments must end below, the high watermark)."""
        if not self.first_size or self.first_next_offset > upper:
            return False
        if retention_ms >= 0 and now_ms - self.first_max_timestamp > retention_ms:
            return True
        return retention_bytes >= 0 and self.size_bytes - retention_bytes >= self.first_size

    def line(self, name: str) -> str:
        return " ".join([name, str(self.active_base), str(self.active_size), str(self.active_mtime_ns),
                         str(self.log_start_offset),
                         str(self.log_end_offset), str(self.size_bytes), str(self.first_next_offset),
                         str(self.first_size), str(self.first_max_timestamp), self.topic_id.hex,
                         str(self.leader_epoch), str(self.leader_epoch_start)])

    @classmethod
    def parse(cls, fields: list[str], topic_ids: dict[str, uuid.UUID]) -> LogSummary:
        """From a marker line's fields after the name (ValueError when malformed); `topic_ids`
        holds the ids parsed so far (a topic's partitions share one)."""
        if len(fields) != 12:
            raise ValueError(f"{len(fields)} fields")
        n = [int(f) for f in fields[:9]]
        if min(n[:8]) < 0:  # of the numbers only the timestamp may be negative (-1: none)
            raise ValueError("negative offset or size")
        topic_id = topic_ids.get(fields[9])
        if topic_id is None:
            topic_id = topic_ids[fields[9]] = uuid.UUID(hex=fields[9])
        return cls(n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], topic_id, int(fields[10]),
                   int(fields[11]))

    def unchanged(self, directory: str) -> bool:
        """Whether the active segment's file in `directory` is as the stop left it (size and
        mtime: a byte changed by hand since, a torn copy, a restored backup are not)."""
        try:
            st = os.stat(f"{directory}/{self.active_base:020d}.log")
        except OSError:
            return False
        return st.st_size == self.active_size and st.st_mtime_ns == self.active_mtime_ns
