"""An internal topic whose partition leaders coordinate keys: `__consumer_offsets` places consumer
groups, `__transaction_state` transactional ids (Kafka's rule for both).

- Key K lives on the leader of partition abs(java_string_hashcode(K)) % N, N being the topic's
  partition count. The first FindCoordinator creates the topic through the controller with
  replication factor min(3, live brokers) and retention.ms=-1.
- A broker that becomes leader of one of its partitions loads it (reads its log) before answering
  for its keys, once the partition's high watermark has reached its log end (a record not yet
  COMMITTED may still vanish in a failover): until then they get COORDINATOR_LOAD_IN_PROGRESS;
  others get NOT_COORDINATOR.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterator

from kshim.broker import Broker
from kshim.errors import BrokerError
from wire import records
from wire.errors import ErrorCode

LOAD_CHUNK_BYTES = 1 << 20


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


class InternalTopic:
    def __init__(self, broker: Broker, name: str, default_partitions: int) -> None:
        self.broker = broker
        self.name = name
        self.default_partitions = default_partitions
        self.loaded: set[int] = set()
        self.loading: set[int] = set()

    @property
    def num_partitions(self) -> int:
        topic = self.broker.topics.get(self.name)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.default_partitions

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

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
        rf = max(1, min(3, self.broker.cluster_size))
        try:
            await self.broker.create_topic(self.name, self.default_partitions, {"retention.ms": "-1"},
                                           replication_factor=rf)
        except BrokerError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        return self.broker.topics.get(self.name)

    async def find(self, key: str) -> dict:
        """A FindCoordinator answer for one key: error_code, error_message, node_id, host, port."""
        def error(code: ErrorCode, message: str | None = None) -> dict:
            return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
        try:
            topic = await self.ensure()
        except BrokerError as e:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, e.message)
        if topic is None:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name} is being created")
        info = topic.partitions[partition_for(key, len(topic.partitions))]
        alive = {b.node_id: b for b in self.broker.image.alive_brokers()}
        node = alive.get(info.leader)
        if node is None:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.name}-{info.index} has no leader")
        return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": node.node_id,
                "host": node.host, "port": node.port}

    def on_image(self) -> tuple[set[int], set[int]]:
        """After a metadata image: (partitions no longer led, partitions newly led). The lost ones
        leave `loaded`; the new ones join `loading` until the owner loads them."""
        topic = self.broker.topics.get(self.name)
        leading = set()
        if topic is not None:
            for info in topic.partitions:
                replica = self.broker.replica_manager.partition(self.name, info.index)
                if replica is not None and replica.is_leader:
                    leading.add(info.index)
        lost = self.loaded - leading
        self.loaded &= leading
        self.loading &= leading
        new = leading - self.loaded - self.loading
        self.loading |= new
        return lost, new

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

    def leader_replica(self, index: int):
        """The local replica of `index` if this broker leads it, else None."""
        replica = self.broker.replica_manager.partition(self.name, index)
        return replica if replica is not None and replica.is_leader else None
