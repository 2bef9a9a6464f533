"""Leaders and ISRs: the election rules, the elections an admin asks for (ElectLeaders), and a
leader's ISR changes (AlterPartition).

Election rules (Kafka's, KRaft flavour):
- a partition's leader is the first replica (in assignment order) that is in the ISR and alive;
- when a broker is fenced (missed heartbeats for the session timeout), it leaves the ISR of every
  partition where others remain, and partitions it led get a new leader from the remaining ISR;
  if no in-sync replica is alive the partition goes offline (leader -1) and keeps its last ISR,
  unless unclean.leader.election.enable is true (topic or broker setting): then any alive replica;
- a fenced broker that registers again leads offline partitions whose ISR it is in; it rejoins
  other ISRs only when their leader expands them (AlterPartition) once it has caught up;
- every leader change bumps the leader epoch; every leader or ISR change bumps the partition epoch.

Separate from the operations that call for an election (kshim.controller.brokers: a broker fenced,
stopped or back; kshim.controller.reassignments: replicas changed), so the rules are in one place.
"""
from __future__ import annotations

import logging

from kshim.cluster.image import NO_LEADER, PartitionInfo
from kshim.controller.messages import Election, ElectionResult
from kshim.controller.state import ControllerState, _Topic
from kshim.controller.store import PartitionRow, PendingDeletion
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")


