"""Batch and streaming readers: plan offset ranges on the driver, read them on executors.

Readers are pickled to executors with the read function, so they carry options only; the admin
client they use on the driver is created lazily and left out of the pickle.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kshim.spark import offsets
from kshim.spark.consume import OffsetRange, read_range
from kshim.spark.metadata import Brokers
from kshim.spark.offsets import OffsetJson, OffsetMap
from kshim.spark.options import ReadOptions


class _Planner:
    """Shared by both readers: options, a lazily created admin client, and the executor read."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._brokers: Brokers | None = None

    @property
    def brokers(self) -> Brokers:
        if self._brokers is None:
            self._brokers = Brokers(self.opts)
        return self._brokers

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_brokers": None}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder partition when there is nothing to read
        return read_range(self.opts, partition)

    @staticmethod
    def _plan(start: OffsetMap, end: OffsetMap) -> list[OffsetRange]:
        return [OffsetRange(t, p, lo, hi) for (t, p), lo, hi in offsets.ranges(start, end)]


class KafkaBatchReader(_Planner, DataSourceReader):
    """spark.read: startingOffsets (default earliest) to endingOffsets (default latest)."""

    def partitions(self) -> list[InputPartition]:
        tps = self.brokers.partitions()
        earliest = self.brokers.earliest(tps)
        latest = self.brokers.latest(tps)
        start = offsets.resolve(self.opts.starting, tps, earliest, latest, "startingOffsets")
        end = offsets.resolve(self.opts.ending, tps, earliest, latest, "endingOffsets")
        return list(self._plan(start, end))


class KafkaStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches of per-partition offset ranges.

    Admission control: maxOffsetsPerTrigger becomes the default read limit (ReadMaxRows), and
    latestOffset honours whatever limit the engine passes (ReadAllAvailable included, as the
    engine may ask for it regardless of the options). Trigger.AvailableNow: the latest offsets at
    the query's start are the target no batch goes past.
    """

    def __init__(self, opts: ReadOptions) -> None:
        super().__init__(opts)
        self._target: OffsetMap | None = None

    def initialOffset(self) -> OffsetJson:
        tps = self.brokers.partitions()
        earliest = self.brokers.earliest(tps)
        latest = self.brokers.latest(tps)
        return offsets.to_json(offsets.resolve(self.opts.starting, tps, earliest, latest, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        begin = offsets.from_json(start)
        latest = self._latest()
        if self._target is not None:
            latest = offsets.cap(latest, self._target)
        # partitions appeared since `start` begin at their earliest offset (Spark does the same)
        new = [tp for tp in latest if tp not in begin]
        begin.update(self.brokers.earliest(new))
        # never behind `start`: offsets move forward even if a log was truncated under us
        end = {tp: max(latest.get(tp, begin[tp]), begin[tp]) for tp in begin}
        if isinstance(limit, ReadMaxRows):
            end = offsets.rate_limit(begin, end, limit.max_rows)
        return offsets.to_json(end)

    def reportLatestOffset(self) -> OffsetJson:
        return offsets.to_json(self._latest())

    def partitions(self, start: OffsetJson, end: OffsetJson) -> Sequence[InputPartition]:
        begin = offsets.from_json(start)
        until = offsets.from_json(end)
        new = [tp for tp in until if tp not in begin]
        begin.update(self.brokers.earliest(new))
        return self._plan(begin, until)

    def commit(self, end: OffsetJson) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the brokers

    def stop(self) -> None:
        self._brokers = None

    def _latest(self) -> OffsetMap:
        return self.brokers.latest(self.brokers.partitions())
