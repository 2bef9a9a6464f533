"""The read side of the ReplicaManager (Kafka's fetchMessages): one pass over the partitions a
Fetch names, and the long-poll that repeats it when an append wakes the request."""
from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Awaitable, Protocol

import anyio

from kshim.clock import SYSTEM
from kshim.cluster.image import MetadataImage
from kshim.log.txnindex import AbortedTxn
from kshim.replica.partition import OffsetOutOfRange, Partition
from wire import records
from wire.errors import ErrorCode
from wire.primitives import FileRecords



class _Image(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class ReplicaManager(Protocol):
    """What the read path needs of the ReplicaManager (a protocol: the manager imports this module)."""
    @property
    def node_id(self) -> int: ...

    @property
    def metadata(self) -> _Image: ...

    def get_partition_or_error(self, topic: str | uuid.UUID, index: int,
                               current_leader_epoch: int = -1) -> Partition | ErrorCode: ...

READ_COMMITTED = 1
NO_LIMIT = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class FetchParams:
    replica_id: int  # >= 0: a follower replica of that node; -1: a consumer
    max_wait_ms: int
    min_bytes: int
    max_bytes: int  # for the whole response; <= 0: no limit
    isolation_level: int  # 0 read_uncommitted, 1 read_committed
    # records as FileRecords (file regions) for the server to sendfile, not copied bytes; not for
    # read_committed, whose aborted-transaction list needs the read's last batch from the bytes
    file_regions: bool = False


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition a Fetch asks for."""
    topic: str | uuid.UUID  # a name, or an id (Fetch v13+)
    index: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    # the high watermark the follower knows (Fetch v18, KIP-1166); NO_HIGH_WATERMARK: not sent
    known_high_watermark: int = (1 << 63) - 1


@dataclass(slots=True)
class FetchPartitionData:
    """One partition's answer: whole batches as the log holds them (bytes straight from the log
    segments, never copied or re-encoded)."""
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRecords = b""
    aborted_transactions: list[AbortedTxn] | None = None  # read_committed only: overlapping the records


FetchResult = list[FetchPartitionData]


def fetch(manager: ReplicaManager, params: FetchParams, asked: list[FetchPartition]
          ) -> FetchResult | Awaitable[FetchResult]:
    record_progress = params.replica_id < 0 or not _cut_off(manager, params.replica_id)
    results, total, leaders = _read_all(manager, params, asked, record_progress)
    if total >= params.min_bytes or params.max_wait_ms <= 0 or any(r.error for r in results) \
            or _high_watermark_news(params, asked, results):
        return results
    release(results)  # read again after the wait
    # the wait begins a loop turn from now, in the server's task: what woke these partitions
    # meanwhile (an append on another request) must end it at once, as it would have ended a wait
    return _wait_and_read(manager, params, asked, leaders, record_progress, [p.wakes for p in leaders])


def release(results: FetchResult) -> None:
    """Close the file regions of answers that will not be sent (FileRecords own descriptors)."""
    for r in results:
        if isinstance(r.records, FileRecords):
            r.records.close()


def _read_all(manager: ReplicaManager, params: FetchParams, asked: list[FetchPartition], record_progress: bool
              ) -> tuple[FetchResult, int, list[Partition]]:
    """One pass over every asked partition: (answers, bytes of records, the partitions led here)."""
    budget = params.max_bytes if params.max_bytes > 0 else NO_LIMIT
    follower = params.replica_id >= 0
    total = 0
    now = SYSTEM.wall_ms()
    results: FetchResult = []
    leaders: list[Partition] = []
    for p in asked:
        result = FetchPartitionData(aborted_transactions=[] if params.isolation_level == READ_COMMITTED else None)
        results.append(result)
        partition = manager.get_partition_or_error(p.topic, p.index, p.current_leader_epoch)
        if isinstance(partition, ErrorCode):
            result.error = partition
            continue
        leaders.append(partition)
        if follower and record_progress and p.fetch_offset <= partition.log_end_offset:
            partition.record_follower_fetch(params.replica_id, p.fetch_offset, now)
        result.high_watermark = partition.high_watermark
        result.last_stable_offset = partition.last_stable_offset
        result.log_start_offset = partition.log_start_offset
        limit = min(p.max_bytes, budget - total)
        if limit <= 0 and total > 0:
            continue  # the response is full: this partition gets no data this time
        first = total == 0  # KIP-74: only the first partition with data may exceed the limits
        try:
            regions = params.file_regions and params.isolation_level != READ_COMMITTED
            if follower:
                data = partition.read_for_follower(p.fetch_offset, max(limit, 1), first, regions) \
                    if record_progress else b""
            else:
                data = partition.read(p.fetch_offset, max(limit, 1), params.isolation_level, first, regions)
        except OffsetOutOfRange:
            result.error = ErrorCode.OFFSET_OUT_OF_RANGE
            continue
        result.records = data
        total += len(data)
        if data and params.isolation_level == READ_COMMITTED:
            assert not isinstance(data, FileRecords)  # regions are off for read_committed (see above)
            result.aborted_transactions = partition.log.aborted_between(p.fetch_offset, _end_of(data))
    return results, total, leaders


def _high_watermark_news(params: FetchParams, asked: list[FetchPartition], results: FetchResult) -> bool:
    """A follower that told us the high watermark it knows (Fetch v18, KIP-1166) and is behind
    ours is answered at once rather than after max_wait_ms: it learns the new high watermark
    (and so may serve or expose it) without waiting for new data."""
    return params.replica_id >= 0 and any(
        r.high_watermark > p.known_high_watermark for p, r in zip(asked, results) if not r.error)


def _end_of(data: bytes) -> int:
    """The offset after the last batch of a read."""
    end = -1
    for _pos, header in records.iter_batches(data):
        end = header.next_offset
    return end


def _cut_off(manager: ReplicaManager, replica_id: int) -> bool:
    """Replication traffic to or from an isolated broker is dropped (`kshim ctl isolate`)."""
    brokers = manager.metadata.image.brokers
    me = brokers.get(manager.node_id)
    them = brokers.get(replica_id)
    return bool((me and me.isolated) or (them and them.isolated))


async def _wait_and_read(manager: ReplicaManager, params: FetchParams, asked: list[FetchPartition],
                         partitions: list[Partition], record_progress: bool, wakes: list[int]) -> FetchResult:
    """Wait until one of `partitions` is woken (an append, a high watermark move) after the read
    that counted `wakes` (Partition.wakes), read again, and so on until min_bytes or max_wait_ms."""
    follower = params.replica_id >= 0
    with anyio.move_on_after(params.max_wait_ms / 1000):
        while True:
            if all(p.wakes == seen for p, seen in zip(partitions, wakes)):  # nothing since the read
                event = anyio.Event()
                for partition in partitions:
                    partition.add_waiter(event)
                try:
                    await event.wait()
                finally:
                    for partition in partitions:
                        partition.remove_waiter(event)
                # one loop turn before reading: the requests already received behind the append
                # that woke us (librdkafka sends a Produce per partition, together) are appended
                # first, and one answer carries them all instead of one answer each
                await asyncio.sleep(0)
            wakes = [p.wakes for p in partitions]  # the read below is synchronous: no wake during it
            if not record_progress or (follower and _cut_off(manager, params.replica_id)):
                record_progress = False
                continue  # cut off (now or since): sit out the wait, as a lost request would
            results, total, _ = _read_all(manager, params, asked, record_progress)
            if total >= params.min_bytes or any(r.error for r in results) \
                    or _high_watermark_news(params, asked, results):
                return results
            release(results)
    return _read_all(manager, params, asked, record_progress and not _cut_off(manager, params.replica_id))[0]
