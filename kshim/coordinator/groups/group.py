"""One classic-protocol consumer group: members, generations and the rebalance state machine.

States (Kafka's names): Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and Dead
once deleted or unloaded. The group is assignor-agnostic: JoinGroup picks the protocol every
member supports (voting by each member's preference order) and a leader, the leader gets all
members' metadata for that protocol, and SyncGroup hands out the leader's assignment.

Time is a parameter (`now` in milliseconds, from the coordinator's clock), so the unit tests drive
it by hand; the coordinator calls `tick(now)` at `next_deadline()`:
- a member whose session times out (no heartbeat, join or sync) is removed and the group
  rebalances; a member waiting in JoinGroup is not subject to its session timeout;
- a rebalance completes when every member (and every member id handed out with
  MEMBER_ID_REQUIRED) has joined, or at the rebalance deadline (the largest rebalance timeout of
  the members), when the members that did not rejoin are removed (static ones too; simpler than
  Kafka, which keeps static members until their session expires);
- CompletingRebalance waits for the leader's SyncGroup until the rebalance timeout; then the
  members that did not send SyncGroup are removed and the group rebalances again.
Persistence (Kafka's GroupMetadataManager.storeGroup): with `on_store` set (by the coordinator),
the leader's assignment is written to `__consumer_offsets` before anyone gets it: the group stays
CompletingRebalance until the write is COMMITTED, then becomes Stable and answers the SyncGroups;
a failed write answers them with the error and starts a new rebalance. A group that becomes Empty
is written too (its generation), and `restore` rebuilds a group from its record after a
coordinator move: Stable with its members, whose sessions start again from the load.
"""
from __future__ import annotations

import dataclasses

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import anyio

from kshim.coordinator.groups.group_format import StoredGroup, StoredMember
from wire.errors import ErrorCode

log = logging.getLogger("kshim.groups")

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000  # Kafka's group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 0  # the broker's is 3 s (BrokerConfig); 0 keeps unit tests direct
    max_size: int = 2**31 - 1  # group.max.size: a classic group's members
    consumer_max_size: int = 2**31 - 1  # a consumer (KIP-848) group's members (group.max.size is classic only)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 7 days
    offset_metadata_max_bytes: int = 4096
    offsets_commit_timeout_ms: int = 5000
    offsets_retention_check_interval_ms: int = 600_000  # how often expired offsets are looked for
    offsets_compression_codec: int = 0  # offsets.topic.compression.codec: the coordinator's writes
    # KIP-848 consumer groups (group.consumer.session.timeout.ms / heartbeat.interval.ms; Kafka's
    # heartbeat interval is 5 s, kshim answers 3 s for snappier rebalances)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 3000


