"""A broker's state: the metadata image it last applied, the controller client through which
every metadata change goes, the coordinators, and the ReplicaManager that hosts its partition
replicas on disk.

Handlers call into this module; it never calls back into handlers or the server. Metadata
changes (create a topic, alter configs...) are asked of the controller, which decides and
publishes a new image; `apply_image` then has the replica manager open, reconfigure or remove
local replicas.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence, TypeVar

import anyio

from kshim.cluster.image import INTERNAL_TOPICS, MetadataImage, PartitionInfo, ScramEntry, TopicInfo
from kshim.configs import BrokerLevel
from kshim.configs.broker import BrokerConfig
from kshim.configs.groups import validate_group
from kshim.controller.messages import (
    AllocateProducerIds, AlterPartitionReassignments, AlterScramCredentials, CreatePartitions, CreateTopic, DeleteTopic,
    DescribeQuorum, Election, ElectionResult, ElectLeaders, FeatureUpdate, ListPartitionReassignments,
    OngoingReassignment, Operation, QuorumState, Reassignment, ReassignmentResult, ScramDeletion, ScramResult,
    SetBrokerConfigs, SetClientMetrics, SetGroupConfigs, SetTopicConfigs, UnregisterBroker, UpdateFeatures)
from kshim.broadcast import Signal
from kshim.errors import BrokerError, check_topic_name
from kshim.replica import ReplicaManager
from kshim.replica.cleaning import CleanerSettings
from kshim.replica.partition import Partition
from kshim.replica.producer_ids import ProducerIdManager
from kshim.security.config import SecurityConfig
from wire.errors import ErrorCode

__all__ = ["Broker", "BrokerConfig", "BrokerError", "ControllerClient", "check_topic_name"]

log = logging.getLogger("kshim")

R = TypeVar("R")

# what a controller client answers while the controller is unreachable (kshim.cluster.remote)
CONTROLLER_AWAY = (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT)

class ControllerClient(Protocol):
    """What a broker asks of the controller: `await call(CreateTopic(...))` with an operation of
    kshim.controller.messages (kshim.controller.client.ControllerClient implements it). An
    operation that publishes returns once this broker has applied an image that includes its
    effect, so a handler can answer with the new state. `alter_partition` is this broker's ISR
    proposal, under its session (node id and broker epoch)."""

    async def call(self, request: Operation[R]) -> R: ...

    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionInfo: ...

    @property
    def connected(self) -> bool:
        """Whether the controller answers now (Metadata reports no controller while it does not)."""


class Broker:
    def __init__(self, config: BrokerConfig, controller: ControllerClient) -> None:
        self.config = config
        self.node_id = config.node_id
        self.controller = controller
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.image = MetadataImage(0, "", -1)
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self.replica_manager = ReplicaManager(config.node_id, config.data_dir, config.topic_defaults, self,
                                              config.max_request_bytes, CleanerSettings(
                                                  config.log_cleaner_io_max_bytes_per_second,
                                                  config.log_cleaner_dedupe_buffer_size,
                                                  config.log_cleaner_backoff_ms, config.log_cleaner_enable),
                                              config.max_incremental_fetch_session_cache_slots,
                                              config.log_dirs, config.recover_in_background)
        self.producer_ids = ProducerIdManager(self._allocate_producer_ids)
        self._image_applied = Signal()
        self._install_lock: anyio.Lock | None = None  # made on first use, inside the event loop
        self.close_hooks: list[Callable[[], None]] = []  # run after the replicas close (a standalone controller)
        # called after each image is applied (the coordinators follow their partitions' leadership):
        # the coordinators know the broker, not the reverse
        self.image_listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ metadata images
    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id

    @property
    def cluster_size(self) -> int:
        return len(self.image.alive_brokers())

    async def install_image(self, image: MetadataImage) -> None:
        """apply_image, with the replicas the image adds opened off the event loop first; images
        are installed one at a time, in order."""
        if self._install_lock is None:
            self._install_lock = anyio.Lock()
        async with self._install_lock:
            if image.version <= self.image.version:
                return
            await self.replica_manager.prepare_image(image)
            self.apply_image(image, defer_removal=True)
            await self.replica_manager.finish_removals()

    def apply_image(self, image: MetadataImage, *, defer_removal: bool = False) -> None:
        """Bring local replicas in line with the controller's decisions (defer_removal: see
        ReplicaManager.apply_image)."""
        if image.version <= self.image.version:
            return
        self.image = image
        self.topics = dict(image.topics)
        self.topics_by_id = {t.topic_id: t for t in image.topics.values()}
        self.replica_manager.apply_image(image, defer_removal=defer_removal)
        for listener in self.image_listeners:
            listener()
        self._image_applied.fire()

    async def recover_deferred(self) -> None:
        """Recover the logs a crash left unclean (ReplicaManager.recover_deferred); as each batch
        is hosted, the image listeners and image waiters (fetchers) look again, as after an image."""
        await self.replica_manager.recover_deferred(self._replicas_added)

    def _replicas_added(self) -> None:
        for listener in self.image_listeners:
            listener()
        self._image_applied.fire()

    async def image_changed(self) -> None:
        """Returns after the next image is applied."""
        await self._image_applied.wait()

    async def wait_for_image(self, version: int, timeout_s: float = 30.0) -> None:
        with anyio.fail_after(timeout_s):
            while self.image.version < version:
                await self._image_applied.wait()

    # ------------------------------------------------------------------ lookups
    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica of topic-index hosted here (see ReplicaManager.partition)."""
        return self.replica_manager.partition(topic, index)

    def replicas(self) -> list[Partition]:
        return self.replica_manager.replicas()

    # ------------------------------------------------------------------ metadata changes
    async def create_topic(self, name: str, partitions: int | None = None,
                           configs: Mapping[str, str | None] | None = None, *, replication_factor: int = -1,
                           validate_only: bool = False) -> TopicInfo | None:
        return await self.controller.call(CreateTopic(name, -1 if partitions is None else partitions,
                                                      replication_factor, dict(configs or {}), validate_only))

    async def auto_create(self, name: str) -> TopicInfo | None:
        """The topic, created with the broker defaults if auto-creation is on; None otherwise."""
        topic = self.topics.get(name)
        if topic is None and self.config.auto_create_topics and name not in INTERNAL_TOPICS:
            # internal topics are created by their coordinators, with their own partition counts
            check_topic_name(name)
            try:
                topic = await self.create_topic(name, self.config.default_partitions)
            except BrokerError as e:
                if e.code in CONTROLLER_AWAY:  # as Kafka answers a topic whose creation is under way
                    raise BrokerError(ErrorCode.LEADER_NOT_AVAILABLE,
                                      f"topic {name!r} cannot be created now: {e.message}") from None
                if e.code != e.code.TOPIC_ALREADY_EXISTS:  # another client created it meanwhile
                    raise
                topic = self.topics.get(name)
        return topic

    async def delete_topic(self, name: str) -> uuid.UUID:
        return await self.controller.call(DeleteTopic(name))

    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False,
                             assignments: Sequence[Sequence[int]] | None = None) -> None:
        await self.controller.call(CreatePartitions(name, total, validate_only, None if assignments is None else
                                                    tuple(tuple(a) for a in assignments)))

    async def elect_leaders(self, election: Election,
                            partitions: Mapping[str, Sequence[int]] | None) -> tuple[ElectionResult, ...]:
        """Leader elections an admin asked for (None: every partition); once answered, this broker
        has applied the image with the new leaders."""
        asked = None if partitions is None else {name: tuple(indexes) for name, indexes in partitions.items()}
        return await self.controller.call(ElectLeaders(election, asked))

    async def alter_partition_reassignments(self, reassignments: Sequence[Reassignment], *,
                                            allow_replication_factor_change: bool = True
                                            ) -> tuple[ReassignmentResult, ...]:
        """Start or cancel reassignments (KIP-455); once answered, this broker has applied the
        image with the new replica sets (the replicas then move on their own)."""
        return await self.controller.call(AlterPartitionReassignments(tuple(reassignments),
                                                                      allow_replication_factor_change))

    async def list_partition_reassignments(self, partitions: Mapping[str, Sequence[int]] | None
                                           ) -> tuple[OngoingReassignment, ...]:
        asked = None if partitions is None else {name: tuple(indexes) for name, indexes in partitions.items()}
        return await self.controller.call(ListPartitionReassignments(asked))

    async def describe_quorum(self) -> QuorumState:
        return await self.controller.call(DescribeQuorum())

    async def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool = False) -> None:
        await self.controller.call(UpdateFeatures(tuple(updates), validate_only))

    async def unregister_broker(self, node_id: int) -> None:
        await self.controller.call(UnregisterBroker(node_id))

    async def set_topic_configs(self, name: str, configs: Mapping[str, str | None], *, validate_only: bool = False) -> None:
        await self.controller.call(SetTopicConfigs(name, dict(configs), validate_only))

    async def set_broker_configs(self, resource: str, configs: Mapping[str, str | None], *,
                                 validate_only: bool = False) -> None:
        """Replace the dynamic settings of the cluster-wide default ("") or of one broker (its id)."""
        await self.controller.call(SetBrokerConfigs(resource, dict(configs), validate_only))

    async def set_group_configs(self, group: str, configs: Mapping[str, str | None], *,
                                validate_only: bool = False) -> None:
        """Replace a group's config overrides (the GROUP resource), checked against this broker's
        group settings as Kafka's GroupConfig.validate does."""
        clean = validate_group(configs, self.config.group_settings)
        await self.controller.call(SetGroupConfigs(group, dict(clean), validate_only))

    async def set_client_metrics(self, name: str, configs: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace a client-metrics subscription's configs (empty: remove it)."""
        await self.controller.call(SetClientMetrics(name, dict(configs), validate_only))

    async def alter_scram_credentials(self, deletions: tuple[ScramDeletion, ...],
                                      upsertions: tuple[ScramEntry, ...]) -> tuple[ScramResult, ...]:
        """Set or delete SCRAM credentials (salted) through the controller; one result per user."""
        return await self.controller.call(AlterScramCredentials(deletions, upsertions))

    def scram_credential(self, user: str, mechanism: str) -> ScramEntry | None:
        """A credential stored by the controller, as this broker's last image has it."""
        for entry in self.image.scram:
            if entry.user == user and entry.mechanism == mechanism:
                return entry
        return None

    def broker_level(self) -> BrokerLevel:
        """The broker-level settings topic configs fall back to on this broker."""
        return self.replica_manager.broker_level()

    async def allocate_producer_id(self) -> int:
        """From this broker's block (kshim.replica.producer_ids); BrokerError COORDINATOR_LOAD_IN_PROGRESS
        when it is used up and the controller does not answer."""
        return await self.producer_ids.generate()

    async def _allocate_producer_ids(self, count: int) -> int:
        return await self.controller.call(AllocateProducerIds(count))

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        self.replica_manager.close()
        for hook in self.close_hooks:
            hook()


# ---------------------------------------------------------------------- SASL listeners without users
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # those that need a user (OAUTHBEARER does not)


def missing_sasl_users(security: SecurityConfig, image: MetadataImage, ctl_data_dir: Path) -> str | None:
    """Why no client can authenticate on the SASL listeners with the PLAIN and SCRAM mechanisms
    enabled, and how to add a user; None when one of them has a user. `--sasl-users` serve PLAIN and
    SCRAM; stored SCRAM credentials (`image`) serve their mechanism."""
    listeners = [listener for listener in security.listeners if listener.sasl]
    enabled = list(dict.fromkeys(m for listener in listeners for m in security.mechanisms(listener)
                                 if m in PASSWORD_MECHANISMS))
    if not listeners or not enabled or security.users:
        return None
    scram = [m for m in enabled if m != "PLAIN"]
    if any(entry.mechanism in scram for entry in image.scram):
        return None
    names = ", ".join(listener.url() if listener.port else listener.name for listener in listeners)  # 0: not bound yet
    problem = (f"listener {names} has no SASL user for {', '.join(enabled)}: no client can authenticate with "
               f"these mechanisms")
    if not scram:  # PLAIN checks the passwords given at start only
        return f"{problem}; give users with --sasl-users FILE (name:password lines)"
    inter = security.inter_broker()
    if inter is not None and inter.sasl:  # where ctl connects, with no user to connect as
        return (f"{problem}; start with a first user (--sasl-users FILE, --inter-broker-user NAME), then add "
                f"more with `kshim ctl --data-dir {ctl_data_dir} scram add NAME --mechanism {scram[0]} --password-stdin`")
    return (f"{problem}; add one with `kshim ctl --data-dir {ctl_data_dir} scram add NAME --mechanism {scram[0]} "
            f"--password-stdin` (docs/security.md)")


def warn_without_sasl_users(broker: Broker, ctl_data_dir: Path) -> None:
    """Log missing_sasl_users once, when the first image is applied: stored SCRAM credentials come
    with it (a cluster's broker has none before it registered)."""
    warned = False

    def check() -> None:
        nonlocal warned
        if warned or broker.image.version == 0:  # listeners also run when replicas open in the background
            return
        warned = True
        problem = missing_sasl_users(broker.config.security, broker.image, ctl_data_dir)
        if problem is not None:
            log.warning("%s", problem)

    broker.image_listeners.append(check)
