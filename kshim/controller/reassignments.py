"""Partition reassignments (KIP-455, Kafka's ReplicationControlManager and
PartitionReassignmentReplicas): AlterPartitionReassignments and ListPartitionReassignments.

- AlterPartitionReassignments sets a partition's replicas to the target followed by the replicas
  being removed, and records which are being added and removed; the brokers of the adding ones
  open an empty replica from that image and fetch from the leader like any follower, and the
  leader takes each into the ISR once it has caught up (AlterPartition);
- the reassignment completes in the change that puts every target replica in the ISR: the
  removing replicas leave the replica set and the ISR, the leader stays if it is a target
  replica in the ISR and alive, else the first such target replica leads (Kafka's online
  election); the leader epoch is bumped when replicas are removed. Each broker that no longer
  has its replica in the image deletes it (kshim.replica.manager), at once or when it returns;
- a change that would move leadership away from a live leader is the leader's to propose: it
  first stops taking appends until the targets hold its whole log (kshim.replication.isr), so
  the move loses no acknowledged record, acks=1 ones included. A new reassignment whose targets
  are already in the ISR completes at once only when the leader stays (or is not alive);
- cancelling (null replicas) reverts to the original replicas: the adding ones leave the replica
  set and ISR; if only adding replicas were in sync, the revert needs an unclean election and is
  refused unless the topic allows one.

Separate from the elections (kshim.controller.elections), which a reassignment's completion or
cancellation runs like any replica change, and which call back here when an ISR change may
complete one.
"""
from __future__ import annotations

import logging

from kshim.cluster.image import NO_LEADER, completes_reassignment
from kshim.controller.elections import Elections
from kshim.controller.messages import OngoingReassignment, Reassignment, ReassignmentResult
from kshim.controller.state import _Topic
from kshim.controller.store import PartitionRow, PendingDeletion
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")


