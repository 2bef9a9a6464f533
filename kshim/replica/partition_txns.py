"""The producer state and transactions of one replica: the producer state as the log builds it
(a snapshot of the last clean close, then a replay of later batches; after a crash, the log
alone), each stored batch's part in it, the transactions a marker ends (an aborted one goes into
the log's aborted transaction index), and the last stable offset the open ones hold.

Transaction markers (control batches) are written by the transaction coordinator through the
leader (`append_marker`) and replicated like any batch; producer state and the aborted index are
derived from the log, so a restarted or newly elected replica rebuilds them by replay.

Separate from the Partition (kshim.replica.partition), whose appends and truncations
(kshim.replica.partition_appends) call in here: this is what transactions keep of a replica. The
producer state itself, per producer, is kshim.replica.producer_state.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from kshim.log.epochs import LeaderEpochCache
from kshim.log.files import write_atomic
from kshim.log.log import Log
from kshim.log.summary import LogSummary
from kshim.log.txnindex import AbortedTxn
from kshim.replica.producer_state import ProducerStateManager
from wire import records

log = logging.getLogger("kshim.replica.partition")

SNAPSHOT_NAME = "producer-state.snapshot"


class TxnBookkeeping:
    """The producer state and last stable offset of a Partition (kshim.replica.partition)."""

    if TYPE_CHECKING:  # the Partition's, of which this is a part
        topic: str
        index: int
        directory: Path
        log: Log
        epochs: LeaderEpochCache
        producers: ProducerStateManager
        dormant: LogSummary | None
        _high_watermark: int
        _unreplicated: list[tuple[int, int]]
        _snapshot_saved: bytes | None

    def _load_producer_state(self) -> ProducerStateManager:
        """The snapshot of a clean close, then replay of later batches; after a crash, the log."""
        path = self.directory / SNAPSHOT_NAME
        state = ProducerStateManager(snapshot_offset=self.log.log_start_offset)
        if SNAPSHOT_NAME in self.log.files_at_open:
            try:
                data = path.read_bytes()
                loaded = ProducerStateManager.from_snapshot(data)
                if loaded.snapshot_offset <= self.log.log_end_offset:
                    state = loaded
                    self._snapshot_saved = data
                else:  # recovery cut the log below it: void, and so once the log grows past it again
                    path.unlink()
            except ValueError:
                path.unlink()  # rebuild from the log below
        # A snapshot stays valid while the log below its offset is unchanged: later appends are
        # replayed over it at the next start, so it is kept (one unlink fewer per partition at a
        # start) and removed only before a truncation could cut below it (_drop_snapshot).
        return self._replay_producer_state(state, observe_epochs=True)

    def _drop_snapshot(self) -> None:
        self._snapshot_saved = None
        (self.directory / SNAPSHOT_NAME).unlink(missing_ok=True)

    def _replay_producer_state(self, state: ProducerStateManager, observe_epochs: bool = False) -> ProducerStateManager:
        """Feed `state` every batch of the log from where it left off."""
        start = max(state.snapshot_offset, self.log.log_start_offset)
        self._unreplicated = []
        for header in self.log.batch_headers(start):
            if observe_epochs:  # at open, this also recovers an epoch change the checkpoint missed
                self.epochs.observe(header.partition_leader_epoch, header.base_offset)
            if header.producer_id >= 0:
                self._track(state, header)
        self._prune_unreplicated()
        return state

    def _track(self, state: ProducerStateManager, header: records.BatchHeader, batch=None,
               marker: records.Marker | None = None) -> None:
        """Producer state for one stored batch; a marker also ends its transaction: an aborted
        one goes into the aborted index (idempotent, so replays may repeat it). `marker`: the
        control batch's marker when the caller just wrote it (else read from the batch)."""
        if not header.is_control:
            state.update(header, header.base_offset, header.last_offset)
            return
        if marker is None:
            if batch is None:
                batch = self.log.read(header.base_offset, header.size, header.base_offset + 1)
            marker = records.read_marker(memoryview(batch)[:header.size])
        first = state.update(header, header.base_offset, header.last_offset,
                             marker.coordinator_epoch if marker else -1)
        if first < 0 or marker is None:
            return
        self._unreplicated.append((first, header.base_offset))
        if not marker.committed:
            unstable = state.first_unstable_offset()
            lso = header.base_offset + 1 if unstable is None else min(unstable, header.base_offset + 1)
            self.log.add_aborted(AbortedTxn(header.producer_id, first, header.base_offset, lso))

    def _prune_unreplicated(self) -> None:
        if self._unreplicated:
            hw = self._high_watermark
            self._unreplicated = [t for t in self._unreplicated if t[1] >= hw]

    @property
    def last_stable_offset(self) -> int:
        """No read_committed consumer reads at or past it: the first offset of the earliest open
        transaction, or of an ended one whose marker is not COMMITTED yet; else the high watermark."""
        lso = self._high_watermark
        if self.dormant is not None:
            return lso  # summarised only with no transaction open or unreplicated (kshim.log.summary)
        if self.producers.ongoing:
            lso = min(lso, min(self.producers.ongoing.values()))
        for first, marker in self._unreplicated:
            if marker >= self._high_watermark and first < lso:
                lso = first
        return lso

    def _save_producer_snapshot(self) -> None:
        """At close: the producer state, for the next start to replay from (_load_producer_state)."""
        path = self.directory / SNAPSHOT_NAME
        try:
            snapshot = self.producers.snapshot()
            # No producer and nothing a replay from the log start would skip: no file is needed
            # (a log never written by an idempotent producer keeps none). Otherwise the file is
            # rewritten only when its content changed (known in memory: no read of the old one).
            needed = bool(self.producers.producers) or self.producers.snapshot_offset > self.log.log_start_offset
            if needed and snapshot != self._snapshot_saved:
                write_atomic(path, snapshot)  # replaced whole: a start never reads a torn one
                self._snapshot_saved = snapshot
            elif not needed and self._snapshot_saved is not None:  # its producers all expired
                self._drop_snapshot()
        except OSError as e:  # a full disk: the next start replays producer state from the log
            path.unlink(missing_ok=True)
            log.warning("%s-%d: no producer-state snapshot (%s); the next start rebuilds it", self.topic, self.index, e)
