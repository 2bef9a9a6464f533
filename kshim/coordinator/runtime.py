"""The coordinator runtime (Kafka's CoordinatorRuntime, small): what the group and the transaction
coordinators share. Each keeps its state in an internal topic whose partition leaders coordinate
keys: `__consumer_offsets` places consumer groups, `__transaction_state` transactional ids
(Kafka's rule for both). A coordinator is a `Shard`: it replays a partition's records into its
state (`load`), forgets them (`unload`) and fires its timers (`timers`); the runtime does the rest.

- Key K lives on the leader of partition abs(java_string_hashcode(K)) % N, N being the topic's
  partition count. The first FindCoordinator creates the topic through the controller, compacted,
  with the coordinator's replication factor (`internal_replication_factor`) and configs.
- A broker that becomes leader of one of its partitions loads it (reads its log) before answering
  for its keys, once the partition's high watermark has reached its log end (a record not yet
  COMMITTED may still vanish in a failover): until then they get COORDINATOR_LOAD_IN_PROGRESS;
  others get NOT_COORDINATOR.
- `run` is the coordinator's one background task: it loads partitions as they become ready, fires
  the shard's timers, and sleeps on a wake-up signal (a new partition to load, a state change)
  or until the next deadline; it never polls, but retries a load every LOAD_RETRY_MS while a
  partition waits for its high watermark.
- `write` appends a coordinator's records to its partition and waits until they are COMMITTED
  (through the replica manager, as Kafka's coordinators write with acks=all).
"""
from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Awaitable, Callable, Iterator, Mapping, Protocol

import anyio
from anyio.abc import TaskGroup

from kshim.broadcast import Signal
from kshim.cluster.image import BrokerInfo, TopicInfo
from kshim.configs.broker import BrokerConfig
from kshim.errors import BrokerError
from kshim.replica import PartitionAppend, ReplicaManager, TxnMarker
from kshim.replica.manager import Metadata
from kshim.replica.partition import Partition
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.coordinator")

LOAD_CHUNK_BYTES = 1 << 20
# the internal topics are compacted, as Kafka creates them (offsets.topic.segment.bytes,
# transaction.state.log.segment.bytes: 100 MiB): a load replays the latest record of each key
# (tombstones until delete.retention.ms after their clean); gaps in offsets are skipped by reads
INTERNAL_TOPIC_CONFIGS: dict[str, str | None] = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
DEFAULT_REPLICATION_FACTOR = 3  # offsets.topic.replication.factor, transaction.state.log.replication.factor
LOAD_RETRY_MS = 50  # a partition waits to be loaded until its high watermark reaches its log end
MAX_PLACED = 65_536  # keys whose partition partition_of keeps
IDLE_WAKE_S = 60.0  # with no deadline, the run loop still looks around this often


