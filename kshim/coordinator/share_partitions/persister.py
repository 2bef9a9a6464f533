"""How a partition leader reaches the share coordinator (Kafka's DefaultStatePersister): the
coordinator of a share partition's key may be this broker (a call) or another (the inter-broker
APIs ReadShareGroupState 84, WriteShareGroupState 85, InitializeShareGroupState 83 and
DeleteShareGroupState 86 over a broker connection). A coordinator that moved, is loading, or a
connection lost is retried with backoff until the deadline; then the last error is returned.
"""
from __future__ import annotations

import logging
import uuid

import anyio

from kshim.coordinator.runtime import CoordinatorHost
from kshim.coordinator.share_partitions.coordinator import ShareCoordinator, StateKey
from kshim.coordinator.share_partitions.record_format import StoredState
from kshim.coordinator.share_partitions.state import StateBatch
from kshim.errors import BrokerError
from kshim.replication.client import CONNECTION_LOST, BrokerConnections
from wire.errors import ErrorCode

log = logging.getLogger("kshim.share")

INITIALIZE, READ, WRITE, DELETE = 83, 84, 85, 86
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0}
RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
             ErrorCode.REQUEST_TIMED_OUT)
DEADLINE_S = 20.0
MAX_BACKOFF_S = 0.5


def _partition_body(op: int, key: StateKey, **fields) -> dict:
    group, topic_id, partition = key
    return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition, **fields}]}]}


class SharePersister:
    def __init__(self, broker: CoordinatorHost, coordinator: ShareCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self._connections = BrokerConnections(f"kshim-share-{broker.node_id}")

    async def read(self, key: StateKey, leader_epoch: int) -> tuple[ErrorCode, StoredState | None]:
        found: list[StoredState | None] = [None]

        async def local() -> ErrorCode:
            code, found[0] = self.coordinator.read(key, leader_epoch)
            return code

        def remote(result) -> ErrorCode:
            if not result.error_code and result.start_offset >= 0:
                found[0] = StoredState(result.state_epoch, leader_epoch, result.start_offset,
                                       [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                        for b in result.state_batches])
            return ErrorCode(result.error_code)

        code = await self._call(key, READ, _partition_body(READ, key, leader_epoch=leader_epoch), local, remote)
        return code, found[0] if not code else None

    async def write(self, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> ErrorCode:
        body = _partition_body(WRITE, key, state_epoch=state_epoch, leader_epoch=leader_epoch,
                               start_offset=start_offset, state_batches=[
                                   {"first_offset": b.first_offset, "last_offset": b.last_offset,
                                    "delivery_state": b.state, "delivery_count": b.delivery_count} for b in batches])
        return await self._call(key, WRITE, body,
                                lambda: self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches),
                                lambda r: ErrorCode(r.error_code))

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> ErrorCode:
        body = _partition_body(INITIALIZE, key, state_epoch=state_epoch, start_offset=start_offset)
        return await self._call(key, INITIALIZE, body,
                                lambda: self.coordinator.initialize(key, state_epoch, start_offset),
                                lambda r: ErrorCode(r.error_code))

    async def delete(self, key: StateKey) -> ErrorCode:
        return await self._call(key, DELETE, _partition_body(DELETE, key), lambda: self.coordinator.delete(key),
                                lambda r: ErrorCode(r.error_code))

    async def _call(self, key: StateKey, api: int, body: dict, local, remote) -> ErrorCode:
        backoff = 0.02
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        with anyio.move_on_after(DEADLINE_S):
            while True:
                try:
                    node = await self.coordinator.find(key)
                except BrokerError as e:
                    node, code = None, e.code
                if node is not None and node.node_id == self.broker.node_id:
                    code = await local()
                elif node is not None:
                    result = await self._send(node.node_id, node.host, node.port, api, body)
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE if result is None else remote(result)
                if code not in RETRIABLE:
                    return code
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        return code

    async def _send(self, node_id: int, host: str, port: int, api: int, body: dict):
        """The one partition result of `api` from broker `node_id`, None if the connection failed."""
        try:
            response = await self._connections.request(node_id, host, port, api, VERSIONS[api], body, DEADLINE_S)
        except CONNECTION_LOST as e:
            log.info("share state request %d to node %d failed: %s", api, node_id, e)
            return None
        return response.results[0].partitions[0]


def topic_key(group: str, topic_id: uuid.UUID, partition: int) -> StateKey:
    return group, topic_id, partition