class Reassignments(Elections):
    def alter_partition_reassignments(self, reassignments: tuple[Reassignment, ...],
                                      allow_replication_factor_change: bool = True) -> tuple[ReassignmentResult, ...]:
        """Kafka's alterPartitionReassignments: each partition on its own (an error answers that
        partition only), one publish for all."""
        alive = self._alive()
        changed: dict[str, dict[int, PartitionRow]] = {}
        deletions: dict[str, list[PendingDeletion]] = {}
        results = []
        for r in reassignments:
            try:
                self._reassign(r, allow_replication_factor_change, alive, changed, deletions)
                code, message = ErrorCode.NONE, None
            except BrokerError as e:
                log.info("cannot alter the reassignment of %s-%d: %s", r.topic, r.partition, e.message)
                code, message = e.code, e.message
            results.append(ReassignmentResult(r.topic, r.partition, int(code), message))
        for name, rows in changed.items():
            self.store.save_partitions(name, list(rows.values()), deletions.get(name))
            self._note_deletions(deletions.get(name, []))
        if changed:
            self._publish()
        return tuple(results)

    def _reassign(self, r: Reassignment, allow_rf_change: bool, alive: set[int],
                  changed: dict[str, dict[int, PartitionRow]], deletions: dict[str, list[PendingDeletion]]) -> None:
        topic = self._topics.get(r.topic)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {r.topic}.")
        if not 0 <= r.partition < len(topic.partitions):
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"Unable to find partition {r.topic}:{r.partition}.")
        p = topic.partitions[r.partition]
        before = (list(p.replicas), list(p.isr), p.leader, list(p.adding), list(p.removing))
        if r.replicas is None:
            removed = self._cancel_reassignment(topic, p, alive)
        else:
            removed = self._start_reassignment(topic, p, list(r.replicas), allow_rf_change, alive)
        if (list(p.replicas), list(p.isr), p.leader, list(p.adding), list(p.removing)) != before:
            p.partition_epoch += 1
            changed.setdefault(topic.name, {})[p.index] = p
            deletions.setdefault(topic.name, []).extend(removed)

    def _start_reassignment(self, topic: _Topic, p: PartitionRow, target: list[int], allow_rf_change: bool,
                            alive: set[int]) -> list[PendingDeletion]:
        """Kafka's changePartitionReassignment: validate the target as a manual assignment, then
        replicas = target + removing; complete at once if the ISR already allows it."""
        def bad(message: str) -> BrokerError:
            return BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

        if not target:
            raise bad("The manual partition assignment includes an empty replica list.")
        previous = None
        for broker in sorted(target):
            if broker not in self._brokers:
                raise bad(f"The manual partition assignment includes broker {broker}, but no such broker is "
                          f"registered.")
            if broker == previous:
                raise bad(f"The manual partition assignment includes the broker {broker} more than once.")
            previous = broker
        original = [r for r in p.replicas if r not in p.adding]
        if not allow_rf_change and len(target) != len(original):
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"The replication factor is changed from {len(original)} to {len(target)}")
        adding = sorted(set(target) - set(p.replicas))
        removing = sorted(set(p.replicas) - set(target))
        self._check_budget(topic.name, [PartitionRow(p.index, adding, NO_LEADER, 0, [])])
        p.replicas, p.adding, p.removing = target + removing, adding, removing
        if adding:
            # assigned again before its broker removed the old replica: it catches up from there
            self.store.forget_deletions(self._forget_deletions(topic, p.index, adding))
            log.info("%s-%d: reassigning to %s (adding %s, removing %s)", topic.name, p.index, target, adding,
                     removing)
        if p.leader in p.removing and p.leader in alive:
            # the targets are in sync already, but leadership must leave a live leader: it hands
            # over first (kshim.replication.isr), then proposes the ISR that completes the move
            return []
        return self._complete_reassignment(topic, p, alive)

    def _complete_reassignment(self, topic: _Topic, p: PartitionRow, alive: set[int]) -> list[PendingDeletion]:
        """Finish p's reassignment if every target replica is in the ISR (Kafka's
        maybeCompleteReassignment): the removing replicas leave; the replicas to delete."""
        if not completes_reassignment(p.replicas, p.adding, p.removing, p.isr):
            return []
        replicas = [r for r in p.replicas if r not in p.removing]
        removed = [r for r in p.replicas if r in p.removing]
        p.replicas, p.isr, p.adding, p.removing = replicas, [r for r in replicas if r in p.isr], [], []
        self._online_election(topic, p, alive, removed)
        log.info("%s-%d: reassignment complete: replicas %s, leader %d (epoch %d), removed %s", topic.name,
                 p.index, p.replicas, p.leader, p.leader_epoch, removed)
        return self._deletions_of(topic, p.index, removed)

    def _cancel_reassignment(self, topic: _Topic, p: PartitionRow, alive: set[int]) -> list[PendingDeletion]:
        """Kafka's cancelPartitionReassignment (PartitionReassignmentRevert): back to the original
        replicas; the adding ones leave the replica set and the ISR."""
        if not p.adding and not p.removing:
            raise BrokerError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                              f"No partition reassignment is in progress for {topic.name}-{p.index}.")
        original = [r for r in p.replicas if r not in p.adding]
        isr = [r for r in p.isr if r not in p.adding]
        if not isr:  # only adding replicas are in sync: the revert elects an out-of-sync replica
            if not self._effective(topic)["unclean.leader.election.enable"]:
                raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"Unable to revert partition assignment for {topic.name}:{p.index} because it "
                                  f"would require an unclean leader election.")
            isr = [original[0]]
        removed = list(p.adding)
        p.replicas, p.isr, p.adding, p.removing = original, isr, [], []
        self._online_election(topic, p, alive, removed)
        log.info("%s-%d: reassignment cancelled: replicas %s, isr %s, leader %d", topic.name, p.index, p.replicas,
                 p.isr, p.leader)
        return self._deletions_of(topic, p.index, removed)

    def _online_election(self, topic: _Topic, p: PartitionRow, alive: set[int], removed: list[int]) -> None:
        """Kafka's online election after the replicas changed: the leader stays if it is still in
        the ISR and alive, else the first alive ISR member leads. Removing replicas bumps the leader
        epoch even when the leader stays, so fetches and produces of the old set are fenced."""
        epoch = p.leader_epoch
        if p.leader not in p.isr or p.leader not in alive:
            self._elect(topic, p, alive)
        if removed and p.leader_epoch == epoch:
            p.leader_epoch += 1

    def list_partition_reassignments(self, partitions: dict[str, tuple[int, ...]] | None
                                     ) -> tuple[OngoingReassignment, ...]:
        if partitions is None:
            asked = [(t, p) for t in self._topics.values() for p in t.partitions]
        else:
            asked = [(t, t.partitions[i]) for name, indexes in partitions.items()
                     if (t := self._topics.get(name)) is not None for i in indexes if 0 <= i < len(t.partitions)]
        return tuple(OngoingReassignment(t.name, p.index, tuple(p.replicas), tuple(p.adding), tuple(p.removing))
                     for t, p in asked if p.adding or p.removing)
