"""The controller's logic: topic admin, partition assignment, leader election, ISR changes,
broker liveness, and publishing metadata images.

One controller for a one-machine cluster, and no pretend consensus: its state is a SQLite file,
and every change is written there before it is published. Brokers learn of changes through their
heartbeat long-poll (or, in a single-process broker, through a direct callback).

Election rules (Kafka's, KRaft flavour):
- a partition's leader is the first replica (in assignment order) that is in the ISR and alive;
- when a broker is fenced (missed heartbeats for the session timeout), it leaves the ISR of every
  partition where others remain, and partitions it led get a new leader from the remaining ISR;
  if no in-sync replica is alive the partition goes offline (leader -1) and keeps its last ISR,
  unless unclean.leader.election.enable is true (topic or broker setting): then any alive replica;
- a fenced broker that registers again leads offline partitions whose ISR it is in; it rejoins
  other ISRs only when their leader expands them (AlterPartition) once it has caught up;
- every leader change bumps the leader epoch; every leader or ISR change bumps the partition epoch.

Reassignments (KIP-455, Kafka's ReplicationControlManager and PartitionReassignmentReplicas):
- AlterPartitionReassignments sets a partition's replicas to the target followed by the replicas
  being removed, and records which are being added and removed; the brokers of the adding ones
  open an empty replica from that image and fetch from the leader like any follower, and the
  leader takes each into the ISR once it has caught up (AlterPartition);
- the reassignment completes in the change that puts every target replica in the ISR: the
  removing replicas leave the replica set and the ISR, the leader stays if it is a target
  replica in the ISR and alive, else the first such target replica leads (Kafka's online
  election); the leader epoch is bumped when replicas are removed. Each broker that no longer
  has its replica in the image deletes it (kshim.replica.manager), at once or when it returns;
- cancelling (null replicas) reverts to the original replicas: the adding ones leave the replica
  set and ISR; if only adding replicas were in sync, the revert needs an unclean election and is
  refused unless the topic allows one.
"""
from __future__ import annotations

import logging
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable

import anyio

from kshim.clock import SYSTEM, Clock
from kshim.security.acls import AclBinding, AclFilter, InvalidAcl, validate_binding
from kshim.cluster.image import (
    DEFAULT_FEATURES, INTERNAL_TOPICS, METADATA_VERSION, NO_LEADER, SUPPORTED_FEATURES, TRANSACTION_VERSION, BrokerInfo,
    ClientQuota, MetadataImage, PartitionInfo, QuotaEntityPart, ScramEntry, TopicInfo)
from kshim.configs import client_metrics
from kshim.configs import BrokerLevel, TopicConfig, check_values, quotas, resolve, validate, validate_broker
from kshim.configs.groups import check_group_names
from kshim.controller.messages import (
    DeletedAcls, Election, ElectionResult, FeatureUpdate, FeatureUpgrade, OngoingReassignment, QuorumReplica,
    QuorumState, QuotaAlteration, QuotaAlterationResult, Reassignment, ReassignmentResult, ScramDeletion, ScramResult)
from kshim.controller.store import (
    STOPPED_PID, BrokerRow, MetadataStore, PartitionRow, PendingDeletion, TopicRecord)
from kshim.broadcast import Signal
from kshim.errors import BrokerError, check_topic_name
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")

# each partition replica is a directory with open files on every broker hosting it: one request
# must not be able to ask for millions (Kafka's controller caps one operation at 10,000 records)
MAX_PARTITIONS_PER_TOPIC = 10_000
VERSION_RANGE = 1_000_000  # image versions a controller reserves on disk at a time
MAX_PRODUCER_ID_BLOCK = 1_000_000  # ids a broker may reserve at once (it asks for 1000, as Kafka does)
MAX_ACLS = 100_000  # every image carries every binding to every broker: bound them


@dataclass
class _Broker:
    info: BrokerInfo
    last_heartbeat_ms: int = 0
    image_version: int = -1  # the last image version it reported having (DescribeQuorum's observers)
    caught_up_ms: int = -1  # when it last reported the controller's latest version


@dataclass
class _Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[PartitionRow] = field(default_factory=list)


@dataclass
class ControllerConfig:
    node_id: int = 0  # reported as controller id
    session_timeout_ms: int = 9000
    default_partitions: int = 1
    default_replication_factor: int = 1
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker-level topic config defaults
    # partition replicas a broker may host (descriptors): past it CreateTopics/CreatePartitions fail
    max_partitions_per_broker: int = 10_000
    # `serve --transaction-version`: finalized at start, over what the data dir stored (None: keep it)
    transaction_version: int | None = None


