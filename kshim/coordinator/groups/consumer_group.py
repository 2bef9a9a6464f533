"""One KIP-848 consumer group (the "consumer" rebalance protocol, ConsumerGroupHeartbeat).

The coordinator does the assignment (`assignors`); members only heartbeat:
- The group epoch is bumped whenever an input of the assignment changes: a member joins or leaves
  (or is fenced), a subscription (topic names, or a regex resolved against the existing topics)
  changes, a subscribed topic is created, deleted or grows partitions, or the preferred server
  assignor changes (the one most members ask for; `uniform` when none does).
- At a heartbeat that finds the target assignment older than the group epoch, the assignor
  computes a new target assignment for the whole group (assignment epoch = group epoch).
- Each member reconciles toward its target (Kafka's CurrentAssignmentBuilder): partitions it must
  give up are removed from its assignment first and it stays at its epoch (UNREVOKED_PARTITIONS)
  until a heartbeat reports it no longer owns them; a partition still owned (or being revoked) by
  another member is only handed over once released (UNRELEASED_PARTITIONS); a reconciled member's
  epoch becomes the assignment epoch.
- A member must heartbeat with its current epoch (or the previous one, owning a subset of its
  assignment, when a response was lost); any other epoch is FENCED_MEMBER_EPOCH and the member
  rejoins with epoch 0. A member silent for the session timeout, or that does not revoke within its
  rebalance timeout, is removed and its partitions reassigned.
- Epoch -1 leaves; -2 is a static member's temporary leave: it keeps its partitions until its
  session times out, and a member joining with the same instance id takes its place (and its
  assignment) without a rebalance.
States (Kafka's names): Empty, Assigning, Reconciling, Stable, and Dead once unloaded.
The coordinator persists the group (`snapshot`, one record in `group_format`) whenever a heartbeat
or a timer changed it, before the heartbeat is answered; `restore` rebuilds it after a coordinator
move, the members' sessions counting from the load.
Time is a parameter (`now`, ms) as in `group`, so the unit tests drive it by hand.
"""
from __future__ import annotations

import base64
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Hashable, Mapping

import re2

from kshim.cluster.image import INTERNAL_TOPICS
from kshim.coordinator.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR
from kshim.coordinator.groups.group import GroupConfig, JoinResult, SyncResult, Waiter
from kshim.coordinator.groups.group_format import StoredConsumerGroup, StoredConsumerMember
from wire.errors import ErrorCode

log = logging.getLogger("kshim.groups")

EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
M_STABLE, M_UNREVOKED, M_UNRELEASED = "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2

TP = tuple[Hashable, int]
Topics = Mapping[str, tuple[Hashable, int]]  # name -> (topic id, partition count)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=256)
def compile_regex(pattern: str) -> "re2._Regexp":
    """Subscription regexes run on the event loop against every topic name: RE2 matches in linear
    time (as the RE2/J Kafka uses), so no pattern can stall the broker by backtracking."""
    return re2.compile(pattern, _RE2_OPTIONS)


def new_member_id() -> str:
    """Like Kafka's Uuid.randomUuid().toString(): url-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def validate_heartbeat(version: int, *, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                       rack_id: str | None, rebalance_timeout_ms: int, subscribed_topic_names, subscribed_topic_regex,
                       server_assignor: str | None, topic_partitions) -> tuple[ErrorCode, str | None]:
    """Kafka's request checks, before the group is looked up."""
    def invalid(message: str):
        return ErrorCode.INVALID_REQUEST, message
    if not group_id:
        return invalid("GroupId can't be empty.")
    if instance_id == "":
        return invalid("InstanceId can't be empty.")
    if rack_id == "":
        return invalid("RackId can't be empty.")
    if version >= 1 and not member_id:
        return invalid("MemberId can't be empty.")
    if member_epoch > 0 or member_epoch == LEAVE_EPOCH:
        if not member_id:
            return invalid("MemberId can't be empty.")
    elif member_epoch == JOIN_EPOCH:
        if rebalance_timeout_ms == -1:
            return invalid("RebalanceTimeoutMs must be provided in first request.")
        if topic_partitions is None or len(topic_partitions):
            return invalid("TopicPartitions must be empty when (re-)joining.")
        if not subscribed_topic_names and subscribed_topic_regex is None:
            return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif member_epoch == STATIC_LEAVE_EPOCH:
        if not member_id:
            return invalid("MemberId can't be empty.")
        if instance_id is None:
            return invalid("InstanceId can't be null.")
    else:
        return invalid("MemberEpoch is invalid.")
    if subscribed_topic_regex:
        try:
            compile_regex(subscribed_topic_regex)
        except re2.error as e:
            return ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {subscribed_topic_regex!r}: {e}"
    if server_assignor is not None and server_assignor not in ASSIGNORS:
        return (ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {server_assignor} is not supported. "
                f"Supported assignors: {', '.join(sorted(ASSIGNORS))}.")
    return ErrorCode.NONE, None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """What a ConsumerGroupHeartbeat gets: the member's epoch and, when it changed (or on a full
    heartbeat), its assignment as topic id -> partitions."""
    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict[Hashable, list[int]] | None = None


