"""One share group (KIP-932, ShareGroupHeartbeat): members that share partitions.

Membership works as in KIP-848 consumer groups, without revocation (a share partition may have
several members at once, so nothing must be released before another member gets it):
- The group epoch is bumped whenever an input of the assignment changes: a member joins or leaves
  (or is fenced), a subscription changes, a subscribed topic is created, deleted or grows
  partitions. A heartbeat that finds the target assignment older than the group epoch has the
  `simple` assignor (Kafka's SimpleAssignor, `assignors.simple`) compute a new one for the whole
  group (assignment epoch = group epoch).
- A member takes its target at its next heartbeat: its assignment becomes the target and its
  epoch the assignment epoch (Kafka's ShareGroupAssignmentBuilder).
- Member epoch 0 joins (the client generates its member id; an existing id rejoins), -1 leaves;
  another epoch must be the member's current one, else FENCED_MEMBER_EPOCH; an unknown member is
  UNKNOWN_MEMBER_ID. A member silent for the group's share.session.timeout.ms is removed. A join
  past group.share.max.size is GROUP_MAX_SIZE_REACHED.
States (Kafka's ShareGroup): Empty, Stable, and Dead once unloaded or deleted.
The coordinator persists the group (`snapshot`, one record in `group_format`) whenever a heartbeat
or a timer changed it, before the heartbeat is answered; `restore` rebuilds it after a coordinator
move, the members' sessions counting from the load.
Time is a parameter (`now`, ms) as in `consumer_group`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from kshim.coordinator.groups.assignors import simple
from kshim.coordinator.groups.consumer_group import HeartbeatResult, NoClassicMembers, Topics, by_topic
from kshim.coordinator.groups.group import GroupConfig
from kshim.coordinator.groups.group_format import StoredShareGroup, StoredShareMember
from wire.errors import ErrorCode

log = logging.getLogger("kshim.groups")

EMPTY, STABLE, DEAD = "Empty", "Stable", "Dead"
JOIN_EPOCH, LEAVE_EPOCH = 0, -1
ASSIGNOR = "simple"

TP = tuple[Hashable, int]


def validate_share_heartbeat(*, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                             subscribed_topic_names) -> tuple[ErrorCode, str | None]:
    """Kafka's request checks (GroupMetadataManager.throwIfShareGroupHeartbeatRequestIsInvalid)."""
    def invalid(message: str):
        return ErrorCode.INVALID_REQUEST, message
    if not group_id:
        return invalid("GroupId can't be empty.")
    if rack_id == "":
        return invalid("RackId can't be empty.")
    if not member_id:
        return invalid("MemberId can't be empty.")
    if member_epoch == JOIN_EPOCH:
        if not subscribed_topic_names:
            return invalid("SubscribedTopicNames must be set in first request.")
    elif member_epoch < 0 and member_epoch != LEAVE_EPOCH:
        return invalid("MemberEpoch is invalid.")
    return ErrorCode.NONE, None


@dataclass(eq=False)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: list[str] = field(default_factory=list)
    epoch: int = 0
    assigned: set[TP] = field(default_factory=set)
    session_deadline: int = 0


