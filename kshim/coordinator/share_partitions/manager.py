"""The share partitions this broker leads (Kafka's SharePartitionManager): ShareFetch and
ShareAcknowledge work here, on the partition leader; the durable state is the share
coordinator's, reached through the persister.

- A share partition (group, topic, partition) is loaded on its first use here: the stored state
  if any, else a start offset from share.auto.offset.reset (latest: the high watermark;
  earliest: the log start; by_duration:<ISO-8601 duration>: the first record at or after now
  minus that duration, else the high watermark), written to the coordinator before anything is
  acquired (a new leader then starts where this one did). It is dropped when this broker stops
  leading the partition, and reloaded when a session opens on it while no record is acquired (so
  offsets altered or deleted while the group was empty are seen).
- A fetch reads from the first AVAILABLE record (else the window's end) up to the high watermark
  (read_uncommitted) or the last stable offset (read_committed: the records of aborted
  transactions and control batches are archived, never acquired), and acquires what it read (see
  state.py). The answer carries whole batches up to the last acquired record; the client keeps
  only the acquired offsets. With nothing acquired the request waits, as a fetch does, for new
  records or released ones, up to max_wait_ms.
- An acknowledgement changes the state in memory, writes the whole window to the coordinator and
  is answered only once that write is COMMITTED; a failed write puts the records back as they
  were and answers its error. Expired locks are released by the background task (and written).
- Nothing here is answered from a partition this broker does not lead: NOT_LEADER_OR_FOLLOWER.
- A member's records go back when its share session ends (sessions.py), never because the group
  coordinator saw it leave or fenced it: as in Kafka, a client's closing ShareAcknowledge or
  ShareFetch may arrive after its leave heartbeat, and its acknowledgements still apply.
"""
from __future__ import annotations

import logging
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import anyio

from kshim.clock import SYSTEM, Clock
from kshim.coordinator.runtime import CoordinatorHost
from kshim.coordinator.share_partitions.coordinator import SHARE_STATE_TOPIC, ShareCoordinator, StateKey
from kshim.coordinator.share_partitions.persister import SharePersister
from kshim.coordinator.share_partitions.sessions import ShareSessionCache
from kshim.coordinator.share_partitions.state import (AckBatch, Acquired, LogBatch, RecordState,
                                                    SharePartitionState, ShareLimits)
from kshim.broadcast import Signal
from kshim.replica.partition import OffsetOutOfRange, Partition
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.share")

