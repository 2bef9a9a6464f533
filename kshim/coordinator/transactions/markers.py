"""Transaction markers: ending a transaction on every partition it wrote to.

- `write_here` appends markers to partitions this broker leads and waits until they are COMMITTED
  (Kafka writes markers with acks=all); the WriteTxnMarkers handler and the local coordinator
  both use it. The replica manager tells its marker listeners of each COMMITTED marker: that is
  how a marker on a `__consumer_offsets` partition settles the transaction's offset commits with
  the group coordinator.
- `MarkerWriter` is the coordinator's side: it groups a transaction's partitions by leader, writes
  the local ones with `write_here` and sends WriteTxnMarkers to the other leaders (v2 naming
  transaction version 2 for the markers of an epoch bumped by transactions v2, else v1), retrying
  with backoff what failed (no leader yet, a leader change, a slow follower) until every partition
  has its marker, the topic is gone, or the coordinator lost its `__transaction_state` partition
  (the next coordinator finishes the job from the PrepareCommit/PrepareAbort record).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

import anyio

from kshim.cluster.image import NO_LEADER
from kshim.coordinator.runtime import CoordinatorHost
from kshim.replica import ReplicaManager, TxnMarker
from kshim.replication.client import CONNECTION_LOST, BrokerConnections
from wire.errors import ErrorCode

log = logging.getLogger("kshim.transactions")

WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1
REQUEST_TIMEOUT_S = 30.0
MAX_BACKOFF_S = 1.0

TopicPartition = tuple[str, int]


async def write_here(replicas: ReplicaManager, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                     partitions: Iterable[TopicPartition], timeout_s: float,
                     transaction_version: int = 1) -> dict[TopicPartition, ErrorCode]:
    """Markers on partitions led here; NONE only for those COMMITTED within `timeout_s`. The
    partitions wait together, so the whole lasts as long as the slowest."""
    marker = TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch, transaction_version)
    return await replicas.append_markers_and_wait(list(partitions), marker, timeout_s)


class MarkerWriter:
    def __init__(self, broker: CoordinatorHost) -> None:
        self.broker = broker
        self._connections = BrokerConnections(f"kshim-txn-{broker.node_id}")

    async def write(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                    partitions: Iterable[TopicPartition], still_coordinator: Callable[[], bool],
                    transaction_version: int = 1) -> bool:
        """Markers on every partition; False if this broker stopped coordinating meanwhile."""
        remaining = set(partitions)
        backoff = 0.02
        while remaining:
            if not still_coordinator():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for topic, index in list(remaining):
                info = self.broker.topics.get(topic)
                if info is None or not 0 <= index < len(info.partitions):
                    remaining.discard((topic, index))  # deleted: nothing left to mark
                    continue
                leader = info.partitions[index].leader
                if leader != NO_LEADER:
                    by_leader.setdefault(leader, []).append((topic, index))
            done: set[TopicPartition] = set()

            async def to_leader(node_id: int, tps: list[TopicPartition]) -> None:
                self._settle(producer_id, done, await self._write_to(
                    node_id, producer_id, producer_epoch, committed, coordinator_epoch, tps, transaction_version))

            if len(by_leader) == 1:  # one leader (a single broker, or a small transaction): no task group
                node_id, tps = next(iter(by_leader.items()))
                if node_id == self.broker.node_id:  # here: no request, and two coroutines fewer per transaction
                    self._settle(producer_id, done, await write_here(
                        self.broker.replica_manager, producer_id, producer_epoch, committed, coordinator_epoch, tps,
                        REQUEST_TIMEOUT_S, transaction_version))
                else:
                    await to_leader(node_id, tps)
            else:
                async with anyio.create_task_group() as tg:
                    for node_id, tps in by_leader.items():
                        tg.start_soon(to_leader, node_id, tps)
            remaining -= done
            if remaining:
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return True

    def _settle(self, producer_id: int, done: set[TopicPartition], codes: dict[TopicPartition, ErrorCode]) -> None:
        """Add to `done` the partitions whose answer ends the job there."""
        for tp, code in codes.items():
            if code in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) and \
                    (code == ErrorCode.NONE or tp[0] not in self.broker.topics):
                done.add(tp)
            elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED):
                # the partition saw a newer epoch: this transaction ended there already
                log.warning("marker for producer %d on %s-%d refused: %s", producer_id, *tp, code.name)
                done.add(tp)

    async def _write_to(self, node_id: int, producer_id: int, producer_epoch: int, committed: bool,
                        coordinator_epoch: int, tps: list[TopicPartition],
                        transaction_version: int = 1) -> dict[TopicPartition, ErrorCode]:
        if node_id == self.broker.node_id:
            return await write_here(self.broker.replica_manager, producer_id, producer_epoch, committed, coordinator_epoch, tps,
                                    REQUEST_TIMEOUT_S, transaction_version)
        node = self.broker.image.brokers.get(node_id)
        if node is None or not node.alive:
            return {}
        topics: dict[str, list[int]] = {}
        for topic, index in tps:
            topics.setdefault(topic, []).append(index)
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": committed, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                             "transaction_version": transaction_version}]}
        try:
            response = await self._connections.request(
                node_id, node.host, node.port, WRITE_TXN_MARKERS, 2 if transaction_version >= 2 else MARKERS_VERSION,
                body, REQUEST_TIMEOUT_S + 5)
        except CONNECTION_LOST as e:
            log.info("WriteTxnMarkers to node %d failed: %s", node_id, e)
            return {}
        return {(t.name, p.partition_index): ErrorCode(p.error_code)
                for m in response.markers for t in m.topics for p in t.partitions}

    async def aclose(self) -> None:
        await self._connections.aclose()