@lru_cache(maxsize=4096)  # asked several times per request for the same few group and transactional ids
def java_string_hashcode(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions  # Kafka's Utils.abs


def internal_topic_configs(segment_bytes: int, min_isr: int | None = None) -> dict[str, str | None]:
    """The configs an internal topic is created with: compacted, `segment_bytes` segments
    (offsets.topic.segment.bytes, transaction.state.log.segment.bytes) and, given, its
    min.insync.replicas (transaction.state.log.min.isr)."""
    configs: dict[str, str | None] = {**INTERNAL_TOPIC_CONFIGS, "segment.bytes": str(segment_bytes)}
    if min_isr is not None:
        configs["min.insync.replicas"] = str(min_isr)
    return configs


def internal_replication_factor(configured: int, alive: int, registered: int) -> int | None:
    """The replication factor an internal topic is created with, or None while it must wait.

    Kafka creates it with exactly its configured factor and refuses (FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE) while fewer brokers are alive. kshim does the same in a cluster that
    has registered at least that many brokers: one of them down delays the creation, it does not
    weaken the topic. A cluster with fewer registered brokers than the factor (a single broker, or
    two, with the default 3) gets a replica on each live broker instead, as kshim always did:
    Kafka's refusal would leave it without groups or transactions for good, and a single broker
    must work with Kafka's defaults."""
    if alive >= configured:
        return configured
    if registered < configured:
        return max(1, alive)
    return None


class CoordinatorHost(Metadata, Protocol):
    """What the coordinators use of the broker they run on (a protocol: they do not import it)."""
    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def cluster_size(self) -> int: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...

    def partition(self, topic: str, index: int) -> Partition | None: ...

    async def create_topic(self, name: str, partitions: int | None = None,
                           configs: Mapping[str, str | None] | None = None, *, replication_factor: int = -1,
                           validate_only: bool = False) -> TopicInfo | None: ...

    async def allocate_producer_id(self) -> int: ...


class Shard(Protocol):
    """A coordinator's state, as the runtime drives it."""

    def load(self, index: int, replica: Partition) -> None:
        """Replay partition `index` (led here, COMMITTED to its end) into the state."""

    def unload(self, index: int) -> None:
        """Forget what partition `index` holds: this broker no longer leads it."""

    async def timers(self, tg: TaskGroup) -> float:
        """Fire what is due (long work goes to `tg`); the next deadline in the runtime's clock ms, or inf."""


class CoordinatorRuntime:
    def __init__(self, broker: CoordinatorHost, name: str, default_partitions: int, shard: Shard,
                 clock_ms: Callable[[], int], replication_factor: int = DEFAULT_REPLICATION_FACTOR,
                 topic_configs: Mapping[str, str | None] = INTERNAL_TOPIC_CONFIGS) -> None:
        self.broker = broker
        self.name = name
        self.default_partitions = default_partitions
        # the topic's replication factor and configs when the first FindCoordinator creates it
        self.replication_factor = replication_factor
        self.topic_configs = dict(topic_configs)
        self.shard = shard
        self.clock_ms = clock_ms
        self.loaded: set[int] = set()
        self.loading: set[int] = set()
        self.wake = Signal()  # the run loop looks again: something to load, or a deadline moved
        self._placed_in: object = None  # the topics map `_placed` was computed with (partition_of)
        self._placed: dict[str, int] = {}

    @property
    def num_partitions(self) -> int:
        topic = self.broker.topics.get(self.name)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.default_partitions

    def partition_of(self, key: str) -> int:
        # asked once or more by every group or transaction request: placements are kept while the
        # broker's topics map (replaced with each metadata image) is the same one
        topics = self.broker.topics
        if topics is not self._placed_in:
            self._placed_in, self._placed = topics, {}
        index = self._placed.get(key)
        if index is None:
            if len(self._placed) >= MAX_PLACED:
                self._placed.clear()
            index = self._placed[key] = partition_for(key, self.num_partitions)
        return index

    def status(self, key: str) -> ErrorCode:
        """NONE when this broker leads the key's partition and has loaded it."""
        index = self.partition_of(key)
        if index in self.loaded:
            return ErrorCode.NONE
        if index in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if self.name not in self.broker.topics:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NOT_COORDINATOR

    async def ensure(self):
        topic = self.broker.topics.get(self.name)
        if topic is not None:
            return topic
        image = self.broker.image
        rf = internal_replication_factor(self.replication_factor, len(image.alive_brokers()), len(image.brokers))
        if rf is None:
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              f"{self.name} needs {self.replication_factor} live brokers (its replication factor)")
        configs = dict(self.topic_configs)
        min_isr = configs.get("min.insync.replicas")
        if min_isr is not None and int(min_isr) > rf:
            # a topic smaller than its factor (see internal_replication_factor) keeps its writes
            # possible: its min.insync.replicas is at most its replicas
            configs["min.insync.replicas"] = str(rf)
        try:
            await self.broker.create_topic(self.name, self.default_partitions, configs, replication_factor=rf)
        except BrokerError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        return self.broker.topics.get(self.name)

    async def find(self, key: str) -> BrokerInfo:
        """The live broker that coordinates `key` (FindCoordinator); BrokerError
        COORDINATOR_NOT_AVAILABLE while the topic is being created or the partition has no leader."""
        try:
            topic = await self.ensure()
        except BrokerError as e:
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE, e.message) from None
        if topic is None:
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name} is being created")
        info = topic.partitions[partition_for(key, len(topic.partitions))]
        node = {b.node_id: b for b in self.broker.image.alive_brokers()}.get(info.leader)
        if node is None:
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name}-{info.index} has no leader")
        return node

    def on_image(self) -> None:
        """After a metadata image: the shard forgets partitions no longer led here; newly led ones
        join `loading` until they can be loaded."""
        topic = self.broker.topics.get(self.name)
        leading = set()
        if topic is not None:
            for info in topic.partitions:
                replica = self.broker.partition(self.name, info.index)
                if replica is not None and replica.is_leader:
                    leading.add(info.index)
        lost = self.loaded - leading
        self.loaded &= leading
        self.loading &= leading
        new = leading - self.loaded - self.loading
        self.loading |= new
        for index in sorted(lost):
            self.shard.unload(index)
        if new:
            self.wake.fire()

    def load_pending(self) -> None:
        """Load every partition in `loading` that is ready."""
        for index in sorted(self.loading):
            replica = self.take_for_loading(index)
            if replica is not None:
                self.shard.load(index, replica)
                self.loaded.add(index)

    def reload(self, index: int) -> None:
        """Forget partition `index` and load it again from its log (memory must follow the log)."""
        self.loaded.discard(index)
        self.shard.unload(index)
        self.loading.add(index)
        self.wake.fire()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                self.load_pending()
                deadline = await self.shard.timers(tg)
                if self.loading:
                    deadline = min(deadline, self.clock_ms() + LOAD_RETRY_MS)
                wait_s = IDLE_WAKE_S if deadline == math.inf else max(deadline - self.clock_ms(), 1) / 1000
                with anyio.move_on_after(wait_s):
                    await self.wake.wait()

    async def write(self, index: int, records: bytes | TxnMarker, timeout_s: float,
                    on_appended: Callable[[PartitionAppend], None] | None = None) -> PartitionAppend:
        """Append to partition `index` as its leader and wait until COMMITTED (see ReplicaManager.append_and_wait)."""
        return await self.broker.replica_manager.append_and_wait(self.name, index, records, timeout_s, on_appended)

    def write_started(self, index: int, records: bytes, timeout_s: float
                      ) -> PartitionAppend | Awaitable[PartitionAppend]:
        """`write`, answered at once when the records are COMMITTED as they are appended (or the append failed)."""
        return self.broker.replica_manager.append_started(self.name, index, records, timeout_s)

    def take_for_loading(self, index: int):
        """The replica of `index` to load now, leaving `loading`; None if it is not ready yet (it
        stays loading: a new leader's log may end in records not yet COMMITTED, which a failover
        could still remove, so it waits for the high watermark to reach the log end) or no longer
        led here (it leaves `loading`)."""
        replica = self.leader_replica(index)
        if replica is not None and replica.high_watermark < replica.log_end_offset:
            return None
        self.loading.discard(index)
        return replica

    @staticmethod
    def stored_batches(replica) -> Iterator[tuple[records.BatchHeader, memoryview]]:
        """Every batch of the partition, log start to log end, read in chunks: what a load replays."""
        offset, end = replica.log_start_offset, replica.log_end_offset
        while offset < end:
            data = replica.read(offset, LOAD_CHUNK_BYTES, 0)
            if not data:
                return
            for pos, header in records.iter_batches(data):
                offset = header.next_offset
                yield header, memoryview(data)[pos:pos + header.size]

    def batch_records(self, index: int, header: records.BatchHeader, batch: memoryview) -> list[records.Record]:
        """The records of a stored batch; none, with one warning, for a batch that cannot be
        decoded (a garbage payload under a valid CRC): it must not keep the broker from starting."""
        try:
            return records.decode_records(batch)
        except records.CorruptRecordError as e:
            log.warning("skipping the batch at offsets %d-%d of %s-%d while loading: it cannot be decoded (%s)",
                        header.base_offset, header.next_offset - 1, self.name, index, e)
            return []

    def leader_replica(self, index: int):
        """The local replica of `index` if this broker leads it, else None."""
        replica = self.broker.replica_manager.partition(self.name, index)
        return replica if replica is not None and replica.is_leader else None
