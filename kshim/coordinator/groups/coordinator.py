"""The group coordinator of one broker: the groups whose `__consumer_offsets` partition it leads.

- Placement (Kafka's rule): group G lives on the leader of partition
  abs(java_string_hashcode(G)) % N of `__consumer_offsets`, N being that topic's partition count
  (`BrokerConfig.offsets_topic_partitions`, 10 by default, when the first FindCoordinator creates
  it, compacted, with `offsets_topic_replication_factor` as `runtime.internal_replication_factor`
  grants it and `offsets_topic_segment_bytes` segments).
- Committed offsets are records of that partition (format in `offsets_format`), appended as the
  leader and answered once COMMITTED (acks=all). The in-memory map is the answer for OffsetFetch.
- When this broker becomes leader of an offsets partition (start-up, failover) the partition is
  marked loading; once its high watermark reaches its log end, the coordinator's task reads its
  log from the start (latest record per key wins, a tombstone deletes; transactional offset
  commits wait for their transaction's marker) and until then requests for its groups get
  COORDINATOR_LOAD_IN_PROGRESS. Losing the leadership drops its groups: waiting members get
  NOT_COORDINATOR and rejoin elsewhere.
- Classic group membership is persisted as Kafka's is (`group_format`): the leader's assignment
  is written before the SyncGroups are answered, an Empty group's generation when it empties, a
  tombstone when the group is deleted or forgotten. A new coordinator loads the group Stable with
  its members, so they go on heartbeating and committing under their generation. Consumer
  (KIP-848) groups likewise: a heartbeat that changed the group is answered once the group's
  record (members, epochs, assignments, target) is COMMITTED.
- Share groups (KIP-932, `share_group`) likewise: one record per group, written before the
  heartbeat that changed it is answered, loaded by a new coordinator. A share group id is never
  reused by the other kinds, even Empty (ConsumerGroupHeartbeat: GROUP_ID_NOT_FOUND, JoinGroup:
  INCONSISTENT_GROUP_PROTOCOL), nor a classic or consumer group id by a share group
  (GROUP_ID_NOT_FOUND), as Kafka; an Empty share group stays until DeleteGroups deletes it, which
  first awaits `share_group_deleters` (the share-partition state's deletion) and then writes the
  group's tombstone. `share_member_listeners` hear of every member that leaves or is fenced.
- A group id is either classic (`group`) or consumer (KIP-848, `consumer_group`). An Empty group
  (no members) of one kind becomes the other kind when a member of the other protocol arrives
  (its committed offsets stay); otherwise ConsumerGroupHeartbeat on a classic group answers
  GROUP_ID_NOT_FOUND and JoinGroup on a consumer group INCONSISTENT_GROUP_PROTOCOL (kshim has no
  mixed membership).
- Offsets of Empty groups expire offsets_retention_ms after their commit timestamp (tombstones),
  looked for every offsets_retention_check_interval_ms; an Empty group without offsets is forgotten.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Awaitable, Callable

from anyio.abc import TaskGroup

from kshim.clock import SYSTEM, Clock
from kshim.cluster.image import BrokerInfo
from kshim.configs.groups import EffectiveGroupConfig, group_config
from kshim.coordinator import OFFSETS_TOPIC
from kshim.coordinator.groups import group_format
from kshim.coordinator.groups.consumer_group import ConsumerGroup
from kshim.coordinator.groups.group import DEAD, EMPTY, Group, GroupConfig
from kshim.coordinator.groups.offsets_format import OffsetEntry, decode_key, decode_value, encode_key, encode_value
from kshim.coordinator.groups.share_group import ShareGroup
from kshim.coordinator.runtime import CoordinatorHost, CoordinatorRuntime, internal_topic_configs
from kshim.replica import PartitionAppend, TxnMarker
from kshim.replica.partition import Partition
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.groups")


TopicPartition = tuple[str, int]


class GroupCoordinator:
    def __init__(self, broker: CoordinatorHost, config: GroupConfig | None = None, clock: Clock = SYSTEM) -> None:
        self.broker = broker
        settings = broker.config.group_settings
        self.settings = settings
        c = broker.config
        self.config = config or GroupConfig(
            min_session_timeout_ms=c.group_min_session_timeout_ms, max_session_timeout_ms=c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms, max_size=c.group_max_size,
            offsets_retention_ms=c.offsets_retention_ms, offset_metadata_max_bytes=c.offset_metadata_max_bytes,
            offsets_commit_timeout_ms=c.offsets_commit_timeout_ms,
            offsets_retention_check_interval_ms=c.offsets_retention_check_interval_ms,
            offsets_compression_codec=c.offsets_topic_compression_codec,
            consumer_session_timeout_ms=settings.consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=settings.consumer_heartbeat_interval_ms)
        self.clock = clock.monotonic_ms  # group timers: sessions, rebalances
        self.wall_ms = clock.wall_ms     # commit and expiry times, stored with the offsets
        self.groups: dict[str, Group | ConsumerGroup | ShareGroup] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        self.in_flight: dict[str, dict[TopicPartition, int]] = {}  # commits appended, not yet committed
        self.runtime = CoordinatorRuntime(broker, OFFSETS_TOPIC, c.offsets_topic_partitions, self, self.clock,
                                          c.offsets_topic_replication_factor,
                                          internal_topic_configs(c.offsets_topic_segment_bytes))
        self.pending_txn: dict[int, dict[int, list]] = {}  # producer id -> offsets partition -> its offset records
        self._next_expiry = 0
        # group records to write, in order (the runtime's loop starts their writes)
        self._stores: list[tuple[str, bytes, bytes | None, Callable[[ErrorCode, int], None] | None]] = []
        # the share-partition side's hooks: awaited by DeleteGroups before a share group goes (its
        # share state deleted; an error keeps the group), and told (group id, member id) of every
        # member that left a share group or was fenced
        self.share_group_deleters: list[Callable[[str], Awaitable[ErrorCode]]] = []
        self.share_member_listeners: list[Callable[[str, str], None]] = []

    # ------------------------------------------------------------------ placement
    @property
    def loaded(self) -> set[int]:
        return self.runtime.loaded

    @property
    def loading(self) -> set[int]:
        return self.runtime.loading

    def partition_of(self, group_id: str) -> int:
        return self.runtime.partition_of(group_id)

    def check(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates the group and has loaded its offsets."""
        return self.runtime.status(group_id)

    async def find(self, key: str) -> BrokerInfo:
        return await self.runtime.find(key)

    # ------------------------------------------------------------------ leadership and loading
    def on_image(self) -> None:
        """After each metadata image: start loading newly led offsets partitions, drop lost ones."""
        self.runtime.on_image()

    def unload(self, index: int) -> None:
        for group_id in [g for g in set(self.groups) | set(self.offsets) if self.partition_of(g) == index]:
            group = self.groups.pop(group_id, None)
            if group is not None:
                group.shut_down(ErrorCode.NOT_COORDINATOR)
            self.offsets.pop(group_id, None)
        for by_partition in self.pending_txn.values():
            by_partition.pop(index, None)
        log.info("no longer coordinator for %s-%d", OFFSETS_TOPIC, index)

    def load_pending(self) -> None:
        self.runtime.load_pending()

    def load(self, index: int, replica: Partition) -> None:
        count = 0
        loaded: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        stored_groups: dict[str, bytes | None] = {}  # group id -> its latest record (None: a tombstone)
        stored_consumer_groups: dict[str, bytes | None] = {}
        stored_share_groups: dict[str, bytes | None] = {}
        open_txns: dict[int, list] = {}  # producer id -> its transactional records, until its marker
        for header, batch in self.runtime.stored_batches(replica):
            if header.is_control:
                marker = records.read_marker(batch)
                for rec in open_txns.pop(header.producer_id, ()):
                    if marker is not None and marker.committed:
                        self._apply_record(loaded, rec.key, rec.value, rec.offset)
                continue
            for rec in self.runtime.batch_records(index, header, batch):
                count += 1
                key = bytes(rec.key) if rec.key else b""
                group_id = group_format.decode_key(key)
                consumer_group_id = group_format.decode_consumer_key(key)
                share_group_id = group_format.decode_share_key(key)
                if group_id is not None:
                    stored_groups[group_id] = None if rec.value is None else bytes(rec.value)
                elif consumer_group_id is not None:
                    stored_consumer_groups[consumer_group_id] = None if rec.value is None else bytes(rec.value)
                elif share_group_id is not None:
                    stored_share_groups[share_group_id] = None if rec.value is None else bytes(rec.value)
                elif header.is_transactional:
                    open_txns.setdefault(header.producer_id, []).append(rec)
                else:
                    self._apply_record(loaded, rec.key, rec.value, rec.offset)
        for producer_id, recs in open_txns.items():
            for rec in recs:
                parsed = decode_key(bytes(rec.key)) if rec.key else None
                entry = decode_value(bytes(rec.value)) if parsed and rec.value else None
                if parsed is not None and entry is not None:
                    entry.log_offset = rec.offset
                    self.pending_txn.setdefault(producer_id, {}).setdefault(index, []).append(
                        (parsed[0], (parsed[1], parsed[2]), entry))
        now = self.clock()
        members = 0
        for group_id, value in stored_groups.items():
            stored = group_format.decode_value(value) if value is not None else None
            if stored is not None:
                group = Group.restore(group_id, stored, now, self.config, self.runtime.wake.fire)
                group.on_store = self._store_hook(group_id)
                self.groups[group_id] = group
                members += len(group.members)
        topics = self.topics_snapshot()
        for group_id, value in stored_consumer_groups.items():
            consumer = group_format.decode_consumer_value(value) if value is not None else None
            if consumer is not None:
                restored = ConsumerGroup.restore(group_id, consumer, now, self.config, self.runtime.wake.fire, topics)
                restored.stored = value
                self.groups[group_id] = restored
                members += len(restored.members)
        for group_id, value in stored_share_groups.items():
            share = group_format.decode_share_value(value) if value is not None else None
            if share is not None:
                restored_share = ShareGroup.restore(group_id, share, now, self.config, self.runtime.wake.fire, topics,
                                                    self.group_config(group_id).share_session_timeout_ms)
                restored_share.stored = value
                self.groups[group_id] = restored_share
                members += len(restored_share.members)
        for group_id, entries in loaded.items():
            if entries:
                self.offsets[group_id] = entries
                if group_id not in self.groups:
                    self.groups[group_id] = self._new_group(group_id)
        log.info("loaded %s-%d: %d records, %d groups with offsets, %d with members (%d members)", OFFSETS_TOPIC,
                 index, count, len(loaded), sum(1 for g in [*stored_groups, *stored_consumer_groups, *stored_share_groups]
                                               if g in self.groups and self.groups[g].members),
                 members)

    @staticmethod
    def _apply_record(into: dict, key: bytes | None, value: bytes | None, log_offset: int) -> None:
        parsed = decode_key(bytes(key)) if key else None
        if parsed is None:
            return
        group_id, topic, partition = parsed
        entries = into.setdefault(group_id, {})
        current = entries.get((topic, partition))
        if current is not None and current.log_offset > log_offset:
            return  # a transaction's commit applied at its marker: a later plain commit wins
        if value is None:
            entries.pop((topic, partition), None)
            return
        entry = decode_value(bytes(value))
        if entry is not None:
            entry.log_offset = log_offset
            entries[(topic, partition)] = entry

    # ------------------------------------------------------------------ groups
    def _new_group(self, group_id: str) -> Group:
        return Group(group_id, self.config, state_since=self.clock(), on_change=self.runtime.wake.fire,
                     on_store=self._store_hook(group_id))

    def _store_hook(self, group_id: str) -> Callable[[group_format.StoredGroup, Callable[[ErrorCode, int], None] | None], None]:
        def store(stored: group_format.StoredGroup, done: Callable[[ErrorCode, int], None] | None) -> None:
            self._queue_store(group_id, group_format.encode_key(group_id), group_format.encode_value(stored), done)
        return store

    def _queue_store(self, group_id: str, key: bytes, value: bytes | None,
                     done: Callable[[ErrorCode, int], None] | None) -> None:
        self._stores.append((group_id, key, value, done))
        self.runtime.wake.fire()

    async def _write_group_record(self, group_id: str, key: bytes, value: bytes | None) -> ErrorCode:
        """Append one group record (None: its tombstone) and wait until it is COMMITTED."""
        index = self.partition_of(group_id)
        if index not in self.loaded:
            return ErrorCode.NOT_COORDINATOR
        result = await self.runtime.write(index, records.encode_batch(
            [(key, value)], compression=self.config.offsets_compression_codec),
            self.config.offsets_commit_timeout_ms / 1000)
        code = ErrorCode.NONE if not result.error else self._write_error(group_id, result)
        if not code and index not in self.loaded:
            code = ErrorCode.NOT_COORDINATOR
        if code:
            log.info("group %s: its record was not stored: %s", group_id, code.name)
        return code

    async def _store(self, group_id: str, key: bytes, value: bytes | None,
                     done: Callable[[ErrorCode, int], None] | None) -> None:
        code = await self._write_group_record(group_id, key, value)
        if done is not None:
            done(code, self.clock())

    async def store_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        """Persist a consumer group if a heartbeat changed it (Kafka answers a heartbeat once its
        records are COMMITTED); NONE at once when nothing changed."""
        value = group_format.encode_consumer_value(group.snapshot())
        if value == group.stored:
            return ErrorCode.NONE
        code = await self._write_group_record(group.group_id, group_format.encode_consumer_key(group.group_id), value)
        if not code:
            group.stored = value
        return code

    def _store_consumer_group(self, group: ConsumerGroup) -> None:
        """A consumer group a timer changed (members fenced): its record, written in the background."""
        value = group_format.encode_consumer_value(group.snapshot())
        if value != group.stored:
            group.stored = value
            self._queue_store(group.group_id, group_format.encode_consumer_key(group.group_id), value, None)

    async def store_share_group(self, group: ShareGroup) -> ErrorCode:
        """Persist a share group if a heartbeat changed it; NONE at once when nothing changed."""
        self._tell_departures(group)
        value = group_format.encode_share_value(group.snapshot())
        if value == group.stored:
            return ErrorCode.NONE
        code = await self._write_group_record(group.group_id, group_format.encode_share_key(group.group_id), value)
        if not code:
            group.stored = value
        return code

    def _store_share_group(self, group: ShareGroup) -> None:
        """A share group a timer changed (members fenced): its record, written in the background."""
        self._tell_departures(group)
        value = group_format.encode_share_value(group.snapshot())
        if value != group.stored:
            group.stored = value
            self._queue_store(group.group_id, group_format.encode_share_key(group.group_id), value, None)

    def _tell_departures(self, group: ShareGroup) -> None:
        departed, group.departed = group.departed, []
        for member_id, _ in departed:
            for listener in self.share_member_listeners:
                try:
                    listener(group.group_id, member_id)
                except Exception:  # a listener's bug must not fail the heartbeat
                    log.exception("share member listener failed for %s/%s", group.group_id, member_id)

    def share_group(self, group_id: str, create: bool = False) -> tuple[ErrorCode, ShareGroup | None]:
        """The share group for ShareGroupHeartbeat (`create`: a join) and ShareGroupDescribe; a group
        of another kind, or none without `create`: GROUP_ID_NOT_FOUND (Kafka's
        getOrMaybeCreatePersistedShareGroup)."""
        group = self.groups.get(group_id)
        if isinstance(group, ShareGroup):
            return ErrorCode.NONE, group
        if group is None and create:
            share = self.groups[group_id] = ShareGroup(group_id, self.config, state_since=self.clock(),
                                                       on_change=self.runtime.wake.fire)
            return ErrorCode.NONE, share
        return ErrorCode.GROUP_ID_NOT_FOUND, None

    def get_group(self, group_id: str, create: bool = False) -> Group | ConsumerGroup | ShareGroup | None:
        """The group of the classic APIs; `create` (JoinGroup) turns an Empty consumer group into a
        classic one. A consumer group with members is returned as is: its classic entry points answer
        errors."""
        group = self.groups.get(group_id)
        if create and (group is None or isinstance(group, ConsumerGroup) and not group.members):
            group = self.groups[group_id] = self._new_group(group_id)
        return group

    def consumer_group(self, group_id: str, create: bool = False) -> tuple[ErrorCode, ConsumerGroup | None]:
        """The consumer group for ConsumerGroupHeartbeat (`create`) and ConsumerGroupDescribe."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return ErrorCode.NONE, group
        if create and (group is None or not isinstance(group, ShareGroup) and not group.members
                       and not group.pending and group.state in (EMPTY, DEAD)):
            if isinstance(group, Group) and group.persisted:  # the classic record goes with the classic group
                self._queue_store(group_id, group_format.encode_key(group_id), None, None)
            consumer = self.groups[group_id] = ConsumerGroup(group_id, self.config, state_since=self.clock(),
                                                             on_change=self.runtime.wake.fire)
            return ErrorCode.NONE, consumer
        return ErrorCode.GROUP_ID_NOT_FOUND, None

    def group_config(self, group_id: str) -> EffectiveGroupConfig:
        """The group's effective configs: its GROUP-resource overrides, else the broker's settings."""
        return group_config(self.broker.image, group_id, self.settings)

    def topics_snapshot(self) -> dict[str, tuple[Any, int]]:
        """Topic name -> (topic id, partition count), the assignors' view of the cluster."""
        return {name: (t.topic_id, len(t.partitions)) for name, t in self.broker.topics.items()}

    def topic_name(self, topic_id) -> str:
        topic = self.broker.topics_by_id.get(topic_id)
        return topic.name if topic is not None else ""

    def led_groups(self) -> list[Group | ConsumerGroup | ShareGroup]:
        return [g for g in self.groups.values() if g.state != DEAD]

    # ------------------------------------------------------------------ offsets
    def validate_commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                        transactional: bool = False) -> ErrorCode:
        """`transactional` (TxnOffsetCommit, Kafka's rules): a producer that knows only the group id
        (generation -1, no member) may commit whatever the group's state, and a rebalance in
        progress does not refuse it (the transaction's own fencing protects it)."""
        code = self.check(group_id)
        if code:
            return code
        if transactional and generation < 0 and not member_id and instance_id is None:
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        if isinstance(group, (ConsumerGroup, ShareGroup)):
            return group.validate_commit(member_id, generation)
        if group is None or group.state == EMPTY and not group.members:
            if generation < 0:
                return ErrorCode.NONE  # a simple consumer (or admin) committing without membership
            return ErrorCode.UNKNOWN_MEMBER_ID if group is None or member_id else ErrorCode.ILLEGAL_GENERATION
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        fenced = group._check_fenced(member_id, instance_id)
        if fenced:
            return fenced
        if group.state == "CompletingRebalance" and not transactional:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.session_deadline = self.clock() + member.session_timeout_ms  # a commit is a sign of life
        return ErrorCode.NONE

    async def write(self, group_id: str, updates: list[tuple[TopicPartition, OffsetEntry | None]],
                    producer: tuple[int, int] | None = None) -> ErrorCode:
        """Append offset records (None = tombstone) for one group and wait until COMMITTED; then
        apply them to the in-memory map. With `producer` (id, epoch) the records belong to that
        producer's transaction (TxnOffsetCommit): they wait, invisible, for its marker."""
        if producer is not None:
            if not updates:
                return ErrorCode.NONE
            index = self.partition_of(group_id)
            if index not in self.loaded:
                return ErrorCode.NOT_COORDINATOR
            pid, epoch = producer
            return await self._write_txn(self._batch(group_id, updates, pid, epoch), index, group_id, updates, pid)
        written = self.write_started(group_id, updates)
        return written if isinstance(written, ErrorCode) else await written

    def _batch(self, group_id: str, updates: list[tuple[TopicPartition, OffsetEntry | None]],
               pid: int = -1, epoch: int = -1) -> bytes:
        compression = self.config.offsets_compression_codec
        if len(updates) == 1 and pid < 0 and compression == records.NONE:  # most commits: one partition
            ((t, p), e), = updates
            return records.encode_one(encode_key(group_id, t, p), None if e is None else encode_value(e))
        return records.encode_batch([(encode_key(group_id, t, p), None if e is None else encode_value(e))
                                     for (t, p), e in updates], compression=compression,
                                    producer_id=pid, producer_epoch=epoch, transactional=pid >= 0)

    def write_started(self, group_id: str, updates: list[tuple[TopicPartition, OffsetEntry | None]]
                      ) -> ErrorCode | Awaitable[ErrorCode]:
        """`write` without a producer: the outcome at once when the records are COMMITTED as they
        are appended (no followers to wait for) or refused, else an awaitable of it. OffsetCommit
        then answers in the same turn of the loop, without a task."""
        if not updates:
            return ErrorCode.NONE
        index = self.partition_of(group_id)
        if index not in self.loaded:
            return ErrorCode.NOT_COORDINATOR
        written = self.runtime.write_started(index, self._batch(group_id, updates),
                                             self.config.offsets_commit_timeout_ms / 1000)
        if isinstance(written, PartitionAppend):
            return self._written(group_id, index, updates, written)
        return self._wait_written(group_id, index, updates, written)

    async def _wait_written(self, group_id: str, index: int, updates: list[tuple[TopicPartition, OffsetEntry | None]],
                            written: Awaitable[PartitionAppend]) -> ErrorCode:
        # in flight only while the append waits: one that fails at once is never seen
        flight = self.in_flight.setdefault(group_id, {})
        for tp, _ in updates:
            flight[tp] = flight.get(tp, 0) + 1
        try:
            result = await written
        finally:
            for tp, _ in updates:
                flight[tp] -= 1
                if not flight[tp]:
                    del flight[tp]
            if not flight:
                self.in_flight.pop(group_id, None)
        return self._written(group_id, index, updates, result)

    def _written(self, group_id: str, index: int, updates: list[tuple[TopicPartition, OffsetEntry | None]],
                 result: PartitionAppend) -> ErrorCode:
        """The outcome of an offset write, applied to the in-memory map when it succeeded."""
        if result.error:
            return self._write_error(group_id, result)
        if index not in self.loaded:
            return ErrorCode.NOT_COORDINATOR
        entries = self.offsets.setdefault(group_id, {})
        for i, (tp, entry) in enumerate(updates):
            log_offset = result.base_offset + i
            current = entries.get(tp)
            if current is not None and current.log_offset > log_offset:
                continue  # a later commit of the same partition already landed
            if entry is None:
                entries.pop(tp, None)
            else:
                entry.log_offset = log_offset
                entries[tp] = entry
        if not entries:
            self.offsets.pop(group_id, None)
        if group_id not in self.groups:
            self.groups[group_id] = self._new_group(group_id)
        return ErrorCode.NONE

    @staticmethod
    def _write_error(group_id: str, result: PartitionAppend) -> ErrorCode:
        """An offset write's failure as the committing client is answered."""
        if result.not_led_here:
            return ErrorCode.NOT_COORDINATOR
        if result.appended:  # not COMMITTED in time
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if result.error == ErrorCode.MESSAGE_TOO_LARGE:
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        if result.error == ErrorCode.INVALID_PRODUCER_EPOCH:
            return ErrorCode.PRODUCER_FENCED
        log.warning("offset commit for %s failed: %s %s", group_id, result.error.name, result.message or "")
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def _write_txn(self, batch: bytes, index: int, group_id: str, updates, producer_id: int) -> ErrorCode:
        mine = []

        def pending_from_append(result: PartitionAppend) -> None:
            # pending from the append on (as Kafka does): require_stable answers
            # UNSTABLE_OFFSET_COMMIT at once, and a marker appended after this batch settles it in
            # log order
            for i, (tp, entry) in enumerate(updates):
                entry.log_offset = result.base_offset + i
                mine.append((group_id, tp, entry))
            self.pending_txn.setdefault(producer_id, {}).setdefault(index, []).extend(mine)
            if group_id not in self.groups:
                self.groups[group_id] = self._new_group(group_id)

        result = await self.runtime.write(
            index, batch, self.config.offsets_commit_timeout_ms / 1000, on_appended=pending_from_append)
        if not result.appended:
            return self._write_error(group_id, result)
        if not result.error and index in self.loaded:
            return ErrorCode.NONE
        # failed: the producer aborts its transaction; these records must not count at a commit
        by_partition = self.pending_txn.get(producer_id, {})
        left = [p for p in by_partition.get(index, []) if not any(p is m for m in mine)]
        if left:
            by_partition[index] = left
        else:
            by_partition.pop(index, None)
            if not by_partition:
                self.pending_txn.pop(producer_id, None)
        return ErrorCode.NOT_COORDINATOR if index not in self.loaded else self._write_error(group_id, result)

    def on_marker_committed(self, topic: str, index: int, marker: TxnMarker, offset: int) -> None:
        """A replica-manager marker listener: markers on offsets partitions settle transactional commits."""
        if topic == OFFSETS_TOPIC:
            self.on_txn_marker(marker.producer_id, index, marker.committed, offset)

    def on_txn_marker(self, producer_id: int, index: int, committed: bool, marker_offset: int) -> None:
        """A transaction marker at `marker_offset` of offsets partition `index` is COMMITTED: the
        producer's transactional offset commits before it become visible (COMMIT) or are dropped
        (ABORT); any after it belong to its next transaction."""
        by_partition = self.pending_txn.get(producer_id)
        pending = by_partition.get(index) if by_partition else None
        if not pending or by_partition is None:
            return
        settled = [p for p in pending if p[2].log_offset < marker_offset]
        later = [p for p in pending if p[2].log_offset > marker_offset]
        if later:
            by_partition[index] = later
        else:
            del by_partition[index]
            if not by_partition:
                del self.pending_txn[producer_id]
        if not committed or index not in self.loaded:
            return
        for group_id, tp, entry in settled:
            entries = self.offsets.setdefault(group_id, {})
            current = entries.get(tp)
            if current is None or current.log_offset < entry.log_offset:
                entries[tp] = entry

    def _pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        index = self.partition_of(group_id)
        return {tp for by_partition in self.pending_txn.values() for g, tp, _ in by_partition.get(index, ())
                if g == group_id}

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool,
              member_id: str | None = None, member_epoch: int = -1
              ) -> tuple[ErrorCode, list[tuple[TopicPartition, OffsetEntry | None, ErrorCode]]]:
        code = self.check(group_id)
        if code:
            return code, []
        group = self.groups.get(group_id)
        if isinstance(group, (ConsumerGroup, ShareGroup)):  # OffsetFetch v9: the member epoch of a consumer group
            code = group.validate_fetch(member_id, member_epoch)
            if code:
                return code, []
        entries = self.offsets.get(group_id, {})
        flight = self.in_flight.get(group_id, {})
        if require_stable and self.pending_txn:
            flight = {**flight, **dict.fromkeys(self._pending_txn_partitions(group_id), 1)}
        wanted = sorted(entries) if partitions is None else partitions
        out = []
        for tp in wanted:
            error = ErrorCode.UNSTABLE_OFFSET_COMMIT if require_stable and tp in flight else ErrorCode.NONE
            out.append((tp, entries.get(tp), error))
        return ErrorCode.NONE, out

    async def delete_group(self, group_id: str) -> ErrorCode:
        code = self.check(group_id)
        if code:
            return code
        group = self.groups.get(group_id)
        if group is None and group_id not in self.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and (group.members or group.state != EMPTY):
            return ErrorCode.NON_EMPTY_GROUP
        if isinstance(group, ShareGroup):
            for deleter in self.share_group_deleters:  # its share-partition state first, as Kafka
                code = await deleter(group_id)
                if code:
                    return code
        code = await self.write(group_id, [(tp, None) for tp in sorted(self.offsets.get(group_id, {}))])
        if code:
            return code
        group = self.groups.get(group_id)
        if isinstance(group, Group) and group.persisted:
            code = await self._write_group_record(group_id, group_format.encode_key(group_id), None)
            if code:
                return code
            group.persisted = False
        elif isinstance(group, ConsumerGroup) and group.stored is not None:
            code = await self._write_group_record(group_id, group_format.encode_consumer_key(group_id), None)
            if code:
                return code
            group.stored = None
        elif isinstance(group, ShareGroup) and group.stored is not None:
            code = await self._write_group_record(group_id, group_format.encode_share_key(group_id), None)
            if code:
                return code
            group.stored = None
        group = self.groups.get(group_id)
        if group is not None and not group.members and group.state == EMPTY:
            group.shut_down(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            del self.groups[group_id]
        return ErrorCode.NONE

    async def expire_offsets(self) -> None:
        now = self.wall_ms()
        for group_id in list(self.offsets):
            group = self.groups.get(group_id)
            if group is not None and (group.members or group.state != EMPTY):
                continue
            old = [tp for tp, e in self.offsets[group_id].items()
                   if e.commit_timestamp + self.config.offsets_retention_ms <= now]
            if old:
                log.info("expiring %d offsets of group %s", len(old), group_id)
                await self.write(group_id, [(tp, None) for tp in old])

    def _forget_idle_groups(self) -> None:
        for group_id, group in list(self.groups.items()):
            if isinstance(group, ShareGroup):
                continue  # kept until DeleteGroups (its share-partition state and configs outlive its members)
            if group.state == EMPTY and not group.members and not group.pending and not self.offsets.get(group_id):
                del self.groups[group_id]
                if self.partition_of(group_id) not in self.loaded:
                    continue
                if isinstance(group, Group) and group.persisted:
                    self._queue_store(group_id, group_format.encode_key(group_id), None, None)
                elif isinstance(group, ConsumerGroup) and group.stored is not None:
                    self._queue_store(group_id, group_format.encode_consumer_key(group_id), None, None)

    # ------------------------------------------------------------------ the timer task
    def tick(self) -> float:
        """Expire sessions and rebalance deadlines; returns the next deadline (monotonic ms)."""
        now = self.clock()
        for group in list(self.groups.values()):
            members = len(group.members)
            group.tick(now)
            if isinstance(group, ConsumerGroup) and len(group.members) != members:  # a timer only fences
                self._store_consumer_group(group)
            elif isinstance(group, ShareGroup) and len(group.members) != members:
                self._store_share_group(group)
        self._forget_idle_groups()
        deadlines = [d for g in self.groups.values() if (d := g.next_deadline()) is not None]
        return min(deadlines, default=math.inf)

    async def timers(self, tg: TaskGroup) -> float:
        """The runtime's timer hook: group timers, and offsets expiry every
        offsets_retention_check_interval_ms (Kafka's offsets.retention.check.interval.ms)."""
        deadline = self.tick()
        stores, self._stores = self._stores, []
        for store in stores:  # started in order, so a group's records are appended in order
            tg.start_soon(self._store, *store)
        now = self.clock()
        if now >= self._next_expiry:
            self._next_expiry = now + self.config.offsets_retention_check_interval_ms
            tg.start_soon(self.expire_offsets)
        return min(deadline, self._next_expiry)

    async def run(self) -> None:
        """Loads offsets partitions, fires group timers and expires offsets (the runtime's loop)."""
        await self.runtime.run()
