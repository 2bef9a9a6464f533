"""The broker's log cleaner (Kafka's LogCleaner thread + LogCleanerManager): cleans the compacted
partitions this broker hosts, leaders and followers alike, each its own log.

Every ``--log-cleaner-backoff-ms`` it looks at the replicas whose topic has cleanup.policy
compact: on the event loop it takes what only the loop may read (the last stable offset, each
producer's last data offset and epoch); in one worker thread it works out which logs are due
(min.cleanable.dirty.ratio, min.compaction.lag.ms, max.compaction.lag.ms) and cleans them, the
dirtiest first, through one Throttler (``--log-cleaner-io-max-bytes-per-second``). One
clean runs at a time (Kafka's log.cleaner.threads=1); `kshim ctl compact` asks for one now
through the same lane. The first dirty offset is checkpointed per partition
(``cleaner-offset-checkpoint``).

The heavy part of a clean, reading the segments and writing the cleaned ones
(:func:`kshim.log.cleaner.write_cleaned`), runs in a process of its own (one, started on the first
clean, spawned: no fork of a threaded broker): in a thread it held the GIL for most of its run,
and every socket read and write of the event loop then waited for it (produce p99 went from 9 ms
to 0.8 s while a 100 MB log was cleaned). The worker thread only plans the clean (a snapshot of
the segments and transaction index, under the log's lock) and swaps the result in.

The cleaning code (kshim.log.cleaner, the process pool, kshim.replica.cleaner_process) loads when
a compacted log is first looked at: a broker without one never loads it (docs/benchmarks.md,
"Start time").
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

import anyio

from kshim.clock import SYSTEM
from kshim.replica.partition import Partition

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from kshim.log.cleaner import CleanPlan, CleanResult, Written

log = logging.getLogger("kshim.replica.cleaning")


@dataclass(frozen=True)
class CleanerSettings:
    io_max_bytes_per_second: int = 100 * 1024 * 1024  # log.cleaner.io.max.bytes.per.second
    dedupe_buffer_size: int = 128 * 1024 * 1024        # log.cleaner.dedupe.buffer.size
    backoff_ms: int = 15_000                           # log.cleaner.backoff.ms
    enabled: bool = True                               # log.cleaner.enable: off, only `kshim ctl compact` cleans


@dataclass(frozen=True)
class _Candidate:
    partition: Partition
    last_stable_offset: int
    last_records: dict[int, tuple[int, int]]  # producer id -> (last data offset or -1, epoch)


def _candidate(p: Partition) -> _Candidate:
    """What the worker thread needs of a partition, read on the event loop."""
    return _Candidate(p, p.last_stable_offset,
                      {pid: (e.last_data_offset, e.epoch) for pid, e in p.producers.producers.items()})


class ReplicaSource(Protocol):
    """What the cleaner needs of the replica manager."""

    def replicas(self) -> list[Partition]: ...


class LogCleaner:
    def __init__(self, settings: CleanerSettings) -> None:
        self.settings = settings
        self._lane = anyio.Lock()  # one clean at a time
        self._pool: ProcessPoolExecutor | None = None

    async def run(self, replicas: ReplicaSource) -> None:
        """The periodic cleaner: due logs only (none with log.cleaner.enable=false; the pool a
        `kshim ctl compact` started is still stopped here)."""
        try:
            if not self.settings.enabled:
                await anyio.sleep_forever()
            while True:
                await anyio.sleep(self.settings.backoff_ms / 1000)
                candidates = [_candidate(p) for p in replicas.replicas() if p.log_config.compact]
                if candidates:
                    async with self._lane:
                        await anyio.to_thread.run_sync(self._clean_due, candidates)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the cleaner process (a clean under way is abandoned: its ``.cleaned`` files are
        discarded when the log is next opened)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):  # no wait for a clean to end
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)

    def _write(self, plan: CleanPlan) -> Written:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        from kshim.replica.cleaner_process import child_init, write_in_child
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=child_init, initargs=(os.getpid(),))
        try:
            return self._pool.submit(write_in_child, plan, self.settings.io_max_bytes_per_second).result()
        except BrokenProcessPool as e:  # killed (OOM, by hand): a new one next time
            self._pool = None
            raise OSError(f"the cleaner process died: {e}") from e

    async def clean_now(self, partitions: Iterable[Partition]) -> list[tuple[Partition, CleanResult | str]]:
        """Clean these partitions now, whatever their dirty ratio (`kshim ctl compact`); min.compaction.lag.ms
        and the last stable offset still bound what is cleaned. Per partition: its result or why not."""
        candidates = [_candidate(p) for p in partitions]
        async with self._lane:
            return await anyio.to_thread.run_sync(self._clean_all, candidates)

    # ------------------------------------------------------------------ worker thread
    def _clean_due(self, candidates: list[_Candidate]) -> None:
        from kshim.log.cleaner import cleanable_offsets, read_checkpoint
        now = SYSTEM.wall_ms()
        due = []
        for c in candidates:
            try:
                cleanable = cleanable_offsets(c.partition.log, read_checkpoint(c.partition.directory),
                                              c.last_stable_offset, now)
            except (OSError, ValueError) as e:
                log.warning("%s-%d: cannot size up the log for cleaning: %s", c.partition.topic, c.partition.index, e)
                continue
            if cleanable.due(c.partition.log.config.min_cleanable_ratio):
                due.append((cleanable.compaction_delay_ms > 0, cleanable.ratio, c))
        due.sort(key=lambda t: (t[0], t[1]), reverse=True)  # overdue first, then the dirtiest
        for _, _, c in due:
            self._clean_one(c, force=False)

    def _clean_all(self, candidates: list[_Candidate]) -> list[tuple[Partition, CleanResult | str]]:
        return [(c.partition, self._clean_one(c, force=True)) for c in candidates]

    def _clean_one(self, c: _Candidate, force: bool) -> CleanResult | str:
        from kshim.log.cleaner import (
            CleanAborted, cleanable_offsets, plan_clean, read_checkpoint, swap_cleaned, write_checkpoint,
        )
        p = c.partition
        now = SYSTEM.wall_ms()
        started = time.monotonic()
        try:
            cleanable = cleanable_offsets(p.log, read_checkpoint(p.directory), c.last_stable_offset, now)
            plan, live, truncations = plan_clean(p.log, cleanable.first_dirty, cleanable.first_uncleanable, now,
                                                 last_records=c.last_records,
                                                 dedupe_budget_bytes=self.settings.dedupe_buffer_size, force=force)
            written = self._write(plan)
            swap_cleaned(p.log, plan, written, live, truncations)
            result = written.result
            result.seconds = time.monotonic() - started
            if result.end_offset != read_checkpoint(p.directory):
                write_checkpoint(p.directory, result.end_offset)
        except CleanAborted as e:
            log.info("%s-%d: clean aborted: %s", p.topic, p.index, e)
            return f"aborted: {e}"
        except (OSError, ValueError) as e:  # a log closed or deleted under the clean, a corrupt batch
            log.warning("%s-%d: clean failed: %s", p.topic, p.index, e)
            return f"failed: {e}"
        if result.groups:
            log.info("%s-%d: cleaned [%d, %d): %d records read, %d kept, %d bytes -> %d", p.topic, p.index,
                     result.first_dirty, result.end_offset, result.records_read, result.records_kept,
                     result.bytes_read, result.bytes_written)
        return result


