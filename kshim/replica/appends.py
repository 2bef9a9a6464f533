"""The write side of the ReplicaManager (Kafka's appendRecords): a Produce request's appends and
its acks=all wait for COMMITTED, and the coordinators' writes (their batches and transaction
markers), which always wait.

Separate from kshim.replica.manager as the read side is (kshim.replica.fetch): the write path
needs only the leader ladder and a few members of the manager (the ReplicaManager protocol
below), not the hosting of replicas that fills the manager, which owns an Appender."""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, Sequence

import anyio

from kshim.cluster.image import INTERNAL_TOPICS
from kshim.log.recompress import CorruptRecordError, needs_recompression, recompress
from kshim.replica.partition import AppendResult, Partition
from kshim.replica.validation import Rejection
from wire.errors import ErrorCode

log = logging.getLogger("kshim.replica")

Records = bytes | memoryview | None
VALID_ACKS = (0, 1, -1)


@dataclass(slots=True)
class PartitionAppend:
    """One partition's outcome of an append."""
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1  # of the first batch, appended now or earlier (a retried duplicate)
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1  # -1 when the append was refused before reaching the partition
    # the records are in the leader's log: an error is from the wait for COMMITTED, and they may
    # still be committed
    appended: bool = False

    @property
    def not_led_here(self) -> bool:
        """The partition is unknown, or not (or no longer) led by this broker."""
        return self.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A COMMIT or ABORT control batch ending a producer's transaction on a partition."""
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transaction_version: int = 1  # 2 (KIP-1228): the coordinator bumped the epoch, so it must be newer



class ReplicaManager(Protocol):
    """What the write path needs of the ReplicaManager (a protocol: the manager imports this module)."""
    @property
    def node_id(self) -> int: ...

    @property
    def recovering(self) -> Mapping[tuple[str, int], object]: ...

    @property
    def marker_listeners(self) -> list[Callable[[str, int, TxnMarker, int], None]]: ...

    def partition(self, topic: str, index: int) -> Partition | None: ...

    def get_partition_or_error(self, topic: str | uuid.UUID, index: int,
                               current_leader_epoch: int = -1) -> Partition | ErrorCode: ...

    async def wait_recovered(self, keys: Iterable[tuple[str, int | None]]) -> None: ...