# Kafka's defaults for the group configs a share partition reads
DEFAULT_GROUP_CONFIGS: dict[str, str] = {
    "share.record.lock.duration.ms": "30000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "group.share.delivery.count.limit": "5",
    "group.share.partition.max.record.locks": "2000",
}
READ_CHUNK_BYTES = 1 << 20  # a fetch reads at most this much per partition (it acquires at most max_records)
GroupConfigs = Callable[[str], Mapping[str, str]]
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (PnDTnHnMn.nS, as Java's Duration.parse) in ms; None if malformed."""
    m = _DURATION.match(text)
    if m is None or text in ("P", "PT") or text.endswith("T"):
        return None
    days, hours, minutes, seconds = m.groups()
    return int(((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
               + float(seconds or 0) * 1000)


@dataclass(slots=True)
class SharePartition:
    key: StateKey
    topic: str
    state: SharePartitionState
    leader_epoch: int
    write_lock: anyio.Lock = field(default_factory=anyio.Lock)


@dataclass(slots=True)
class ShareFetchResult:
    error: ErrorCode = ErrorCode.NONE
    records: bytes | memoryview = b""
    acquired: list[Acquired] = field(default_factory=list)


class SharePartitionManager:
    def __init__(self, broker: CoordinatorHost, coordinator: ShareCoordinator, clock: Clock = SYSTEM,
                 group_configs: GroupConfigs | None = None, persister: SharePersister | None = None) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.persister = persister or SharePersister(broker, coordinator)
        self.clock = clock
        self.group_configs: GroupConfigs = group_configs or (lambda group: DEFAULT_GROUP_CONFIGS)
        self.partitions: dict[StateKey, SharePartition] = {}
        self._loading: dict[StateKey, anyio.Lock] = {}
        self.sessions = ShareSessionCache()
        self.released = Signal()  # records became AVAILABLE: waiting fetches look again
        self._wake = Signal()  # a new lock deadline: the expiry task looks again

    # ------------------------------------------------------------------ configs
    def config(self, group: str, name: str) -> str:
        value = self.group_configs(group).get(name)
        return value if value is not None else DEFAULT_GROUP_CONFIGS[name]

    def limits(self, group: str) -> ShareLimits:
        return ShareLimits(int(self.config(group, "share.record.lock.duration.ms")),
                           int(self.config(group, "group.share.delivery.count.limit")),
                           int(self.config(group, "group.share.partition.max.record.locks")))

    def lock_duration_ms(self, group: str) -> int:
        return int(self.config(group, "share.record.lock.duration.ms"))

    def read_committed(self, group: str) -> bool:
        return self.config(group, "share.isolation.level") == "read_committed"

    # ------------------------------------------------------------------ loading
    def leader(self, topic_id: uuid.UUID, index: int) -> Partition | ErrorCode:
        return self.broker.replica_manager.get_partition_or_error(topic_id, index)

    async def load(self, group: str, topic_id: uuid.UUID, index: int, refresh: bool = False
                   ) -> SharePartition | ErrorCode:
        """The share partition, loaded from the coordinator if needed (`refresh`: again, if no record is acquired)."""
        key = (group, topic_id, index)
        async with self._loading.setdefault(key, anyio.Lock()):
            replica = self.leader(topic_id, index)
            if isinstance(replica, ErrorCode):
                self.partitions.pop(key, None)
                return replica
            current = self.partitions.get(key)
            if current is not None and current.leader_epoch == replica.leader_epoch and not (
                    refresh and not current.state.counts()["acquired"]):
                return current
            code, stored = await self.persister.read(key, replica.leader_epoch)
            if code:
                return code
            if stored is None or stored.start_offset < 0:
                start = self._reset_offset(group, replica)
                state_epoch = stored.state_epoch if stored is not None else 0
                code = await self.persister.write(key, state_epoch, replica.leader_epoch, start, [])
                if code:
                    return code
                state = SharePartitionState(start, (), state_epoch)
            else:
                state = SharePartitionState(stored.start_offset, stored.batches, stored.state_epoch)
            if replica.leader_epoch != getattr(self.leader(topic_id, index), "leader_epoch", None):
                return ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership moved while we read
            sp = SharePartition(key, replica.topic, state, replica.leader_epoch)
            self.partitions[key] = sp
            return sp

    def _reset_offset(self, group: str, replica: Partition) -> int:
        reset = self.config(group, "share.auto.offset.reset")
        if reset == "earliest":
            return replica.log_start_offset
        if reset.startswith("by_duration:"):
            duration = parse_duration_ms(reset[len("by_duration:"):])
            if duration is not None:
                found = replica.log.offset_for_timestamp(self.clock.wall_ms() - duration)
                if found is not None:
                    return min(max(found[0], replica.log_start_offset), replica.high_watermark)
        return replica.high_watermark

    def on_image(self) -> None:
        """Forget share partitions this broker no longer leads (a new leader loads them)."""
        for key, sp in list(self.partitions.items()):
            replica = self.leader(key[1], key[2])
            if isinstance(replica, ErrorCode) or replica.leader_epoch != sp.leader_epoch:
                del self.partitions[key]
        self.released.fire()

    # ------------------------------------------------------------------ fetching
    def acquire(self, group: str, member: str, asked: list[tuple[uuid.UUID, int]], max_bytes: int,
                max_records: int, strict: bool) -> list[ShareFetchResult]:
        """One pass: acquire what the asked (loaded) partitions have for `member`."""
        limits = self.limits(group)
        committed = self.read_committed(group)
        now = self.clock.monotonic_ms()
        budget = max_bytes if max_bytes > 0 else (1 << 31) - 1
        left = max(max_records, 1)
        out: list[ShareFetchResult] = []
        for topic_id, index in asked:
            result = ShareFetchResult()
            out.append(result)
            replica = self.leader(topic_id, index)
            if isinstance(replica, ErrorCode):
                result.error = replica
                continue
            sp = self.partitions.get((group, topic_id, index))
            if sp is None or left <= 0 or budget <= 0:
                continue
            if sp.state.start < replica.log_start_offset:
                sp.state.move_start(replica.log_start_offset)  # retention deleted records below it
            offset = sp.state.next_fetch_offset()
            bound = replica.last_stable_offset if committed else replica.high_watermark
            if offset >= bound:
                continue
            try:
                data = replica.log.read(offset, min(budget, READ_CHUNK_BYTES), bound, True)
            except OffsetOutOfRange:
                sp.state.move_start(replica.log_start_offset)
                continue
            batches, ends = self._log_batches(replica, data, offset, committed)
            taken = sp.state.acquire(member, offset, batches, left, limits, now, strict)
            if not taken:
                continue
            last = taken[-1].last_offset
            cut = next((end for (b, end) in zip(batches, ends) if b.last_offset >= last), len(data))
            result.records = memoryview(data)[:cut]
            result.acquired = taken
            left -= sum(a.last_offset - a.first_offset + 1 for a in taken)
            budget -= cut
            self._wake.fire()
        return out

    @staticmethod
    def _log_batches(replica: Partition, data: bytes, offset: int, committed: bool
                     ) -> tuple[list[LogBatch], list[int]]:
        headers = [(pos, h) for pos, h in records.iter_batches(data, strict=False)]
        aborted = replica.log.aborted_between(offset, headers[-1][1].next_offset) if committed and headers else []
        batches, ends = [], []
        for pos, h in headers:
            deliverable = not h.is_control and not (h.is_transactional and any(
                a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted))
            batches.append(LogBatch(h.base_offset, h.last_offset, deliverable))
            ends.append(pos + h.size)
        return batches, ends

    async def fetch(self, group: str, member: str, asked: list[tuple[uuid.UUID, int]], max_wait_ms: int,
                    min_bytes: int, max_bytes: int, max_records: int, strict: bool = False) -> list[ShareFetchResult]:
        """Acquire records for `member`, waiting up to max_wait_ms for at least min_bytes."""
        loaded: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        for topic_id, index in asked:
            sp = await self.load(group, topic_id, index)
            if isinstance(sp, ErrorCode):
                loaded[(topic_id, index)] = sp
        readable = [tp for tp in asked if tp not in loaded]

        def merged(results: list[ShareFetchResult]) -> list[ShareFetchResult]:
            it = iter(results)
            return [ShareFetchResult(loaded[tp]) if tp in loaded else next(it) for tp in asked]

        results = self.acquire(group, member, readable, max_bytes, max_records, strict)
        if self._enough(results, min_bytes) or max_wait_ms <= 0 or loaded:
            return merged(results)
        replicas = [r for r in (self.leader(*tp) for tp in readable) if isinstance(r, Partition)]
        with anyio.move_on_after(max_wait_ms / 1000):
            while True:
                event = anyio.Event()
                for r in replicas:
                    r.add_waiter(event)
                try:
                    async with anyio.create_task_group() as tg:
                        async def on_release() -> None:
                            await self.released.wait()
                            event.set()
                        tg.start_soon(on_release)
                        await event.wait()
                        tg.cancel_scope.cancel()
                finally:
                    for r in replicas:
                        r.remove_waiter(event)
                for tp in readable:  # a leader change may have dropped one: load it again
                    if (group, *tp) not in self.partitions:
                        await self.load(group, *tp)
                more = self.acquire(group, member, readable, max_bytes, max_records, strict)
                results = [m if m.acquired or m.error else r for r, m in zip(results, more)]
                if self._enough(results, min_bytes) or any(r.error for r in results):
                    return merged(results)
        return merged(results)

    @staticmethod
    def _enough(results: list[ShareFetchResult], min_bytes: int) -> bool:
        got = sum(len(r.records) for r in results)
        return got > 0 and got >= min_bytes or any(r.error for r in results)

    # ------------------------------------------------------------------ acknowledging
    async def acknowledge(self, group: str, member: str, topic_id: uuid.UUID, index: int,
                          acks: list[AckBatch]) -> ErrorCode:
        """Apply and durably write `member`'s acknowledgements of one partition."""
        replica = self.leader(topic_id, index)
        if isinstance(replica, ErrorCode):
            return replica
        sp = self.partitions.get((group, topic_id, index))
        if sp is None:
            return ErrorCode.INVALID_RECORD_STATE  # nothing acquired here (since this broker became leader)
        async with sp.write_lock:
            code, undo = sp.state.acknowledge(member, acks, self.limits(group), self.clock.monotonic_ms())
            if code or undo is None:
                return code
            code = await self._persist(sp)
            if code:
                sp.state.restore(undo)
                return code
        if sp.state.has_available():
            self.released.fire()
        return ErrorCode.NONE

    async def _persist(self, sp: SharePartition) -> ErrorCode:
        st = sp.state
        code = await self.persister.write(sp.key, st.state_epoch, sp.leader_epoch, st.start, st.state_batches())
        if code in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
            self.partitions.pop(sp.key, None)  # stale: the next use loads the stored state
        return code

    async def release_member(self, group: str, member: str, partitions: Iterable[tuple[uuid.UUID, int]] | None = None
                             ) -> None:
        """Release what `member` holds (its share session closed or was replaced) and write it."""
        for key, sp in list(self.partitions.items()):
            if key[0] != group or partitions is not None and (key[1], key[2]) not in partitions:
                continue
            async with sp.write_lock:
                if sp.state.release_member(member, self.limits(group)):
                    await self._persist(sp)
                    self.released.fire()

    # ------------------------------------------------------------------ offsets admin (the group's coordinator asks)
    async def describe_offset(self, group: str, topic_id: uuid.UUID, index: int) -> tuple[ErrorCode, int, int, int]:
        """(error, start offset or -1 if the group has no state there, leader epoch, lag or -1).
        The lag (v1) is what is still to be delivered: the high watermark this broker knows
        (it hosts a replica) less the start offset and the records done above it."""
        if SHARE_STATE_TOPIC not in self.broker.topics:
            return ErrorCode.NONE, -1, -1, -1  # no share partition was ever written
        code, stored = await self.persister.read((group, topic_id, index), -1)
        if code:
            return code, -1, -1, -1
        if stored is None or stored.start_offset < 0:
            return ErrorCode.NONE, -1, -1, -1
        lag = -1
        topic = self.broker.topics_by_id.get(topic_id)
        replica = self.broker.partition(topic.name, index) if topic is not None else None
        if replica is not None:
            done = sum(b.last_offset - b.first_offset + 1 for b in stored.batches
                       if b.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
            lag = max(replica.high_watermark - stored.start_offset - done, 0)
        return ErrorCode.NONE, stored.start_offset, stored.leader_epoch, lag

    async def alter_offset(self, group: str, topic_id: uuid.UUID, index: int, start_offset: int) -> ErrorCode:
        """Start the share partition over at `start_offset` under a new state epoch (the group is
        empty: nothing is acquired); its leader sees it when a session next opens on it, or when
        its next write is fenced."""
        key = (group, topic_id, index)
        code, stored = await self.persister.read(key, -1)
        if code:
            return code
        state_epoch = stored.state_epoch + 1 if stored is not None else 1
        code = await self.persister.initialize(key, state_epoch, start_offset)
        if not code:
            self.partitions.pop(key, None)
        return code

    async def delete_state(self, group: str, topic_id: uuid.UUID, index: int) -> ErrorCode:
        key = (group, topic_id, index)
        code = await self.persister.delete(key)
        if not code:
            self.partitions.pop(key, None)
        return code

    async def delete_group_state(self, group: str) -> ErrorCode:
        """Delete the group's state on every partition (DeleteGroups, before the group's
        tombstone); the first error, if any, keeps the group."""
        for session in self.sessions.of_group(group):
            self.sessions.close(session.key)
        if SHARE_STATE_TOPIC not in self.broker.topics:
            return ErrorCode.NONE  # no share partition was ever written: nothing to delete
        for name, topic in list(self.broker.topics.items()):
            if name.startswith("__"):
                continue
            for info in topic.partitions:
                code = await self.delete_state(group, topic.topic_id, info.index)
                if code:
                    return code
        return ErrorCode.NONE

    def in_flight(self, group: str) -> dict[tuple[str, int], dict[str, int]]:
        """Per partition of `group` led here: the start offset, window and record counts by state."""
        out = {}
        for (g, _topic_id, index), sp in self.partitions.items():
            if g == group:
                out[(sp.topic, index)] = {"start_offset": sp.state.start, "end_offset": sp.state.end,
                                          **sp.state.counts()}
        return out

    def in_flight_list(self, group: str) -> list[dict]:
        """`in_flight` as rows (the admin socket's answer to `kshim ctl groups`)."""
        return [{"topic": topic, "partition": index, **counts}
                for (topic, index), counts in sorted(self.in_flight(group).items())]

    # ------------------------------------------------------------------ lock expiry
    async def expire_due(self) -> float:
        """Release the records whose lock expired (and write them); the next deadline, or inf."""
        deadline = math.inf
        for key, sp in list(self.partitions.items()):
            next_ms = sp.state.next_deadline()
            if next_ms is not None and next_ms <= self.clock.monotonic_ms():
                async with sp.write_lock:
                    if sp.state.expire_locks(self.clock.monotonic_ms(), self.limits(key[0])):
                        await self._persist(sp)
                        self.released.fire()
                next_ms = sp.state.next_deadline()
            if next_ms is not None:
                deadline = min(deadline, next_ms)
        return deadline

    async def run(self) -> None:
        """The expiry task: releases locked records at their deadlines."""
        while True:
            deadline = await self.expire_due()
            wait_s = 60.0 if deadline == math.inf else max(deadline - self.clock.monotonic_ms(), 1) / 1000
            with anyio.move_on_after(wait_s):
                await self._wake.wait()