class Elections(ControllerState):
    # ------------------------------------------------------------------ the rules
    def _elect(self, topic: _Topic, p: PartitionRow, alive: set[int], unclean: bool = False) -> None:
        """Choose p's leader from its alive ISR (or, if allowed or `unclean`, any alive replica); -1 if none."""
        in_sync = [r for r in p.replicas if r in p.isr and r in alive]
        if len(in_sync) > 1 and self._effective(topic)["kshim.commit.quorum"] == "majority":
            # a majority, not the whole ISR, may hold a COMMITTED record: elect the in-sync replica
            # with the longest log (assignment order breaks ties). When a leader dies its followers'
            # logs stop growing, and their heartbeats report the final offsets long before the
            # session timeout fences it.
            in_sync.sort(key=lambda r: -self.replica_log_ends.get((r, topic.name, p.index), -1))
        leader = in_sync[0] if in_sync else NO_LEADER
        if leader == NO_LEADER and (unclean or self._effective(topic)["unclean.leader.election.enable"]):
            anyone = [r for r in p.replicas if r in alive]
            if anyone:
                leader = anyone[0]
                p.isr = [leader]
                log.warning("unclean election: %s-%d led by out-of-sync replica %d", topic.name, p.index, leader)
        if leader != p.leader:
            p.leader = leader
            p.leader_epoch += 1
            self._elected.append(f"{topic.name}-{p.index}: leader {leader}, epoch {p.leader_epoch}, isr {p.isr}")

    def _elect_offline(self) -> None:
        alive = self._alive()
        for topic in self._topics.values():
            changed = []
            for p in topic.partitions:
                if p.leader in alive:
                    continue
                if not any(r in alive for r in p.isr) and not self._effective(topic)["unclean.leader.election.enable"]:
                    continue  # no one to elect: a cleanly stopped last in-sync leader stays, its return no election
                before = p.leader_epoch
                self._elect(topic, p, alive)
                if p.leader_epoch != before:
                    p.partition_epoch += 1
                    changed.append(p)
            if changed:
                self.store.save_partitions(topic.name, changed)

    def _holds_the_leaders_log(self, topic: _Topic, p: PartitionRow, replica: int) -> bool:
        """Under kshim.commit.quorum=majority an ISR member may lack COMMITTED records (a majority
        holds them): move leadership only to a replica whose last reported log end reaches the
        leader's. With the whole-ISR quorum every ISR member holds them."""
        if p.leader == NO_LEADER or self._effective(topic)["kshim.commit.quorum"] != "majority":
            return True
        ends = self.replica_log_ends
        return ends.get((replica, topic.name, p.index), -1) >= ends.get((p.leader, topic.name, p.index), -1)

    # ------------------------------------------------------------------ elections asked by admins
    def elect_leaders(self, election: Election,
                      partitions: dict[str, tuple[int, ...]] | None) -> tuple[ElectionResult, ...]:
        """Kafka's ElectLeaders (ReplicationControlManager.electLeaders): each partition on its
        own, one publish for all. partitions=None: every partition, without the ones whose
        election was not needed (as Kafka answers)."""
        if partitions is None:
            targets = [(t.name, p.index) for t in self._topics.values() for p in t.partitions]
        else:
            targets = [(name, index) for name, indexes in partitions.items() for index in indexes]
        alive = self._alive()
        changed: dict[str, list[PartitionRow]] = {}
        results = []
        for name, index in targets:
            try:
                self._elect_asked(name, index, election, alive, changed)
                code, message = ErrorCode.NONE, None
            except BrokerError as e:
                code, message = e.code, e.message
            if partitions is None and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            results.append(ElectionResult(name, index, int(code), message))
        for name, rows in changed.items():
            self.store.save_partitions(name, rows)
        if changed:
            self._publish()
        return tuple(results)

    def _elect_asked(self, name: str, index: int, election: Election, alive: set[int],
                     changed: dict[str, list[PartitionRow]]) -> None:
        topic = self._topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no such topic as {name}")
        if not 0 <= index < len(topic.partitions):
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no such partition as {name}-{index}")
        p = topic.partitions[index]
        preferred = p.replicas[0]
        if election is Election.PREFERRED:
            if p.leader == preferred:
                raise BrokerError(ErrorCode.ELECTION_NOT_NEEDED, f"{name}-{index} is led by its preferred replica")
            if preferred not in p.isr or preferred not in alive or not self._holds_the_leaders_log(topic, p, preferred):
                raise BrokerError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                  f"preferred replica {preferred} of {name}-{index} is not alive and in sync")
            p.leader = preferred
            p.leader_epoch += 1
            log.info("%s-%d: preferred leader %d elected, epoch %d", name, index, preferred, p.leader_epoch)
        else:
            if p.leader != NO_LEADER:
                raise BrokerError(ErrorCode.ELECTION_NOT_NEEDED, f"{name}-{index} has a leader ({p.leader})")
            self._elect(topic, p, alive, unclean=True)
            if p.leader == NO_LEADER:
                raise BrokerError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                  f"no replica of {name}-{index} is alive")
        p.partition_epoch += 1
        changed.setdefault(name, []).append(p)

    # ------------------------------------------------------------------ ISR changes from leaders
    def alter_partition(self, node_id: int, broker_epoch: int, topic: str, index: int, leader_epoch: int,
                        partition_epoch: int, new_isr: tuple[int, ...]) -> PartitionInfo:
        """A leader shrinks or expands its ISR (Kafka's AlterPartition). Stale requests are fenced."""
        broker = self._brokers.get(node_id)
        if broker is None or broker.info.epoch != broker_epoch or not broker.info.alive:
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH, f"broker {node_id} epoch {broker_epoch} is not current")
        t = self._topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{index}")
        p = t.partitions[index]
        if p.leader != node_id:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {node_id} does not lead {topic}-{index}")
        if leader_epoch != p.leader_epoch:
            raise BrokerError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {leader_epoch} is not {p.leader_epoch}")
        if partition_epoch != p.partition_epoch:
            raise BrokerError(ErrorCode.INVALID_UPDATE_VERSION,
                              f"partition epoch {partition_epoch} is not {p.partition_epoch}")
        alive = self._alive()
        if node_id not in new_isr or any(r not in p.replicas for r in new_isr):
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"ISR {new_isr} must hold the leader and only replicas")
        added = [r for r in new_isr if r not in p.isr]
        if any(r not in alive for r in added):
            raise BrokerError(ErrorCode.INELIGIBLE_REPLICA, f"cannot add fenced replicas {added} to the ISR")
        p.isr = [r for r in p.replicas if r in new_isr]
        p.partition_epoch += 1
        log.info("%s-%d: isr %s (partition epoch %d)", topic, index, p.isr, p.partition_epoch)
        deletions = self._complete_reassignment(t, p, alive)  # the ISR may now hold every target replica
        self.store.save_partitions(topic, [p], deletions)
        self._note_deletions(deletions)
        self._publish()
        # (if the reassignment moved leadership away, the asking broker has applied that image
        # too: Kafka answers NEW_LEADER_ELECTED, kshim the new state)
        return self.image.topics[topic].partitions[index]

    def _complete_reassignment(self, topic: _Topic, p: PartitionRow, alive: set[int]) -> list[PendingDeletion]:
        """After an ISR change: the reassignment it completes, if any (kshim.controller.reassignments)."""
        raise NotImplementedError