class Appender:
    """The ReplicaManager's appends (its append, append_and_wait and append_markers_and_wait)."""

    def __init__(self, manager: ReplicaManager) -> None:
        self._rm = manager

    def append(self, acks: int, timeout_s: float, entries: Sequence[tuple[str, int, Records]],
               topic_errors: Mapping[str, ErrorCode] | None = None, internal_topics_allowed: bool = False,
               rejected: Mapping[int, Rejection] | None = None
               ) -> list[PartitionAppend] | Awaitable[list[PartitionAppend]]:
        """A Produce request's appends (Kafka's appendRecords), one outcome per entry in order.
        `topic_errors`: the answer for topics that could not be had (a failed auto-creation).
        The appends happen now; with acks=all, if anything was appended, the answer is an
        awaitable that completes once those records are COMMITTED or `timeout_s` passes.
        Clients never append to internal topics (Kafka's internalTopicsAllowed=false): their
        partitions answer INVALID_TOPIC_EXCEPTION. `rejected` (from `validator.check`): entries
        whose batches from a bad one on are not stored; that one's error is their answer."""
        if acks not in VALID_ACKS:
            message = f"acks must be 0, 1 or -1, got {acks}"
            return [PartitionAppend(ErrorCode.INVALID_REQUIRED_ACKS, message) for _ in entries]
        errors: list[ErrorCode | None] = []
        failed: dict[int, PartitionAppend] = {}
        late: dict[int, Rejection] = {}  # answered after appending the good batches before them
        kept: list[tuple[str, int, Records]] = []
        for i, (topic, index, data) in enumerate(entries):
            error = (topic_errors or {}).get(topic)
            if not internal_topics_allowed and topic in INTERNAL_TOPICS:
                error = ErrorCode.INVALID_TOPIC_EXCEPTION
            errors.append(error)
            bad = rejected.get(i) if rejected else None
            if bad is not None and not error:
                if not bad.valid_bytes:
                    failed[i] = PartitionAppend(bad.error, bad.message)
                else:
                    data = memoryview(data)[:bad.valid_bytes] if data is not None else data
                    late[i] = bad
            kept.append((topic, index, data))
        jobs = self._recompressions(kept, errors, failed)
        if jobs:
            return self._append_recompressed(acks, timeout_s, kept, errors, jobs, failed, late)
        return self._append_all(acks, timeout_s, kept, errors, failed, late)

    def _recompressions(self, entries: Sequence[tuple[str, int, Records]], errors: Sequence[ErrorCode | None],
                        failed: Mapping[int, PartitionAppend]) -> dict[int, tuple[int, int | None]]:
        """Entries (by position) whose batches this broker must recompress for compression.type,
        with the codec and level."""
        jobs = {}
        for i, (topic, index, data) in enumerate(entries):
            partition = self._rm.partition(topic, index)
            if (not data or errors[i] or i in failed or partition is None
                    or partition.compression_codec is None or not partition.is_leader):
                continue
            if needs_recompression(data, partition.compression_codec):
                jobs[i] = (partition.compression_codec, partition.compression_level)
        return jobs

    async def _append_recompressed(self, acks: int, timeout_s: float, entries: Sequence[tuple[str, int, Records]],
                                   errors: Sequence[ErrorCode | None], jobs: dict[int, tuple[int, int | None]],
                                   failed: dict[int, PartitionAppend], late: Mapping[int, Rejection]
                                   ) -> list[PartitionAppend]:
        """Recompress in a worker thread (CPU-bound; other connections go on meanwhile), then append
        as usual. The records are copied first: the request frame's buffer is not ours across an await."""
        owned = [(topic, index, bytes(data) if isinstance(data, memoryview) else data) for topic, index, data in entries]

        def work() -> dict[int, bytes | PartitionAppend]:
            done: dict[int, bytes | PartitionAppend] = {}
            for i, (codec, level) in jobs.items():
                data = owned[i][2]
                assert data is not None
                try:
                    done[i] = recompress(data, codec, level)
                except CorruptRecordError as e:
                    done[i] = PartitionAppend(ErrorCode.CORRUPT_MESSAGE, f"recompressing for compression.type: {e}")
            return done

        done = await anyio.to_thread.run_sync(work)
        ready: list[tuple[str, int, Records]] = []
        for i, (topic, index, data) in enumerate(owned):
            outcome = done.get(i)
            if isinstance(outcome, PartitionAppend):
                failed[i] = outcome
            ready.append((topic, index, outcome if isinstance(outcome, bytes) else data))
        results = self._append_all(acks, timeout_s, ready, errors, failed, late)
        return results if isinstance(results, list) else await results

    def _append_all(self, acks: int, timeout_s: float, entries: Sequence[tuple[str, int, Records]],
                    errors: Sequence[ErrorCode | None], failed: Mapping[int, PartitionAppend],
                    late: Mapping[int, Rejection]) -> list[PartitionAppend] | Awaitable[list[PartitionAppend]]:
        results: list[PartitionAppend | Awaitable[PartitionAppend]] = []
        # the replicas as they were at the append: one removed while its write is out still
        # ends its acks=all wait (no longer leader)
        replicas: list[Partition | None] = []
        written = False  # some write was handed to the log writer: the answer waits for it
        for i, (topic, index, data) in enumerate(entries):
            replicas.append(self._rm.partition(topic, index))
            result = failed.get(i) or self._append_one(acks, topic, index, data, errors[i])
            if not isinstance(result, PartitionAppend):
                written = True
            results.append(result)
        if written:
            return self._when_written(acks, timeout_s, replicas, results, late)
        return self._settle(acks, timeout_s, replicas, results, late)  # type: ignore[arg-type]

    def _settle(self, acks: int, timeout_s: float, replicas: Sequence[Partition | None],
                results: list[PartitionAppend], late: Mapping[int, Rejection]
                ) -> list[PartitionAppend] | Awaitable[list[PartitionAppend]]:
        waits = []
        for i, result in enumerate(results):
            bad = late.get(i)
            if bad is not None and not result.error:
                result.error, result.message = bad.error, bad.message
            replica = replicas[i]
            if acks == -1 and result.appended and replica is not None:
                if replica.high_watermark > result.last_offset:
                    # COMMITTED as it was appended (an ISR of this replica alone): answered now, so
                    # the Produce needs no task and no loop turn, as acks=1
                    _committed(result, replica)
                else:
                    waits.append((result, replica))
        return self._await_commit(results, waits, timeout_s) if waits else results

    async def _when_written(self, acks: int, timeout_s: float, replicas: Sequence[Partition | None],
                            pending: list[PartitionAppend | Awaitable[PartitionAppend]],
                            late: Mapping[int, Rejection]) -> list[PartitionAppend]:
        """Every write is already handed out (the writer coalesces them); await them in order."""
        results = [r if isinstance(r, PartitionAppend) else await r for r in pending]
        settled = self._settle(acks, timeout_s, replicas, results, late)
        return settled if isinstance(settled, list) else await settled

    def _append_one(self, acks: int, topic: str, index: int, data: Records,
                    topic_error: ErrorCode | None) -> PartitionAppend | Awaitable[PartitionAppend]:
        if topic_error:
            return PartitionAppend(topic_error)
        partition = self._rm.get_partition_or_error(topic, index)
        if isinstance(partition, ErrorCode):
            return PartitionAppend(partition, f"broker {self._rm.node_id} does not lead {topic}-{index}"
                                   if partition == ErrorCode.NOT_LEADER_OR_FOLLOWER else None)
        if acks == -1 and len(partition.isr) < partition.min_insync_replicas:
            return PartitionAppend(ErrorCode.NOT_ENOUGH_REPLICAS, f"ISR {list(partition.isr)} is smaller than "
                                   f"min.insync.replicas={partition.min_insync_replicas}")
        appended = partition.submit_append(data)
        if not isinstance(appended, AppendResult):
            return self._outcome_when_written(topic, index, appended, partition)
        return _logged(topic, index, _outcome(appended, partition))

    @staticmethod
    async def _outcome_when_written(topic: str, index: int, pending: Awaitable[AppendResult],
                                    partition: Partition) -> PartitionAppend:
        return _logged(topic, index, _outcome(await pending, partition))

    async def _await_commit(self, results: list[PartitionAppend], waits: list[tuple[PartitionAppend, Partition]],
                            timeout_s: float) -> list[PartitionAppend]:
        deadline = time.monotonic() + max(timeout_s, 0)  # anyio.current_time() on asyncio, without its lookups
        for result, partition in waits:
            if await partition.wait_committed(result.last_offset, max(deadline - time.monotonic(), 0)):
                _committed(result, partition)
            else:
                _not_committed(result, partition)
        return results

    async def append_and_wait(self, topic: str, index: int, records: bytes | TxnMarker, timeout_s: float,
                              on_appended: Callable[[PartitionAppend], None] | None = None) -> PartitionAppend:
        """A coordinator's write (acks=all, Kafka's origin=Coordinator): a batch of its own, with
        the partition's from_coordinator checks, or a transaction marker. Returns once the records
        are COMMITTED (error NONE) or not within `timeout_s`. `on_appended` runs right after a
        successful append, before the wait."""
        result, partition = self._coordinator_append(topic, index, records)
        if partition is None:
            return result
        if on_appended is not None:
            on_appended(result)
        return await self._coordinator_committed(topic, index, records, result, partition, timeout_s)

    def append_started(self, topic: str, index: int, records: bytes, timeout_s: float
                       ) -> PartitionAppend | Awaitable[PartitionAppend]:
        """`append_and_wait` of a batch, with the wait left out when there is none: the outcome
        itself when the append failed or its records are COMMITTED at once (a partition with no
        followers in its ISR), else an awaitable of it. A handler that gets the outcome answers
        without a task and in the same turn of the loop."""
        result, partition = self._coordinator_append(topic, index, records)
        if partition is None or partition.committed(result.last_offset):
            return result
        return self._coordinator_committed(topic, index, records, result, partition, timeout_s)

    async def append_markers_and_wait(self, tps: list[tuple[str, int]], marker: TxnMarker,
                                      timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        """`append_and_wait` of one marker on several partitions: all appended first, then each
        waited for in turn (together they last as long as the slowest, with no task per partition)."""
        deadline = time.monotonic() + timeout_s  # as anyio.current_time(), without a getpid per call
        if self._rm.recovering:
            with anyio.move_on_after(timeout_s):
                await self._rm.wait_recovered(tps)
        appended = [(tp, *self._coordinator_append(*tp, marker)) for tp in tps]
        codes: dict[tuple[str, int], ErrorCode] = {}
        for tp, result, partition in appended:
            if partition is not None:
                result = await self._coordinator_committed(*tp, marker, result, partition,
                                                           max(deadline - time.monotonic(), 0))
            codes[tp] = result.error
        return codes

    def _coordinator_append(self, topic: str, index: int,
                            records: bytes | TxnMarker) -> tuple[PartitionAppend, Partition | None]:
        """The append of `append_and_wait`; the partition None when nothing was appended."""
        partition = self._rm.get_partition_or_error(topic, index)
        if isinstance(partition, ErrorCode):
            return PartitionAppend(partition), None
        if isinstance(records, TxnMarker):
            appended = partition.append_marker(records.producer_id, records.producer_epoch, records.committed,
                                               records.coordinator_epoch, records.transaction_version)
        else:
            appended = partition.append(records, from_coordinator=True)
        result = _outcome(appended, partition)
        return result, partition if result.appended else None

    async def _coordinator_committed(self, topic: str, index: int, records: bytes | TxnMarker,
                                     result: PartitionAppend, partition: Partition,
                                     timeout_s: float) -> PartitionAppend:
        """The wait of `append_and_wait`: until COMMITTED, then a marker's listeners are told."""
        if not await partition.wait_committed(result.last_offset, timeout_s):
            _not_committed(result, partition)
        elif isinstance(records, TxnMarker):
            for listener in self._rm.marker_listeners:
                listener(topic, index, records, result.last_offset)
        return result


def _logged(topic: str, index: int, result: PartitionAppend) -> PartitionAppend:
    if result.error:
        log.info("produce to %s-%d failed: %s %s", topic, index, result.error.name, result.message or "")
    return result


def _outcome(result: AppendResult, partition: Partition) -> PartitionAppend:
    return PartitionAppend(result.error, result.message, result.base_offset, result.last_offset,
                           result.log_append_time, partition.log_start_offset,
                           appended=result.error == ErrorCode.NONE and result.last_offset >= 0)


def _committed(result: PartitionAppend, partition: Partition) -> None:
    """An acks=all append is COMMITTED: its answer, unless the ISR fell below min.insync.replicas."""
    if len(partition.isr) < partition.min_insync_replicas:
        result.error, result.message = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
            f"appended, but the ISR {list(partition.isr)} fell below min.insync.replicas="
            f"{partition.min_insync_replicas}")


def _not_committed(result: PartitionAppend, partition: Partition) -> None:
    """Why appended records were not COMMITTED in time: leadership moved, or followers are slow."""
    if not partition.is_leader:
        result.error, result.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, (
            "leadership moved before the records were committed")
    else:
        result.error, result.message = ErrorCode.REQUEST_TIMED_OUT, (
            "not all in-sync replicas had the records before the timeout; they may still be committed")