class Waiter:
    """A one-shot result a handler awaits (a JoinGroup or SyncGroup response)."""

    __slots__ = ("_event", "value")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.value: Any = None  # a JoinResult or a SyncResult

    def set(self, value: JoinResult | SyncResult) -> None:
        if not self._event.is_set():
            self.value = value
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> Any:
        await self._event.wait()
        return self.value


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Waiter | None = None
    sync_waiter: Waiter | None = None
    session_deadline: int = 0
    join_version: int = 0  # JoinGroup version of the last join (the leader's skip_assignment)

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup answer."""
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup gets: the generation it joined, or why not."""
    error_code: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()  # for the leader only
    skip_assignment: bool = False  # a static leader rejoining a stable group (KIP-814)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What a SyncGroup gets: the member's assignment, or why not."""
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False)
class Group:
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)  # member ids handed out, not joined yet -> deadline
    rebalance_deadline: int | None = None
    initial_delay_until: int = 0  # an Empty group's first rebalance waits for more members until then
    delay_remaining: int = 0  # how much longer the initial delay may still be extended (Kafka's remainingMs)
    new_member_added: bool = False  # a member joined during the current initial delay
    state_since: int = 0  # when the group entered its state (offset expiry counts from Empty)
    on_change: Callable[[], None] = lambda: None  # deadlines moved: the coordinator re-arms its timer
    # writes the group's record; the callback (if any) gets the write's error and the time it ended
    on_store: Callable[[StoredGroup, Callable[[ErrorCode, int], None] | None], None] | None = None
    storing: int | None = None  # the generation whose assignment is being written
    persisted: bool = False  # a record of this group was written or loaded (deleting it needs a tombstone)

    # ------------------------------------------------------------------ helpers
    def _set_state(self, state: str, now: int) -> None:
        self.state = state
        self.state_since = now

    def snapshot(self, now: int, assignments: dict[str, bytes] | None = None) -> StoredGroup:
        """The group's record: members with the metadata of the chosen protocol and their assignment."""
        given = assignments if assignments is not None else {m.member_id: m.assignment for m in self.members.values()}
        return StoredGroup(self.protocol_type, self.generation, self.protocol_name, self.leader_id, now, tuple(
            StoredMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms, m.metadata(self.protocol_name), given.get(m.member_id, b""))
            for m in self.members.values()))

    def _store(self, now: int) -> None:
        """Write the group's current record, answering no one (Empty groups, static replacements)."""
        if self.on_store is not None:
            self.persisted = True
            self.on_store(self.snapshot(now), None)

    @classmethod
    def restore(cls, group_id: str, stored: StoredGroup, now: int, config: GroupConfig,
                on_change: Callable[[], None]) -> "Group":
        """The group as its record left it: Stable with its members (their sessions start now), or Empty."""
        group = cls(group_id, config, on_change=on_change, generation=stored.generation,
                    protocol_type=stored.protocol_type, persisted=True)
        for sm in stored.members:
            protocols = [(stored.protocol, sm.subscription)] if stored.protocol is not None else []
            member = Member(sm.member_id, sm.instance_id, sm.client_id, sm.client_host, sm.session_timeout_ms,
                            sm.rebalance_timeout_ms, stored.protocol_type or "", protocols, sm.assignment,
                            session_deadline=now + sm.session_timeout_ms)
            group.members[sm.member_id] = member
            if sm.instance_id is not None:
                group.static[sm.instance_id] = sm.member_id
        if group.members:
            group.protocol_name = stored.protocol
            group.leader_id = stored.leader if stored.leader in group.members else next(iter(group.members))
            group._set_state(STABLE, now)
        else:
            group._set_state(EMPTY, now)
        return group

    def _new_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer-protocol members subscribe to; None when unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= parse_subscription(m.metadata(self.protocol_name))
            except (IndexError, ValueError, UnicodeDecodeError):
                return None
        return topics

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocols or not protocol_type:
            return False
        if self.is_empty():
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        return all(names & set(m.protocol_names) for m in self.members.values())

    def _select_protocol(self) -> str | None:
        candidates = None
        for m in self.members.values():
            names = set(m.protocol_names)
            candidates = names if candidates is None else candidates & names
        if not candidates:
            return None
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n in m.protocol_names if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # most votes; ties go to the first member's preference order, as a stable choice
        first = next(iter(self.members.values())).protocol_names
        return max(candidates, key=lambda n: (votes.get(n, 0), -first.index(n) if n in first else -999))

    def _check_fenced(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        if instance_id is None:
            return None
        known = self.static.get(instance_id)
        if known is not None and known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return None

    # ------------------------------------------------------------------ JoinGroup
    def join(self, now: int, *, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
             protocols: list[tuple[str, bytes]], require_known_member: bool, version: int = 0) -> Waiter:
        waiter = Waiter()
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # v0 has no rebalance timeout
        if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
            waiter.set(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return waiter
        if self.state == DEAD:
            waiter.set(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return waiter
        if not self._supports(protocol_type, protocols):
            waiter.set(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return waiter
        args = dict(client_id=client_id, client_host=client_host, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, protocol_type=protocol_type, protocols=list(protocols))
        if not member_id:
            if instance_id is not None and instance_id in self.static:
                self._replace_static(now, waiter, instance_id, version, args)
                return waiter
            if len(self.members) + len(self.pending) >= self.config.max_size:
                waiter.set(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED))
                return waiter
            new_id = self._new_member_id(client_id, instance_id)
            if instance_id is None and require_known_member:
                self.pending[new_id] = now + session_timeout_ms
                self.on_change()
                waiter.set(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
                return waiter
            self._add_member(now, waiter, new_id, instance_id, version, args)
            return waiter
        # a known (or pending) member id
        fenced = self._check_fenced(member_id, instance_id)
        if fenced:
            waiter.set(JoinResult(fenced, member_id))
            return waiter
        if member_id in self.pending:
            del self.pending[member_id]
            self._add_member(now, waiter, member_id, instance_id, version, args)
            return waiter
        member = self.members.get(member_id)
        if member is None:
            waiter.set(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return waiter
        changed = member.protocols != args["protocols"]
        self._update_member(member, args, version)
        if member.join_waiter is not None and not member.join_waiter.done:
            member.join_waiter.set(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id))  # superseded
        if self.state == PREPARING:
            member.join_waiter = waiter
            self._maybe_complete_join(now)
        elif self.state == COMPLETING and not changed:
            waiter.set(self._join_response(member))  # the response got lost: give it again
        elif self.state == STABLE and not changed and member_id != self.leader_id:
            waiter.set(self._join_response(member))
        else:  # protocols changed, or the leader asks for a new assignment
            member.join_waiter = waiter
            self._prepare_rebalance(now)
        return waiter

    def _update_member(self, member: Member, args: dict, version: int) -> None:
        for k, v in args.items():
            setattr(member, k, v)
        member.join_version = version

    def _add_member(self, now: int, waiter: Waiter, member_id: str, instance_id: str | None, version: int,
                    args: dict) -> None:
        member = Member(member_id, instance_id, **args)
        member.join_version = version
        member.join_waiter = waiter
        member.session_deadline = now + member.session_timeout_ms
        if self.is_empty():
            self.protocol_type = member.protocol_type
        self.members[member_id] = member
        if instance_id is not None:
            self.static[instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        self.new_member_added = True
        self._prepare_rebalance(now)

    def _replace_static(self, now: int, waiter: Waiter, instance_id: str, version: int, args: dict) -> None:
        """A known group.instance.id joins with no member id: it takes over its old member's place;
        the old member id is fenced from now on."""
        old_id = self.static[instance_id]
        old = self.members.pop(old_id)
        new_id = self._new_member_id(args["client_id"], instance_id)
        changed = old.protocols != args["protocols"]
        old.member_id = new_id
        self._update_member(old, args, version)
        for w in (old.join_waiter, old.sync_waiter):
            if w is not None:
                w.set(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id) if w is old.join_waiter
                      else SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        old.join_waiter = old.sync_waiter = None
        self.members[new_id] = old
        self.static[instance_id] = new_id
        was_leader = self.leader_id == old_id
        if was_leader:
            self.leader_id = new_id
        old.session_deadline = now + old.session_timeout_ms
        if self.state == STABLE and not changed and (not was_leader or version >= 9):
            # no rebalance: the member gets the current generation and keeps its assignment; a
            # leader (v9+, KIP-814) gets the members with skip_assignment. An older leader has no
            # way to skip the assignment, so it rebalances, as in Kafka.
            waiter.set(dataclasses.replace(self._join_response(old), skip_assignment=was_leader))
            self._store(now)  # the new member id replaces the old one in the record
            self.on_change()
        else:
            old.join_waiter = waiter
            if self.state == PREPARING:
                self._maybe_complete_join(now)
            else:
                self._prepare_rebalance(now)

    def _join_response(self, member: Member) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        return JoinResult(
            ErrorCode.NONE, member.member_id, self.generation, self.protocol_type, self.protocol_name,
            self.leader_id or "",
            tuple(JoinedMember(m.member_id, m.instance_id, m.metadata(self.protocol_name))
                  for m in self.members.values()) if is_leader else ())

    # ------------------------------------------------------------------ rebalances
    def _prepare_rebalance(self, now: int) -> None:
        self.storing = None  # an assignment being written is dropped: its answer is ignored
        if self.state == COMPLETING:
            for m in self.members.values():  # members waiting for their assignment must rejoin
                if m.sync_waiter is not None:
                    m.sync_waiter.set(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
                    m.sync_waiter = None
        if self.state != PREPARING:
            timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
            # Kafka's InitialDelayedJoin: an Empty group waits min(delay, rebalance timeout) for more
            # members, and again (within the rebalance timeout) each time one arrived meanwhile
            delay = min(self.config.initial_rebalance_delay_ms, timeout) if self.state == EMPTY else 0
            self.delay_remaining = max(timeout - self.config.initial_rebalance_delay_ms, 0) if delay else 0
            self.new_member_added = False
            self.rebalance_deadline = now + max(timeout, delay)
            self.initial_delay_until = now + delay
            self._set_state(PREPARING, now)
            log.info("group %s: preparing a rebalance (generation %d)", self.group_id, self.generation)
        self.on_change()
        self._maybe_complete_join(now)

    def _all_joined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None for m in self.members.values())

    def _maybe_complete_join(self, now: int) -> None:
        if self.state != PREPARING:
            return
        if self._all_joined() and now >= self.initial_delay_until:
            if self.new_member_added and self.delay_remaining > 0:
                step = min(self.config.initial_rebalance_delay_ms, self.delay_remaining)
                self.delay_remaining -= step
                self.new_member_added = False
                self.initial_delay_until = now + step
                self.on_change()
                return
            self._complete_join(now)

    def _complete_join(self, now: int) -> None:
        for m in [m for m in self.members.values() if m.join_waiter is None]:
            self._remove(m, "did not rejoin before the rebalance timeout")
        self.pending.clear()
        self.generation += 1
        self.rebalance_deadline = None
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._set_state(EMPTY, now)
            self._store(now)
            self.on_change()
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        log.info("group %s: generation %d, %d members, protocol %s, leader %s", self.group_id, self.generation,
                 len(self.members), self.protocol_name, self.leader_id)
        self._set_state(COMPLETING, now)
        self.rebalance_deadline = now + max(m.rebalance_timeout_ms for m in self.members.values())
        for m in self.members.values():
            m.assignment = b""
            m.session_deadline = now + m.session_timeout_ms
            waiter, m.join_waiter = m.join_waiter, None
            if waiter is not None:  # every member joined this round, so each has its waiter
                waiter.set(self._join_response(m))
        self.on_change()

    def _remove(self, member: Member, why: str = "left") -> None:
        log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        self.members.pop(member.member_id, None)
        if member.instance_id is not None and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        if member.join_waiter is not None:
            member.join_waiter.set(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        if member.sync_waiter is not None:
            member.sync_waiter.set(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def remove_member(self, now: int, member: Member, why: str = "left") -> None:
        """A member left or timed out: the others rebalance."""
        self._remove(member, why)
        if self.state in (STABLE, COMPLETING):
            if self.members:
                self._prepare_rebalance(now)
            else:
                self.generation += 1
                self.protocol_name = None
                self._set_state(EMPTY, now)
                self.rebalance_deadline = None
                self._store(now)
        elif self.state == PREPARING:
            if self.members or self.pending:
                self._maybe_complete_join(now)
            else:
                self._complete_join(now)
        self.on_change()

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, now: int, *, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]]) -> Waiter:
        waiter = Waiter()
        member = self.members.get(member_id)
        fenced = self._check_fenced(member_id, instance_id)
        if fenced:
            waiter.set(SyncResult(fenced))
        elif member is None or self.state in (EMPTY, DEAD):
            waiter.set(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif generation != self.generation:
            waiter.set(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        elif (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            waiter.set(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif self.state == PREPARING:
            waiter.set(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif self.state == STABLE:
            member.session_deadline = now + member.session_timeout_ms
            waiter.set(self._sync_response(member))
        else:  # CompletingRebalance
            member.session_deadline = now + member.session_timeout_ms
            if member.sync_waiter is not None:
                member.sync_waiter.set(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_waiter = waiter
            if member_id == self.leader_id and self.storing is None:
                given = dict(assignments)
                if self.on_store is None:
                    self._assign(given, now)
                else:  # answered once the record is COMMITTED
                    self.storing = generation = self.generation
                    self.persisted = True
                    self.on_store(self.snapshot(now, given),
                                  lambda error, at: self._stored(generation, given, error, at))
        return waiter

    def _stored(self, generation: int, given: dict[str, bytes], error: ErrorCode, now: int) -> None:
        if self.state != COMPLETING or self.generation != generation or self.storing != generation:
            return  # a new rebalance (or an unload) overtook the write
        self.storing = None
        if error == ErrorCode.NONE:
            self._assign(given, now)
            return
        log.info("group %s: storing generation %d failed (%s): rebalancing", self.group_id, generation, error.name)
        for m in self.members.values():
            if m.sync_waiter is not None:
                m.sync_waiter.set(SyncResult(error))
                m.sync_waiter = None
        self._prepare_rebalance(now)

    def _assign(self, given: dict[str, bytes], now: int) -> None:
        for m in self.members.values():
            m.assignment = given.get(m.member_id, b"")
        self._set_state(STABLE, now)
        self.rebalance_deadline = None
        for m in self.members.values():
            if m.sync_waiter is not None:
                m.sync_waiter.set(self._sync_response(m))
                m.sync_waiter = None
        self.on_change()

    def _sync_response(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment)

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup
    def heartbeat(self, now: int, *, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        member = self.members.get(member_id)
        fenced = self._check_fenced(member_id, instance_id)
        if fenced:
            return fenced
        if member is None or self.state in (EMPTY, DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.session_deadline = now + member.session_timeout_ms
        if self.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, now: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if not member_id and instance_id is not None:  # a static member leaving by instance id
            member_id = self.static.get(instance_id, "")
        fenced = self._check_fenced(member_id, instance_id)
        if fenced:
            return fenced
        if member_id in self.pending:
            del self.pending[member_id]
            self._maybe_complete_join(now)
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.remove_member(now, member)
        return ErrorCode.NONE

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> int | None:
        times = [d for d in self.pending.values()]
        if self.rebalance_deadline is not None:
            times.append(self.rebalance_deadline)
        if self.state == PREPARING and self._all_joined():
            times.append(self.initial_delay_until)
        for m in self.members.values():
            if m.join_waiter is None and m.sync_waiter is None:
                times.append(m.session_deadline)
        return min(times) if times else None

    def tick(self, now: int) -> None:
        for member_id, deadline in list(self.pending.items()):
            if deadline <= now:
                del self.pending[member_id]
        for m in list(self.members.values()):
            if (m.member_id in self.members and m.join_waiter is None and m.sync_waiter is None
                    and m.session_deadline <= now):
                self.remove_member(now, m, "session timed out")
        if self.state == PREPARING:
            if self.rebalance_deadline is not None and self.rebalance_deadline <= now:
                self._complete_join(now)
            else:
                self._maybe_complete_join(now)
        elif self.state == COMPLETING and self.rebalance_deadline is not None and self.rebalance_deadline <= now:
            # the leader never sent its assignment: drop those that did not sync, start over
            for m in [m for m in self.members.values() if m.sync_waiter is None]:
                self._remove(m, "did not sync before the rebalance timeout")
            self.rebalance_deadline = None
            if self.members:
                self._prepare_rebalance(now)
            else:
                self.generation += 1
                self._set_state(EMPTY, now)
                self._store(now)

    def shut_down(self, code: ErrorCode) -> None:
        """The coordinator moved or the group was deleted: waiting members get `code`."""
        for m in self.members.values():
            if m.join_waiter is not None:
                m.join_waiter.set(JoinResult(code, m.member_id))
            if m.sync_waiter is not None:
                m.sync_waiter.set(SyncResult(code))
        self.state = DEAD


def parse_subscription(data: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription (version int16, then an int32 count of int16-length
    strings, in every version)."""
    if len(data) < 6:
        return set()
    pos = 2
    count = int.from_bytes(data[pos:pos + 4], "big", signed=True)
    pos += 4
    topics = set()
    for _ in range(max(count, 0)):
        n = int.from_bytes(data[pos:pos + 2], "big", signed=True)
        pos += 2
        topics.add(bytes(data[pos:pos + n]).decode())
        pos += n
    return topics