def by_topic(partitions: set[TP]) -> dict[Hashable, list[int]]:
    out: dict[Hashable, list[int]] = {}
    for topic_id, p in sorted(partitions, key=lambda t: (str(t[0]), t[1])):
        out.setdefault(topic_id, []).append(p)
    return out


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    rebalance_timeout_ms: int = 300_000
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = M_STABLE
    assigned: set[TP] = field(default_factory=set)
    revoking: set[TP] = field(default_factory=set)
    session_deadline: int = 0
    revoke_deadline: int | None = None

    def topics(self, topics: Topics) -> frozenset[str]:
        """The subscribed topic names, the regex resolved against the existing topics."""
        names = set(self.subscribed_names)
        if self.subscribed_regex:
            pattern = compile_regex(self.subscribed_regex)
            names |= {t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t)}
        return frozenset(names)

    def set_epoch(self, epoch: int) -> None:
        self.previous_epoch, self.epoch = self.epoch, epoch


class NoClassicMembers:
    """The classic group APIs on a group of another protocol (KIP-848 consumer or share groups):
    JoinGroup is INCONSISTENT_GROUP_PROTOCOL (kshim has no mixed membership), the rest
    UNKNOWN_MEMBER_ID."""

    def join(self, now: int, *, member_id: str, **_: Any) -> Waiter:
        waiter = Waiter()
        waiter.set(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        return waiter

    def sync(self, now: int, **_: Any) -> Waiter:
        waiter = Waiter()
        waiter.set(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        return waiter

    def heartbeat(self, now: int, **_: Any) -> ErrorCode:
        return ErrorCode.UNKNOWN_MEMBER_ID

    def leave(self, now: int, member_id: str, instance_id: str | None) -> ErrorCode:
        return ErrorCode.UNKNOWN_MEMBER_ID


@dataclass(eq=False)
class ConsumerGroup(NoClassicMembers):
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    state_since: int = 0
    on_change: Callable[[], None] = lambda: None
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = DEFAULT_ASSIGNOR
    target: dict[str, set[TP]] = field(default_factory=dict)
    pending: dict = field(default_factory=dict)  # classic-group shape, always empty here
    dead: bool = False
    _topics: dict = field(default_factory=dict)
    _signature: Any = None
    stored: bytes | None = None  # the encoded snapshot last written (or loaded): unchanged state is not written again

    group_type = "consumer"
    protocol_type = "consumer"

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state != M_STABLE for m in self.members.values()):
            return RECONCILING
        return STABLE

    @property
    def protocol_name(self) -> str:
        return self.assignor_name

    def subscribed_topics(self) -> set[str]:
        return set().union(*(m.topics(self._topics) for m in self.members.values()))

    def preferred_assignor(self) -> str:
        votes = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not votes:
            return DEFAULT_ASSIGNOR
        return max(sorted(votes), key=lambda name: votes[name])

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> StoredConsumerGroup:
        return StoredConsumerGroup(self.group_epoch, self.assignment_epoch, self.assignor_name, tuple(
            StoredConsumerMember(m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host,
                                 tuple(m.subscribed_names), m.subscribed_regex, m.rebalance_timeout_ms,
                                 m.server_assignor, m.epoch, m.previous_epoch, m.state, frozenset(m.assigned),
                                 frozenset(m.revoking), frozenset(self.target.get(m.member_id, ())))
            for m in self.members.values()))

    @classmethod
    def restore(cls, group_id: str, stored: StoredConsumerGroup, now: int, config: GroupConfig,
                on_change: Callable[[], None], topics: Topics) -> "ConsumerGroup":
        """The group as its record left it; the subscription signature is taken from the topics now,
        so loading it bumps no epoch."""
        group = cls(group_id, config, state_since=now, on_change=on_change, group_epoch=stored.group_epoch,
                    assignment_epoch=stored.assignment_epoch, assignor_name=stored.assignor)
        for sm in stored.members:
            member = ConsumerMember(sm.member_id, sm.instance_id, sm.rack_id, sm.client_id, sm.client_host,
                                    list(sm.subscribed_names), sm.subscribed_regex, sm.rebalance_timeout_ms,
                                    sm.server_assignor, sm.epoch, sm.previous_epoch, sm.state, set(sm.assigned),
                                    set(sm.revoking), now + config.consumer_session_timeout_ms,
                                    now + sm.rebalance_timeout_ms if sm.state == M_UNREVOKED else None)
            group.members[sm.member_id] = member
            group.target[sm.member_id] = set(sm.target)
        group._topics = dict(topics)
        group._signature = group._compute_signature()[0]
        return group

    # ------------------------------------------------------------------ epochs and the target assignment
    def _compute_signature(self) -> tuple[Any, dict, dict, str]:
        subs = {mid: m.topics(self._topics) for mid, m in self.members.items()}
        wanted = set().union(*subs.values())
        metadata = {n: self._topics[n] for n in wanted if n in self._topics}
        assignor = self.preferred_assignor()
        signature = (frozenset((m.instance_id or mid, subs[mid]) for mid, m in self.members.items()),
                     frozenset(metadata.items()), assignor)
        return signature, subs, metadata, assignor

    def _refresh(self, topics: Topics | None = None) -> None:
        if topics is not None:
            self._topics = dict(topics)
        signature, subs, metadata, assignor = self._compute_signature()
        if signature != self._signature:
            self._signature = signature
            self.group_epoch += 1
        if self.members and self.assignment_epoch < self.group_epoch:
            self.target = ASSIGNORS[assignor](subs, metadata, self.target)
            self.assignment_epoch = self.group_epoch
            self.assignor_name = assignor
            log.info("group %s: epoch %d, target assignment by %s for %d members", self.group_id,
                     self.group_epoch, assignor, len(self.members))

    def _owned_by_others(self, member: ConsumerMember) -> set[TP]:
        out: set[TP] = set()
        for m in self.members.values():
            if m is not member:
                out |= m.assigned | m.revoking
        return out

    def _reconcile(self, now: int, m: ConsumerMember, owned: set[TP] | None) -> None:
        if m.state == M_STABLE:
            if m.epoch != self.assignment_epoch:
                self._next_assignment(now, m, m.epoch, owned)
        elif m.state == M_UNREVOKED:
            if owned is not None and not owned & m.revoking:
                self._next_assignment(now, m, m.epoch + 1, owned)
        else:
            self._next_assignment(now, m, m.epoch, owned)

    def _next_assignment(self, now: int, m: ConsumerMember, epoch: int, owned: set[TP] | None) -> None:
        target = self.target.get(m.member_id, set())
        keep = m.assigned & target
        revoking = m.assigned - keep
        pending = target - keep
        unreleased = pending & self._owned_by_others(m)
        pending -= unreleased
        if revoking and (owned is None or owned & revoking):
            if m.state != M_UNREVOKED:
                m.revoke_deadline = now + m.rebalance_timeout_ms
            m.state = M_UNREVOKED
            m.set_epoch(epoch)
            m.assigned, m.revoking = keep, revoking
            return
        m.state = M_UNRELEASED if unreleased else M_STABLE
        m.set_epoch(self.assignment_epoch)
        m.assigned, m.revoking = keep | pending, set()
        m.revoke_deadline = None

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat
    def consumer_heartbeat(self, now: int, *, version: int = 1, member_id: str, member_epoch: int,
                           instance_id: str | None = None, rack_id: str | None = None,
                           rebalance_timeout_ms: int = -1, subscribed_topic_names=None,
                           subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                           owned: list[tuple[Hashable, list[int]]] | None = None, client_id: str = "",
                           client_host: str = "", topics: Topics | None = None,
                           session_timeout_ms: int | None = None,
                           heartbeat_interval_ms: int | None = None) -> HeartbeatResult:
        """The answer to one (validated) heartbeat. `session_timeout_ms` / `heartbeat_interval_ms`:
        the group's consumer.session.timeout.ms / consumer.heartbeat.interval.ms (its GROUP
        configs); None: the coordinator's."""
        if self.dead:
            return HeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        owned_set = None if owned is None else {(t, p) for t, ps in owned for p in ps}
        member = self.members.get(member_id) if member_id else None
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
            if member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
                member.set_epoch(STATIC_LEAVE_EPOCH)  # keeps its partitions until its session ends
                log.info("group %s: static member %s (%s) left temporarily", self.group_id, member_id,
                         member.instance_id)
            else:
                self._remove(member, "left", topics)
            self.on_change()
            return HeartbeatResult(ErrorCode.NONE, member_id=member_id, member_epoch=member_epoch)
        if member_epoch == JOIN_EPOCH:
            if not member_id:
                member_id = new_member_id()
            if member is None:
                static = self._static(instance_id)
                if static is not None and static.epoch != STATIC_LEAVE_EPOCH:
                    return HeartbeatResult(ErrorCode.UNRELEASED_INSTANCE_ID,
                                          f"instance {instance_id} is used by member {static.member_id}")
                if static is None and len(self.members) >= self.config.consumer_max_size:
                    return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
                member = ConsumerMember(member_id, instance_id)
                if static is not None:  # takes the place (and partitions) of the static member that left
                    del self.members[static.member_id]
                    member.assigned, member.revoking = static.assigned, static.revoking
                    member.state, member.revoke_deadline = static.state, static.revoke_deadline
                    if static.member_id in self.target:
                        self.target[member_id] = self.target.pop(static.member_id)
                    log.info("group %s: member %s replaces static member %s (%s)", self.group_id, member_id,
                             static.member_id, instance_id)
                self.members[member_id] = member
        else:
            if member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
            if member_epoch > member.epoch or (member_epoch < member.epoch and (
                    member_epoch != member.previous_epoch or owned_set is None or not owned_set <= member.assigned)):
                return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                      f"member epoch {member_epoch} does not match {member.epoch}; rejoin")
        # the member's fields: absent (null / -1) means unchanged
        if subscribed_topic_names is not None:
            member.subscribed_names = list(subscribed_topic_names)
        if subscribed_topic_regex is not None:
            member.subscribed_regex = subscribed_topic_regex or None
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if server_assignor is not None:
            member.server_assignor = server_assignor
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        member.session_deadline = now + (session_timeout_ms or self.config.consumer_session_timeout_ms)
        before = frozenset(member.assigned)
        self._refresh(topics)
        self._reconcile(now, member, owned_set)
        self.on_change()
        full = member_epoch == JOIN_EPOCH or (rebalance_timeout_ms != -1 and subscribed_topic_names is not None
                                              and owned is not None)
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.epoch,
                               heartbeat_interval_ms or self.config.consumer_heartbeat_interval_ms,
                               by_topic(member.assigned) if full or member.assigned != before else None)

    def _static(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _remove(self, member: ConsumerMember, why: str, topics: Topics | None = None) -> None:
        log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        self._refresh(topics)

    # ------------------------------------------------------------------ offsets
    def validate_member_epoch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetCommit (v9 member epoch) and OffsetFetch (v9) checks, as Kafka's ConsumerGroup."""
        member = self.members.get(member_id) if member_id else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch > member.epoch:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if member_epoch < member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_commit(self, member_id: str, member_epoch: int) -> ErrorCode:
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE  # an admin or simple consumer committing for an Empty group
        return self.validate_member_epoch(member_id, member_epoch)

    def validate_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        return self.validate_member_epoch(member_id, member_epoch)

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> int | None:
        times = [m.session_deadline for m in self.members.values()]
        times += [m.revoke_deadline for m in self.members.values() if m.revoke_deadline is not None]
        return min(times) if times else None

    def tick(self, now: int) -> None:
        for m in list(self.members.values()):
            if m.session_deadline <= now:
                self._remove(m, "session timed out: fenced")
            elif m.revoke_deadline is not None and m.revoke_deadline <= now:
                self._remove(m, "did not revoke its partitions within its rebalance timeout: fenced")

    def shut_down(self, code: ErrorCode) -> None:
        self.dead = True
