"""A log's settings (Kafka's LogConfig), resolved from its topic's configs by kshim.configs.

In a module of its own so that the parts of the Log (kshim.log.log, kshim.log.retention) share
it without importing each other; kshim.log.log re-exports it, and most code imports it from there."""
from __future__ import annotations

from dataclasses import dataclass

_DAY_MS = 24 * 3600 * 1000


@dataclass
class LogConfig:
    segment_bytes: int = 1 << 30              # segment.bytes
    segment_ms: int = 7 * _DAY_MS             # segment.ms
    retention_ms: int = 7 * _DAY_MS           # retention.ms, -1 = unlimited
    retention_bytes: int = -1                 # retention.bytes, -1 = unlimited
    index_interval_bytes: int = 4096          # index.interval.bytes
    flush_messages: int | None = None         # flush.messages: fsync after this many records; None = never
    flush_ms: int | None = None               # flush.ms: fsync once the last flush is this old; None = never
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes: a segment whose index is full rolls
    segment_jitter_ms: int = 0                # segment.jitter.ms: random amount taken off segment.ms per segment
    # cleanup.policy: delete (retention) and/or compact (kshim.log.cleaner); both false (the empty
    # list) is neither: segments stay until DeleteRecords moves the log start past them
    compact: bool = False
    delete: bool = True
    delete_retention_ms: int = _DAY_MS        # delete.retention.ms: tombstones live this long once cleaned
    min_cleanable_ratio: float = 0.5          # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0            # min.compaction.lag.ms
    max_compaction_lag_ms: int = (1 << 63) - 1  # max.compaction.lag.ms

    @property
    def roll_ms(self) -> int:
        """Age at which the active segment rolls: segment.ms, or max.compaction.lag.ms if smaller on
        a compacted log (Kafka's LogConfig.maxSegmentMs), so the cleaner can reach every record."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms
