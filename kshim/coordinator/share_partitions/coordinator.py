"""The share coordinator of one broker (Kafka's ShareCoordinator): the durable state of the share
partitions whose `__share_group_state` partition it leads. A share partition's key is
"group:topic id:partition" (Kafka's SharePartitionKey), placed as the runtime places every key.

- read: the stored state epoch, start offset and state batches; start offset -1 when none is
  stored (the leader then starts from share.auto.offset.reset and writes that).
- write: the partition leader's whole in-flight window, written as a ShareSnapshot record and
  applied in memory once COMMITTED; the answer waits for that, so a leader that answers an
  acknowledgement after its write knows it survives a SIGKILL of any broker. A write from an
  older state epoch (the offsets were altered or deleted since) is FENCED_STATE_EPOCH; from an
  older leader epoch (a deposed leader) FENCED_LEADER_EPOCH.
- initialize: a new start offset under a new state epoch with nothing in flight (what
  AlterShareGroupOffsets writes); delete: a tombstone (DeleteShareGroupOffsets, DeleteGroups).
- Writes of one key go one at a time (the latest wins in memory and in the log alike).
- Until a partition is loaded: COORDINATOR_LOAD_IN_PROGRESS; not led here: NOT_COORDINATOR.
"""
from __future__ import annotations

import logging
import math
import uuid

import anyio
from anyio.abc import TaskGroup

from kshim.clock import SYSTEM, Clock
from kshim.cluster.image import BrokerInfo
from kshim.coordinator import SHARE_STATE_TOPIC
from kshim.coordinator.runtime import CoordinatorHost, CoordinatorRuntime, internal_topic_configs
from kshim.coordinator.share_partitions import record_format as fmt
from kshim.coordinator.share_partitions.record_format import StoredState
from kshim.coordinator.share_partitions.state import StateBatch
from kshim.replica.partition import Partition
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.share")

WRITE_TIMEOUT_S = 30.0

StateKey = tuple[str, uuid.UUID, int]


def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group}:{topic_id}:{partition}"


class ShareCoordinator:
    def __init__(self, broker: CoordinatorHost, clock: Clock = SYSTEM) -> None:
        self.broker = broker
        c = broker.config
        self.runtime = CoordinatorRuntime(broker, SHARE_STATE_TOPIC, c.share_state_partitions, self, clock.monotonic_ms,
                                          c.share_state_replication_factor,
                                          internal_topic_configs(c.share_state_segment_bytes, c.share_state_min_isr))
        self.states: dict[StateKey, StoredState] = {}
        self._locks: dict[StateKey, anyio.Lock] = {}

    def check(self, key: StateKey) -> ErrorCode:
        return self.runtime.status(share_key(*key))

    async def find(self, key: StateKey) -> BrokerInfo:
        return await self.runtime.find(share_key(*key))

    def on_image(self) -> None:
        self.runtime.on_image()

    async def run(self) -> None:
        await self.runtime.run()

    async def timers(self, tg: TaskGroup) -> float:
        return math.inf

    def unload(self, index: int) -> None:
        for key in [k for k in self.states if self.runtime.partition_of(share_key(*k)) == index]:
            del self.states[key]

    def load(self, index: int, replica: Partition) -> None:
        found: dict[StateKey, StoredState | None] = {}
        for header, batch in self.runtime.stored_batches(replica):
            if header.is_control:
                continue
            for rec in self.runtime.batch_records(index, header, batch):
                parsed = fmt.decode_key(bytes(rec.key)) if rec.key is not None else None
                if parsed is None:
                    continue
                kind, group, topic_id, partition = parsed
                key = (group, topic_id, partition)
                if rec.value is None:
                    found[key] = None
                    continue
                value = fmt.decode_value(kind, bytes(rec.value))
                if value is None:
                    continue
                if kind == fmt.SNAPSHOT:
                    found[key] = value
                elif (snapshot := found.get(key)) is not None:
                    found[key] = fmt.merge_update(snapshot, value)
        for key, value in found.items():
            if value is not None:
                self.states[key] = value
        log.info("loaded %s-%d: %d share partitions", SHARE_STATE_TOPIC, index, len(found))

    # ------------------------------------------------------------------ the four operations
    def read(self, key: StateKey, leader_epoch: int = -1) -> tuple[ErrorCode, StoredState | None]:
        code = self.check(key)
        if code:
            return code, None
        state = self.states.get(key)
        if state is not None and leader_epoch >= 0 and leader_epoch < state.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        return ErrorCode.NONE, state

    async def write(self, key: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> ErrorCode:
        async with self._locks.setdefault(key, anyio.Lock()):
            code = self.check(key)
            if code:
                return code
            current = self.states.get(key)
            if current is not None:
                if state_epoch < current.state_epoch:
                    return ErrorCode.FENCED_STATE_EPOCH
                if leader_epoch < current.leader_epoch:
                    return ErrorCode.FENCED_LEADER_EPOCH
            snapshot_epoch = current.snapshot_epoch + 1 if current is not None else 0
            new = StoredState(state_epoch, leader_epoch, start_offset, sorted(batches), snapshot_epoch)
            return await self._store(key, new)

    async def initialize(self, key: StateKey, state_epoch: int, start_offset: int) -> ErrorCode:
        async with self._locks.setdefault(key, anyio.Lock()):
            code = self.check(key)
            if code:
                return code
            current = self.states.get(key)
            if current is not None and state_epoch < current.state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
            # the leader epoch stays: only a newer leader may write after this
            leader_epoch = current.leader_epoch if current is not None else -1
            return await self._store(key, StoredState(state_epoch, leader_epoch, start_offset, []))

    async def delete(self, key: StateKey) -> ErrorCode:
        async with self._locks.setdefault(key, anyio.Lock()):
            code = self.check(key)
            if code:
                return code
            if key not in self.states:
                return ErrorCode.NONE
            return await self._store(key, None)

    async def _store(self, key: StateKey, state: StoredState | None) -> ErrorCode:
        index = self.runtime.partition_of(share_key(*key))
        record_key = fmt.encode_key(fmt.SNAPSHOT, *key)
        value = None if state is None else fmt.encode_value(fmt.SNAPSHOT, state)
        result = await self.runtime.write(index, records.encode_batch([(record_key, value)]), WRITE_TIMEOUT_S)
        if result.error:
            if result.not_led_here:
                return ErrorCode.NOT_COORDINATOR
            if result.appended and index in self.runtime.loaded:
                self.runtime.reload(index)  # it may still be COMMITTED: memory must follow the log
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if index not in self.runtime.loaded:
            return ErrorCode.NOT_COORDINATOR
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state
        return ErrorCode.NONE