@dataclass(eq=False)
class ShareGroup(NoClassicMembers):
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    state_since: int = 0
    on_change: Callable[[], None] = lambda: None
    members: dict[str, ShareMember] = field(default_factory=dict)
    group_epoch: int = 0
    assignment_epoch: int = 0
    target: dict[str, set[TP]] = field(default_factory=dict)
    pending: dict = field(default_factory=dict)  # classic-group shape, always empty here
    dead: bool = False
    _topics: dict = field(default_factory=dict)
    _signature: Any = None
    stored: bytes | None = None  # the encoded snapshot last written (or loaded)
    # (member id, why) of members removed since the coordinator last looked (leave, fencing)
    departed: list[tuple[str, str]] = field(default_factory=list)

    group_type = "share"
    protocol_type = "share"
    assignor_name = ASSIGNOR
    protocol_name = ASSIGNOR

    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set[str]:
        return set().union(*(set(m.subscribed_names) for m in self.members.values()))

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> StoredShareGroup:
        return StoredShareGroup(self.group_epoch, self.assignment_epoch, tuple(
            StoredShareMember(m.member_id, m.rack_id, m.client_id, m.client_host, tuple(m.subscribed_names), m.epoch,
                              frozenset(m.assigned), frozenset(self.target.get(m.member_id, ())))
            for m in self.members.values()))

    @classmethod
    def restore(cls, group_id: str, stored: StoredShareGroup, now: int, config: GroupConfig,
                on_change: Callable[[], None], topics: Topics, session_timeout_ms: int) -> "ShareGroup":
        group = cls(group_id, config, state_since=now, on_change=on_change, group_epoch=stored.group_epoch,
                    assignment_epoch=stored.assignment_epoch)
        for sm in stored.members:
            group.members[sm.member_id] = ShareMember(sm.member_id, sm.rack_id, sm.client_id, sm.client_host,
                                                      list(sm.subscribed_names), sm.epoch, set(sm.assigned),
                                                      now + session_timeout_ms)
            group.target[sm.member_id] = set(sm.target)
        group._topics = dict(topics)
        group._signature = group._compute_signature()[0]
        return group

    # ------------------------------------------------------------------ epochs and the target assignment
    def _compute_signature(self) -> tuple[Any, dict, dict]:
        subs = {mid: frozenset(m.subscribed_names) for mid, m in self.members.items()}
        wanted = set().union(*subs.values())
        metadata = {n: self._topics[n] for n in wanted if n in self._topics}
        return (frozenset(subs.items()), frozenset(metadata.items())), subs, metadata

    def refresh(self, topics: Topics | None = None) -> bool:
        """Bump the group epoch if an input of the assignment changed, and compute the target
        assignment when it is older than the group epoch; True if the group changed."""
        if topics is not None:
            self._topics = dict(topics)
        signature, subs, metadata = self._compute_signature()
        changed = False
        if signature != self._signature:
            self._signature = signature
            self.group_epoch += 1
            changed = True
        if self.members and self.assignment_epoch < self.group_epoch:
            self.target = simple(subs, metadata, {m: mem.assigned for m, mem in self.members.items()})
            self.assignment_epoch = self.group_epoch
            log.info("group %s: epoch %d, share assignment for %d members", self.group_id, self.group_epoch,
                     len(self.members))
            changed = True
        return changed

    # ------------------------------------------------------------------ ShareGroupHeartbeat
    def share_heartbeat(self, now: int, *, member_id: str, member_epoch: int, rack_id: str | None = None,
                        subscribed_topic_names=None, client_id: str = "", client_host: str = "",
                        topics: Topics | None = None, session_timeout_ms: int = 45_000,
                        heartbeat_interval_ms: int = 5000, max_size: int = 200) -> HeartbeatResult:
        """The answer to one (validated) heartbeat, with the group's session timeout, heartbeat
        interval and size limit."""
        if self.dead:
            return HeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        member = self.members.get(member_id)
        if member_epoch == LEAVE_EPOCH:
            if member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
            self._remove(member, "left", topics)
            self.on_change()
            return HeartbeatResult(ErrorCode.NONE, member_id=member_id, member_epoch=LEAVE_EPOCH)
        if member_epoch == JOIN_EPOCH:
            if member is None:
                if len(self.members) >= max_size:
                    return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                          f"the share group has reached its maximum size of {max_size} members")
                member = self.members[member_id] = ShareMember(member_id)
        elif member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
        elif member_epoch != member.epoch:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"member epoch {member_epoch} does not match {member.epoch}; rejoin")
        if subscribed_topic_names is not None:
            member.subscribed_names = list(subscribed_topic_names)
        if rack_id is not None:
            member.rack_id = rack_id
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        member.session_deadline = now + session_timeout_ms
        before = frozenset(member.assigned)
        self.refresh(topics)
        member.assigned = set(self.target.get(member_id, set()))
        member.epoch = self.assignment_epoch
        self.on_change()
        return HeartbeatResult(ErrorCode.NONE, None, member_id, member.epoch, heartbeat_interval_ms,
                               by_topic(member.assigned) if member_epoch == JOIN_EPOCH or member.assigned != before
                               else None)

    def _remove(self, member: ShareMember, why: str, topics: Topics | None = None) -> None:
        log.info("share group %s: member %s %s", self.group_id, member.member_id, why)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        self.departed.append((member.member_id, why))
        self.refresh(topics)

    # ------------------------------------------------------------------ offsets and the classic APIs
    def validate_commit(self, member_id: str, member_epoch: int) -> ErrorCode:
        """Share groups commit no offsets (their progress is the share-partition state)."""
        return ErrorCode.GROUP_ID_NOT_FOUND

    def validate_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return ErrorCode.GROUP_ID_NOT_FOUND

    # ------------------------------------------------------------------ timers
    def next_deadline(self) -> int | None:
        return min((m.session_deadline for m in self.members.values()), default=None)

    def tick(self, now: int) -> None:
        for m in list(self.members.values()):
            if m.session_deadline <= now:
                self._remove(m, "session timed out: fenced")

    def shut_down(self, code: ErrorCode) -> None:
        self.dead = True
