"""What the controller knows and how it tells the brokers: the registered brokers, the topics with
their partitions' states, and the cluster-wide records (configs, ACLs, SCRAM credentials, quotas,
features), loaded from the metadata store at start; the checks that read across them (the brokers
alive, a topic's effective configs, a broker's partition budget, the replicas waiting to be
deleted); and the publishing of every change as a new metadata image.

Separate from the operations (kshim.controller.brokers, elections, reassignments, topics, settings),
which all change this state, store the change and publish it: what they share is here, once, and
each of them reads as its own rules. kshim.controller.controller puts them together.
"""
from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import anyio

from kshim.clock import SYSTEM, Clock
from kshim.security.acls import AclBinding
from kshim.cluster.image import (
    DEFAULT_FEATURES, INTERNAL_TOPICS, METADATA_VERSION, SUPPORTED_FEATURES, TRANSACTION_VERSION, BrokerInfo,
    ClientQuota, MetadataImage, PartitionInfo, QuotaEntityPart, TopicInfo)
from kshim.configs import BrokerLevel, TopicConfig, quotas, resolve
from kshim.configs.broker import BYTES_PER_PARTITION
from kshim.controller.store import STOPPED_PID, MetadataStore, PartitionRow, PendingDeletion
from kshim.broadcast import Signal
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")

VERSION_RANGE = 1_000_000  # image versions a controller reserves on disk at a time


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


class ControllerState:
    """The controller's records and their publishing; the operations are its subclasses' methods."""

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

    # ------------------------------------------------------------------ checks across the state
    def _alive(self) -> set[int]:
        return {b.info.node_id for b in self._brokers.values() if b.info.alive}

    def _effective(self, topic: _Topic) -> TopicConfig:
        # the cluster-wide dynamic defaults, not one broker's: an election is the cluster's decision
        return resolve(topic.configs, self._broker_level())

    def _broker_level(self) -> BrokerLevel:
        return BrokerLevel.of(self.config.topic_defaults, self._broker_configs)

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
                                  f"limit of {limit}: a memory budget of {BYTES_PER_PARTITION >> 10} KiB per "
                                  f"partition replica (kshim serve --max-partitions-per-broker; by default half "
                                  f"the broker's memory)")

    # ------------------------------------------------------------------ replicas waiting to be deleted
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

    def close(self) -> None:
        self.store.close()


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