class Controller:
    def __init__(self, store: MetadataStore, config: ControllerConfig, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.store = store
        self.config = config
        self._elected: list[str] = []  # leaders elected since the last publish, logged with it
        self.cluster_id = store.cluster_value("cluster_id", _new_cluster_id())
        # versions must keep increasing across controller restarts (brokers ignore older images):
        # each controller reserves a range of versions on disk, and starts past the last range
        # reserved (and no lower than the wall clock in milliseconds, as data dirs from before did)
        self.version = store.reserve("image_version", VERSION_RANGE, at_least=self.clock.wall_ms())
        self._version_limit = self.version + VERSION_RANGE
        self._brokers: dict[int, _Broker] = {}
        self._topics: dict[str, _Topic] = {}
        self._changed = Signal()
        # log end offsets the brokers report in their heartbeats: (node, topic, partition) -> offset
        self.replica_log_ends: dict[tuple[int, str, int], int] = {}
        self.listeners: list[Callable[[MetadataImage], None]] = []
        now = self.clock.wall_ms()
        for row in store.load_brokers():
            # until a broker has had a full session timeout to re-register, it counts as alive:
            # a restarted controller must not fence a cluster that is running fine
            # (but one that stopped cleanly, STOPPED_PID, is known to be down: no fencing at its return)
            self._brokers[row.node_id] = _Broker(BrokerInfo(row.node_id, row.host, row.port, row.epoch,
                                                            row.pid != STOPPED_PID, False, row.pid), now)
        for record in store.load_topics():
            rows = record.partition_states or [
                # a data dir from before partition state was stored: single broker, node 0
                PartitionRow(i, [0], 0, 0, [0]) for i in range(record.partitions)]
            self._topics[record.name] = _Topic(record.name, record.topic_id, record.configs, rows)
        self._broker_configs = store.load_broker_configs()
        self._group_configs = store.load_group_configs()
        # each start of the controller is a new "election" of the quorum of one (DescribeQuorum's epoch)
        self.epoch = store.reserve("controller_epoch", 1) + 1
        stored = store.load_features() or {}
        self._features = {name: level for name, level in {**DEFAULT_FEATURES, **stored}.items()
                          if level > 0 and name in SUPPORTED_FEATURES}
        self._features[METADATA_VERSION] = DEFAULT_FEATURES[METADATA_VERSION]  # kshim has one level
        self._features_epoch = int(store.cluster_value("features_epoch", str(self.version)))
        wanted = config.transaction_version
        if wanted is not None and self._features.get(TRANSACTION_VERSION, 0) != wanted:
            self._features = {**self._features, TRANSACTION_VERSION: wanted}
            self._features = {name: level for name, level in self._features.items() if level > 0}
            self._features_epoch = self.version
            store.save_features({name: self._features.get(name, 0) for name in SUPPORTED_FEATURES},
                                self._features_epoch)
        self._acls: dict[AclBinding, None] = dict.fromkeys(store.load_acls())  # ordered set
        self._scram = {(e.user, e.mechanism): e for e in store.load_scram()}
        self._quotas: dict[quotas.Entity, dict[str, float]] = {
            tuple(QuotaEntityPart(t, n) for t, n in entity): values
            for entity, values in store.load_client_quotas().items()}
        # replicas removed from brokers that have not applied the image removing them yet, by node
        self._deletions: dict[int, dict[tuple[uuid.UUID, int], PendingDeletion]] = {}
        for d in store.load_pending_deletions():
            self._deletions.setdefault(d.node, {})[(d.topic_id, d.index)] = d
        self._client_metrics = store.load_client_metrics()
        self.image = self._build_image()

    # ------------------------------------------------------------------ publishing
    def _build_image(self) -> MetadataImage:
        topics = {
            t.name: TopicInfo(t.name, t.topic_id, dict(t.configs), tuple(
                PartitionInfo(p.index, tuple(p.replicas), p.leader, p.leader_epoch, tuple(p.isr), p.partition_epoch,
                              tuple(p.adding), tuple(p.removing))
                for p in t.partitions))
            for t in self._topics.values()
        }
        brokers = {b.info.node_id: b.info for b in self._brokers.values()}
        broker_configs = {resource: dict(configs) for resource, configs in self._broker_configs.items()}
        client_quotas = tuple(ClientQuota(entity, dict(values)) for entity, values in self._quotas.items())
        return MetadataImage(self.version, self.cluster_id, self.config.node_id, brokers, topics, broker_configs,
                             dict(self._features), self._features_epoch, tuple(self._acls),
                             tuple(self._scram[key] for key in sorted(self._scram)), client_quotas,
                             {name: dict(configs) for name, configs in self._client_metrics.items()},
                             {group: dict(configs) for group, configs in self._group_configs.items()})

    def _publish(self) -> None:
        _log_elections(self._elected)
        self._elected = []
        self.version += 1
        if self.version >= self._version_limit:
            self.version = self.store.reserve("image_version", VERSION_RANGE, at_least=self.version)
            self._version_limit = self.version + VERSION_RANGE
        self.image = self._build_image()
        self._changed.fire()
        for listener in self.listeners:
            listener(self.image)

    async def wait_for_change(self, known_version: int, timeout_s: float) -> MetadataImage | None:
        """The image once its version passes `known_version`, or None at the timeout."""
        with anyio.move_on_after(timeout_s):
            while self.version <= known_version:
                await self._changed.wait()
            return self.image
        return None

    # ------------------------------------------------------------------ brokers
    def register_broker(self, node_id: int, host: str, port: int, pid: int = 0) -> int:
        """A broker (re)starts: returns its new epoch. Unfences it and elects it where that helps."""
        previous = self._brokers.get(node_id)
        if previous is not None and previous.info.alive:
            # a new incarnation while the old one still counted as alive (killed and restarted
            # within the session timeout): fence the old one first, so its leaderships move to
            # in-sync replicas and the new process rejoins as a follower, truncating like any other.
            # One image for both steps (published below): the restarted broker opens its replicas
            # once, as the leader or follower it ends up, in its open threads (an image of the
            # fence alone opened them leaderless, and the next one then wrote a new leader epoch
            # per partition on its event loop: 25 s at 10,000 partitions)
            self.fence(node_id, reason="restarted", publish=False)
        epoch = previous.info.epoch + 1 if previous else self.store.unregistered_epoch(node_id) + 1
        isolated = previous.info.isolated if previous else False
        info = BrokerInfo(node_id, host, port, epoch, True, isolated, pid)
        self._brokers[node_id] = _Broker(info, self.clock.wall_ms())
        self.store.save_broker(BrokerRow(node_id, host, port, epoch, pid))
        log.info("broker %d registered (epoch %d, %s:%d)", node_id, epoch, host, port)
        self._elect_offline()
        self._publish()
        return epoch

    def shutdown_broker(self, node_id: int, broker_epoch: int) -> None:
        """A broker stops cleanly (Kafka's controlled shutdown): it is marked down at once, without a
        warning, and remembered so (a restarted controller does not wait a session for it, nor fences
        it when it returns); it leaves the ISR of every partition where another in-sync replica is
        alive (which leads, if it led), as Kafka's controller removes a broker in controlled shutdown
        from the ISRs: the others commit without it meanwhile, and a stopped replica, missing what
        they wrote, is never elected over them. Where it is the last alive in-sync replica it stays
        leader and in the ISR (offline until it returns, as with leader -1, but its return is no
        election)."""
        if self._stop_broker(node_id, broker_epoch):
            self._publish()

    def shutdown_local_broker(self, node_id: int, broker_epoch: int) -> None:
        """shutdown_broker for a standalone broker's own stop, the controller closing right after:
        the same record kept, no image published (no one is left to read it; building one is
        0.2 ms per partition)."""
        self._stop_broker(node_id, broker_epoch)

    def _stop_broker(self, node_id: int, broker_epoch: int) -> bool:
        """shutdown_broker's changes, unpublished; whether there were any."""
        broker = self._brokers.get(node_id)
        if broker is None or broker.info.epoch != broker_epoch or not broker.info.alive:
            return False  # an old incarnation's, or already down: nothing to do
        broker.info = replace(broker.info, alive=False)
        info = broker.info
        self.store.save_broker(BrokerRow(node_id, info.host, info.port, info.epoch, STOPPED_PID))
        log.info("broker %d stopped (controlled shutdown)", node_id)
        alive = self._alive()
        for topic in self._topics.values():
            changed = []
            for p in topic.partitions:
                if node_id in p.isr and any(r in alive for r in p.isr if r != node_id):
                    p.isr = [r for r in p.isr if r != node_id]
                    if p.leader == node_id:
                        self._elect(topic, p, alive)
                    p.partition_epoch += 1
                    changed.append(p)
            if changed:
                self.store.save_partitions(topic.name, changed)
        return True

    def update_address(self, node_id: int, host: str, port: int) -> None:
        """The same incarnation now listens elsewhere (a standalone broker bound --port 0)."""
        broker = self._brokers[node_id]
        broker.info = replace(broker.info, host=host, port=port)
        self.store.save_broker(BrokerRow(node_id, host, port, broker.info.epoch, broker.info.pid))
        self._publish()

    def heartbeat(self, node_id: int, epoch: int) -> None:
        broker = self._brokers.get(node_id)
        if broker is None or broker.info.epoch != epoch:
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH, f"broker {node_id} epoch {epoch} is not current")
        broker.last_heartbeat_ms = self.clock.wall_ms()
        if not broker.info.alive:
            # a paused broker that resumes in time for nothing: it was fenced; it must re-register
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH, f"broker {node_id} was fenced; register again")

    def fence_expired(self, now: int | None = None) -> list[int]:
        """Fence brokers whose last heartbeat is older than the session timeout."""
        now = self.clock.wall_ms() if now is None else now
        expired = [b.info.node_id for b in self._brokers.values()
                   if b.info.alive and now - b.last_heartbeat_ms > self.config.session_timeout_ms]
        for node_id in expired:
            self.fence(node_id)
        return expired

    def fence(self, node_id: int, reason: str = "", publish: bool = True) -> None:
        broker = self._brokers[node_id]
        if not broker.info.alive:
            return
        broker.info = replace(broker.info, alive=False)
        log.warning("broker %d fenced: %s", node_id,
                    reason or f"no heartbeat for {self.config.session_timeout_ms} ms")
        alive = self._alive()
        for topic in self._topics.values():
            changed = []
            for p in topic.partitions:
                if node_id not in p.replicas:
                    continue
                old = (p.leader, tuple(p.isr))
                if node_id in p.isr and len(p.isr) > 1:
                    p.isr = [r for r in p.isr if r != node_id]
                if p.leader == node_id:
                    self._elect(topic, p, alive)
                if (p.leader, tuple(p.isr)) != old:
                    p.partition_epoch += 1
                    changed.append(p)
            if changed:
                self.store.save_partitions(topic.name, changed)
        if publish:
            self._publish()

    def unregister_broker(self, node_id: int) -> None:
        """Kafka's UnregisterBroker, for a broker that is gone for good: it leaves every ISR it is
        in (partitions it led elect another leader, as when it is fenced) and its registration is
        forgotten; it stays in the replica lists (offline) until they are reassigned. If it comes
        back it registers anew, with a higher epoch."""
        broker = self._brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {node_id} is not currently registered")
        self.fence(node_id, reason="unregistered")  # publishes the leader and ISR changes
        self.store.delete_broker(node_id, broker.info.epoch)
        del self._brokers[node_id]
        for key in [k for k in self.replica_log_ends if k[0] == node_id]:
            del self.replica_log_ends[key]
        gone = self._deletions.pop(node_id, {})
        if gone:  # it will never report having deleted them
            self.store.forget_deletions(list(gone.values()))
        log.warning("broker %d unregistered", node_id)
        self._publish()

    def set_isolated(self, node_id: int, isolated: bool) -> None:
        broker = self._brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node_id}")
        broker.info = replace(broker.info, isolated=isolated)
        self._publish()

    def report_log_ends(self, node_id: int, log_ends: dict[tuple[str, int], int]) -> None:
        """What a broker's replicas hold, from its heartbeat (used to elect under majority quorum)."""
        for (topic, index), offset in log_ends.items():
            self.replica_log_ends[(node_id, topic, index)] = offset

    def report_image_version(self, node_id: int, version: int) -> None:
        """The image version a broker has applied (from its heartbeat, or at once in-process)."""
        broker = self._brokers.get(node_id)
        if broker is not None:
            broker.image_version = version
            if version >= self.version:
                broker.caught_up_ms = self.clock.wall_ms()
            pending = self._deletions.get(node_id)
            if pending and broker.info.alive:
                # it applied the image that removed them: its replica manager deleted them
                done = [d for d in pending.values() if d.version <= version]
                if done:
                    self.store.forget_deletions(done)
                    for d in done:
                        del pending[(d.topic_id, d.index)]
                        log.info("broker %d deleted its replica of %s-%d", node_id, d.topic, d.index)

    def pending_deletions(self) -> list[PendingDeletion]:
        """Replicas removed from brokers that have not yet applied the image removing them
        (`kshim ctl status` shows them as deleting): a broker that is down deletes them when it returns."""
        return sorted((d for pending in self._deletions.values() for d in pending.values()),
                      key=lambda d: (d.topic, d.index, d.node))

    def _deletions_of(self, topic: _Topic, index: int, nodes: list[int]) -> list[PendingDeletion]:
        """The pending deletions of `nodes`' replicas of topic-index, by the next image."""
        return [PendingDeletion(topic.name, topic.topic_id, index, node, self.version + 1) for node in nodes]

    def _note_deletions(self, deletions: list[PendingDeletion]) -> None:
        for d in deletions:
            self._deletions.setdefault(d.node, {})[(d.topic_id, d.index)] = d

    def _forget_deletions(self, topic: _Topic, index: int, nodes: list[int]) -> list[PendingDeletion]:
        """Replicas assigned again before their broker removed them: nothing to delete."""
        return [self._deletions[n].pop((topic.topic_id, index)) for n in nodes
                if (topic.topic_id, index) in self._deletions.get(n, {})]

    # ------------------------------------------------------------------ the quorum and features
    def describe_quorum(self) -> QuorumState:
        """The controller as a quorum of one voter (its log is the image versions) and the
        registered brokers as observers, with the last image version each reported."""
        now = self.clock.wall_ms()
        me = QuorumReplica(self.config.node_id, self.version, now, now)
        observers = tuple(QuorumReplica(b.info.node_id, b.image_version, b.last_heartbeat_ms, b.caught_up_ms)
                          for b in sorted(self._brokers.values(), key=lambda b: b.info.node_id) if b.info.alive)
        return QuorumState(self.config.node_id, self.epoch, self.version, (me,), observers)

    def update_features(self, updates: tuple[FeatureUpdate, ...], validate_only: bool = False) -> None:
        """Kafka's UpdateFeatures (FeatureControlManager): every update is checked, the first bad
        one is the answer (INVALID_UPDATE_VERSION) and nothing changes; else all are finalized."""
        levels = dict(self._features)
        for u in updates:
            self._check_feature_update(u, levels.get(u.name, 0))
            levels[u.name] = u.level
        if validate_only:
            return
        levels = {name: level for name, level in levels.items() if level > 0}
        if levels == self._features:
            return
        epoch = self.version + 1  # the image that carries them
        self.store.save_features({name: levels.get(name, 0) for name in SUPPORTED_FEATURES}, epoch)
        self._features, self._features_epoch = levels, epoch
        log.info("finalized features: %s (epoch %d)", levels, epoch)
        self._publish()

    @staticmethod
    def _check_feature_update(u: FeatureUpdate, current: int) -> None:
        def invalid(reason: str) -> BrokerError:
            return BrokerError(ErrorCode.INVALID_UPDATE_VERSION,
                               f"invalid update version {u.level} for feature {u.name}: {reason}")

        if u.level < 0:
            raise invalid("a feature version cannot be less than 0")
        supported = SUPPORTED_FEATURES.get(u.name)
        if supported is None:
            if u.level != 0:
                raise invalid("kshim does not support this feature")
        elif not supported[0] <= u.level <= supported[1] and not (u.level == 0 and supported[0] == 0):
            raise invalid(f"kshim supports versions {supported[0]} to {supported[1]}")
        if u.level < current and u.upgrade is FeatureUpgrade.UPGRADE:
            raise invalid("can't downgrade the version of this feature without setting the upgrade type to "
                          "either safe or unsafe downgrade")
        if u.level > current and u.upgrade is not FeatureUpgrade.UPGRADE:
            raise invalid("can't downgrade to a newer version")

    def _alive(self) -> set[int]:
        return {b.info.node_id for b in self._brokers.values() if b.info.alive}

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

    def _holds_the_leaders_log(self, topic: _Topic, p: PartitionRow, replica: int) -> bool:
        """Under kshim.commit.quorum=majority an ISR member may lack COMMITTED records (a majority
        holds them): move leadership only to a replica whose last reported log end reaches the
        leader's. With the whole-ISR quorum every ISR member holds them."""
        if p.leader == NO_LEADER or self._effective(topic)["kshim.commit.quorum"] != "majority":
            return True
        ends = self.replica_log_ends
        return ends.get((replica, topic.name, p.index), -1) >= ends.get((p.leader, topic.name, p.index), -1)

    def _effective(self, topic: _Topic) -> TopicConfig:
        # the cluster-wide dynamic defaults, not one broker's: an election is the cluster's decision
        return resolve(topic.configs, self._broker_level())

    def _broker_level(self) -> BrokerLevel:
        return BrokerLevel.of(self.config.topic_defaults, self._broker_configs)

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

    # ------------------------------------------------------------------ reassignments (KIP-455)
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
        return self._complete_reassignment(topic, p, alive)

    def _complete_reassignment(self, topic: _Topic, p: PartitionRow, alive: set[int]) -> list[PendingDeletion]:
        """Finish p's reassignment if every target replica is in the ISR (Kafka's
        maybeCompleteReassignment): the removing replicas leave; the replicas to delete."""
        if not p.adding and not p.removing:
            return []
        replicas = [r for r in p.replicas if r not in p.removing]
        isr = [r for r in p.isr if r not in p.removing]
        if not isr or not replicas or any(r not in isr for r in replicas):
            return []
        removed = [r for r in p.replicas if r in p.removing]
        p.replicas, p.isr, p.adding, p.removing = replicas, [r for r in replicas if r in isr], [], []
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

    # ------------------------------------------------------------------ topic admin
    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str | None] | None = None, *, validate_only: bool = False) -> TopicInfo | None:
        check_topic_name(name)
        if name in self._topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        # configs before the upper bounds below: CreateTopics has always answered INVALID_CONFIG first
        clean = validate(configs or {})
        check_values(resolve(clean, self._broker_level()))
        count = self.config.default_partitions if partitions in (None, -1) else partitions
        if not 1 <= count <= MAX_PARTITIONS_PER_TOPIC:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {count}")
        rf = self.config.default_replication_factor if replication_factor in (None, -1) else replication_factor
        alive = sorted(self._alive())
        if rf < 1 or rf > len(alive):
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"replication factor {rf} must be between 1 and the number of live brokers "
                              f"in the cluster ({len(alive)})")
        rows = _assign(count, rf, alive)
        self._check_budget(name, rows)
        if validate_only:
            return None
        record = TopicRecord(name, uuid.uuid4(), count, self.clock.wall_ms(), clean, rows)
        self.store.create_topic(record)
        self._topics[name] = _Topic(name, record.topic_id, clean, rows)
        log.info("created topic %s: %d partition(s), replication factor %d", name, count, rf)
        self._publish()
        return self.image.topics[name]

    def delete_topic(self, name: str) -> uuid.UUID:
        topic = self._topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        deletions = [d for p in topic.partitions for d in self._deletions_of(topic, p.index, p.replicas)]
        self.store.delete_topic(name, deletions)
        del self._topics[name]
        self._note_deletions(deletions)
        log.info("deleted topic %s", name)
        self._publish()
        return topic.topic_id

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                          assignments: tuple[tuple[int, ...], ...] | None = None) -> None:
        topic = self._topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if total > MAX_PARTITIONS_PER_TOPIC:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"a topic may have at most {MAX_PARTITIONS_PER_TOPIC} partitions, asked for {total}")
        if total <= len(topic.partitions):
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} has {len(topic.partitions)} partitions; the new count must be larger")
        first = topic.partitions[0]
        rf = len(first.replicas) - len(first.removing)  # the target's, if it is being reassigned
        alive = sorted(self._alive())
        adding = total - len(topic.partitions)
        if assignments is None:
            if rf > len(alive):
                raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                  f"replication factor {rf} exceeds the live brokers ({len(alive)})")
            new = _assign(adding, rf, alive, first_index=len(topic.partitions))
        else:
            new = self._manual_assignment(topic, assignments, adding, rf, set(alive))
        self._check_budget(name, new)
        if validate_only:
            return
        self.store.set_partition_count(name, total)
        self.store.save_partitions(name, new)
        topic.partitions += new
        self._publish()

    def _manual_assignment(self, topic: _Topic, assignments: tuple[tuple[int, ...], ...], adding: int, rf: int,
                           alive: set[int]) -> list[PartitionRow]:
        """The new partitions as the request places them, checked as Kafka's controller does
        (INVALID_REPLICA_ASSIGNMENT): one assignment per new partition, each of the topic's
        replication factor, no broker twice, only registered brokers, and one of them unfenced
        (it leads; the fenced ones join the ISR once they catch up)."""
        def bad(message: str) -> BrokerError:
            return BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

        if len(assignments) != adding:
            raise bad(f"attempted to add {adding} additional partition(s), but {len(assignments)} "
                      f"assignment(s) were given")
        rows = []
        for i, replicas in enumerate(assignments, start=len(topic.partitions)):
            if not replicas:
                raise bad(f"the assignment of partition {i} has no replicas")
            if len(set(replicas)) != len(replicas):
                raise bad(f"the assignment of partition {i} names a broker twice: {list(replicas)}")
            unknown = [r for r in replicas if r not in self._brokers]
            if unknown:
                raise bad(f"the assignment of partition {i} includes broker {unknown[0]}, but no such broker is "
                          f"registered")
            if len(replicas) != rf:
                raise bad(f"the assignment of partition {i} has {len(replicas)} replica(s), but the topic's "
                          f"partitions have {rf}")
            isr = [r for r in replicas if r in alive]
            if not isr:
                raise bad(f"every broker of the assignment of partition {i} is fenced")
            rows.append(PartitionRow(i, list(replicas), isr[0], 0, isr))
        return rows

    def set_topic_configs(self, name: str, configs: dict[str, str | None], *, validate_only: bool = False) -> None:
        """Replace a topic's overrides (the caller computed the full set)."""
        topic = self._topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        clean = validate(configs)
        check_values(resolve(clean, self._broker_level()))
        if validate_only:
            return
        self.store.replace_configs(name, clean)
        topic.configs = clean
        self._publish()

    def _check_budget(self, name: str, rows: list[PartitionRow]) -> None:
        """POLICY_VIOLATION if `rows` would put a broker past max_partitions_per_broker (the
        internal topics are always created: the coordinators need them)."""
        if name in INTERNAL_TOPICS:
            return
        hosted: Counter[int] = Counter(b for t in self._topics.values() for p in t.partitions for b in p.replicas)
        adding = Counter(b for p in rows for b in p.replicas)
        limit = self.config.max_partitions_per_broker
        for broker, n in sorted(adding.items()):
            if hosted[broker] + n > limit:
                raise BrokerError(ErrorCode.POLICY_VIOLATION,
                                  f"broker {broker} hosts {hosted[broker]} partition replicas; {n} more would pass its "
                                  f"limit of {limit} (kshim serve --max-partitions-per-broker; it follows the "
                                  f"open-file limit)")

    def set_broker_configs(self, resource: str, configs: dict[str, str | None], *,
                           validate_only: bool = False) -> None:
        """Replace the dynamic settings of one broker (resource = its node id) or of the
        cluster-wide default (resource ""); the caller computed the full set."""
        if resource != "" and (not resource.isdigit() or int(resource) not in self._brokers):
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"no broker {resource!r} in the cluster")
        clean = validate_broker(configs)
        if validate_only:
            return
        self.store.replace_broker_configs(resource, clean)
        if clean:
            self._broker_configs[resource] = clean
        else:
            self._broker_configs.pop(resource, None)
        log.info("dynamic broker configs of %s: %s", repr(resource) if resource else "the cluster default", clean)
        self._publish()

    def set_group_configs(self, group: str, configs: dict[str, str | None], *, validate_only: bool = False) -> None:
        """Replace a group's config overrides (GROUP resource); the broker computed the full set and
        checked it against its group settings' bounds, the controller checks names and types."""
        if not group:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group id")
        clean = check_group_names(configs)
        if validate_only:
            return
        if clean == self._group_configs.get(group, {}):
            return
        self.store.replace_group_configs(group, clean)
        if clean:
            self._group_configs[group] = clean
        else:
            self._group_configs.pop(group, None)
        log.info("group configs of %r: %s", group, clean)
        self._publish()

    def set_client_metrics(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace a client-metrics subscription's configs (Kafka's CLIENT_METRICS resource); an
        empty set removes it."""
        client_metrics.parse(name, configs)  # raises BrokerError as Kafka's validation
        if validate_only:
            return
        self.store.replace_client_metrics(name, dict(configs))
        if configs:
            self._client_metrics[name] = dict(configs)
        elif self._client_metrics.pop(name, None) is None:
            return
        log.info("client-metrics subscription %r: %s", name, configs or "removed")
        self._publish()

    # ------------------------------------------------------------------ ACLs
    def create_acls(self, acls: tuple[AclBinding, ...]) -> None:
        try:
            for acl in acls:
                validate_binding(acl)
        except InvalidAcl as e:
            raise BrokerError(ErrorCode.INVALID_REQUEST, str(e)) from None
        new = [a for a in dict.fromkeys(acls) if a not in self._acls]
        if not new:
            return
        if len(self._acls) + len(new) > MAX_ACLS:
            raise BrokerError(ErrorCode.POLICY_VIOLATION,
                              f"the cluster holds {len(self._acls)} ACLs; {len(new)} more would pass its limit of {MAX_ACLS}")
        self.store.change_acls(new, [])
        self._acls.update(dict.fromkeys(new))
        log.info("created %d ACL(s)", len(new))
        self._publish()

    def delete_acls(self, filters: tuple[AclFilter, ...]) -> tuple[DeletedAcls, ...]:
        matched = tuple(DeletedAcls(tuple(a for a in self._acls if f.matches(a))) for f in filters)
        gone = list(dict.fromkeys(a for m in matched for a in m.acls))
        if gone:
            self.store.change_acls([], gone)
            for acl in gone:
                del self._acls[acl]
            log.info("deleted %d ACL(s)", len(gone))
            self._publish()
        return matched

    def alter_scram_credentials(self, deletions: tuple[ScramDeletion, ...],
                                upsertions: tuple[ScramEntry, ...]) -> tuple[ScramResult, ...]:
        """Kafka's ScramControlManager: a user named twice in one request is DUPLICATE_RESOURCE, a
        deletion of a credential that does not exist RESOURCE_NOT_FOUND; each user's alterations
        apply or fail together (the broker checked mechanisms and iterations)."""
        named = Counter([d.user for d in deletions] + [u.user for u in upsertions])
        results: dict[str, ScramResult] = {}
        delete: list[tuple[str, str]] = []
        upsert: list[ScramEntry] = []
        for user, count in named.items():
            if count > 1:
                results[user] = ScramResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                            "A user credential cannot be altered twice in the same request")
        for d in deletions:
            if d.user in results:
                continue
            if (d.user, d.mechanism) not in self._scram:
                results[d.user] = ScramResult(d.user, ErrorCode.RESOURCE_NOT_FOUND,
                                              "Attempt to delete a user credential that does not exist")
                continue
            delete.append((d.user, d.mechanism))
            results[d.user] = ScramResult(d.user, ErrorCode.NONE, None)
        for u in upsertions:
            if u.user not in results:
                upsert.append(u)
                results[u.user] = ScramResult(u.user, ErrorCode.NONE, None)
        if delete or upsert:
            self.store.alter_scram(delete, upsert)  # the store first: memory changes only once it is written
            for key in delete:
                self._scram.pop(key, None)
            for entry in upsert:
                self._scram[(entry.user, entry.mechanism)] = entry
            log.info("SCRAM credentials: %d set, %d deleted", len(upsert), len(delete))
            self._publish()
        return tuple(results[user] for user in named)

    def alter_client_quotas(self, alterations: tuple[QuotaAlteration, ...], *,
                            validate_only: bool = False) -> tuple[QuotaAlterationResult, ...]:
        """AlterClientQuotas: each entity is validated and changed on its own (Kafka's
        ClientQuotaControlManager); the valid ones are stored in one transaction, then published."""
        results: list[QuotaAlterationResult] = []
        changes: dict[quotas.Entity, dict[str, float]] = {}
        seen: set[quotas.Entity] = set()
        for alteration in alterations:
            try:
                entity = quotas.entity_of((p.type, p.name) for p in alteration.entity)
                if entity in seen:
                    raise BrokerError(ErrorCode.INVALID_REQUEST,
                                      f"Ignoring duplicate entity {quotas.describe_entity(entity)}")
                seen.add(entity)
                new = quotas.alter(self._quotas.get(entity, {}), entity, alteration.ops)
            except BrokerError as e:
                results.append(QuotaAlterationResult(int(e.code), e.message))
                continue
            if new != self._quotas.get(entity, {}):
                changes[entity] = new
            results.append(QuotaAlterationResult(int(ErrorCode.NONE), None))
        if changes and not validate_only:
            self.store.replace_client_quotas({tuple((p.type, p.name) for p in entity): values
                                              for entity, values in changes.items()})
            for entity, values in changes.items():
                if values:
                    self._quotas[entity] = values
                else:
                    self._quotas.pop(entity, None)
                log.info("client quotas of %s: %s", quotas.describe_entity(entity), values)
            self._publish()
        return tuple(results)

    def allocate_producer_ids(self, count: int = 1) -> int:
        """A block of `count` producer ids (KIP-730): brokers serve InitProducerId from their block."""
        if not 1 <= count <= MAX_PRODUCER_ID_BLOCK:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"a producer id block holds 1 to {MAX_PRODUCER_ID_BLOCK} ids, asked for {count}")
        return self.store.allocate_producer_ids(count)

    # ------------------------------------------------------------------ running
    async def run_session_checks(self) -> None:
        interval = max(0.05, self.config.session_timeout_ms / 4000)
        while True:
            await self.clock.sleep(interval)
            self.fence_expired()

    def close(self) -> None:
        self.store.close()


def _assign(count: int, rf: int, brokers: list[int], first_index: int = 0) -> list[PartitionRow]:
    """Round-robin replicas from a random start, as Kafka does: leaders spread over brokers."""
    n = len(brokers)
    start = random.randrange(n)
    rows = []
    for i in range(first_index, first_index + count):
        replicas = [brokers[(start + i + j) % n] for j in range(rf)]
        rows.append(PartitionRow(i, replicas, replicas[0], 0, list(replicas)))
    return rows


def _new_cluster_id() -> str:
    # Kafka cluster ids are 22-character URL-safe base64 of a UUID
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


ELECTIONS_LOGGED = 10  # elections published at once logged a line each; more: one line, the rest at debug


def _log_elections(elected: list[str]) -> None:
    """A line per election, or one for many at once (a broker of 10,000 partitions fenced and
    back: 20,000 lines were a second of its restart)."""
    many = len(elected) > ELECTIONS_LOGGED
    if many:
        log.info("%d leaders elected (%s, ...)", len(elected), "; ".join(elected[:ELECTIONS_LOGGED]))
    level = logging.DEBUG if many else logging.INFO
    for line in elected if log.isEnabledFor(level) else ():
        log.log(level, "%s", line)
