"""A broker's state: the metadata image it last applied, the partition replicas it hosts on disk,
and the controller client through which every metadata change goes.

Handlers call into this module; it never calls back into handlers or the server. Metadata
changes (create a topic, alter configs...) are asked of the controller, which decides and
publishes a new image; `apply_image` then opens, reconfigures or removes local replicas.
"""
from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from kshim import topic_config
from kshim.clock import SYSTEM
from kshim.cluster.image import MetadataImage, PartitionInfo, TopicInfo
from kshim.errors import BrokerError, check_topic_name
from kshim.partition import Partition
from kshim.signal import Signal

__all__ = ["Broker", "BrokerConfig", "BrokerError", "ControllerClient", "check_topic_name"]

log = logging.getLogger("kshim.broker")

HOUSEKEEPING_INTERVAL_S = 1.0


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("kshim-data")
    default_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    node_id: int = 0
    advertised_host: str | None = None  # what Metadata tells clients; defaults to host
    topic_defaults: dict[str, str] = field(default_factory=dict)  # broker-level topic config defaults
    offsets_topic_partitions: int = 10  # partitions of __consumer_offsets when it is first created
    transaction_state_partitions: int = 10  # partitions of __transaction_state when it is first created
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host


class ControllerClient(Protocol):
    """What a broker asks of the controller. Each mutating call returns once this broker has
    applied an image that includes its effect, so a handler can answer with the new state."""

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str | None], validate_only: bool) -> TopicInfo | None: ...

    async def delete_topic(self, name: str) -> uuid.UUID: ...

    async def create_partitions(self, name: str, total: int, validate_only: bool) -> None: ...

    async def set_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool) -> None: ...

    async def allocate_producer_ids(self, count: int) -> int: ...

    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionInfo: ...


class Broker:
    def __init__(self, config: BrokerConfig, controller: ControllerClient) -> None:
        self.config = config
        self.node_id = config.node_id
        self.controller = controller
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.image = MetadataImage(0, "", -1)
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self._replicas: dict[tuple[str, int], Partition] = {}
        self._image_applied = Signal()
        self.close_hooks: list = []  # run after the replicas close (a standalone broker's controller)
        # the coordinators know the broker, not the reverse
        from kshim.groups import GroupCoordinator
        from kshim.transactions import TransactionCoordinator
        self.groups = GroupCoordinator(self)
        self.transactions = TransactionCoordinator(self)

    # ------------------------------------------------------------------ metadata images
    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id

    @property
    def cluster_size(self) -> int:
        return len(self.image.alive_brokers())

    def apply_image(self, image: MetadataImage) -> None:
        """Bring local replicas in line with the controller's decisions."""
        if image.version <= self.image.version:
            return
        self.image = image
        self.topics = dict(image.topics)
        self.topics_by_id = {t.topic_id: t for t in image.topics.values()}
        wanted = set()
        for topic in image.topics.values():
            for info in topic.partitions:
                if self.node_id not in info.replicas:
                    continue
                key = (topic.name, info.index)
                wanted.add(key)
                replica = self._replicas.get(key)
                if replica is not None and replica.topic_id != topic.topic_id:
                    self._remove(key)  # a topic deleted and created again under the same name
                    replica = None
                if replica is None:
                    replica = self._open_replica(topic, info)
                    self._replicas[key] = replica
                self._configure(replica, topic)
                replica.apply_partition_state(info, image)
        for key in [k for k in self._replicas if k not in wanted]:
            self._remove(key)
        self.groups.on_image()
        self.transactions.on_image()
        self._image_applied.fire()

    async def image_changed(self) -> None:
        """Returns after the next image is applied."""
        await self._image_applied.wait()

    async def wait_for_image(self, version: int, timeout_s: float = 30.0) -> None:
        with anyio.fail_after(timeout_s):
            while self.image.version < version:
                await self._image_applied.wait()

    def _open_replica(self, topic: TopicInfo, info: PartitionInfo) -> Partition:
        values = topic_config.effective(topic.configs, self.config.topic_defaults)
        return Partition(topic.name, info.index, self.config.data_dir / f"{topic.name}-{info.index}",
                         topic_config.log_config(values), node_id=self.node_id, topic_id=topic.topic_id)

    def _configure(self, replica: Partition, topic: TopicInfo) -> None:
        values = topic_config.effective(topic.configs, self.config.topic_defaults)
        if values != replica.config_values:
            replica.configure(values, topic_config.log_config(values))

    def _remove(self, key: tuple[str, int]) -> None:
        replica = self._replicas.pop(key)
        replica.retire()
        replica.log.close()
        shutil.rmtree(replica.directory, ignore_errors=True)
        log.info("removed replica %s-%d", *key)

    # ------------------------------------------------------------------ lookups
    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica of topic-index hosted here, leader or follower; None if not hosted."""
        return self._replicas.get((topic, index))

    def replicas(self) -> list[Partition]:
        return list(self._replicas.values())

    # ------------------------------------------------------------------ metadata changes
    async def create_topic(self, name: str, partitions: int | None = None, configs: dict[str, str | None] | None = None,
                           *, replication_factor: int = -1, validate_only: bool = False) -> TopicInfo | None:
        return await self.controller.create_topic(name, -1 if partitions is None else partitions,
                                                  replication_factor, configs or {}, validate_only)

    async def auto_create(self, name: str) -> TopicInfo | None:
        """The topic, created with the broker defaults if auto-creation is on; None otherwise."""
        topic = self.topics.get(name)
        if topic is None and self.config.auto_create_topics:
            check_topic_name(name)
            try:
                topic = await self.create_topic(name, self.config.default_partitions)
            except BrokerError as e:
                if e.code != e.code.TOPIC_ALREADY_EXISTS:  # another client created it meanwhile
                    raise
                topic = self.topics.get(name)
        return topic

    async def delete_topic(self, name: str) -> uuid.UUID:
        return await self.controller.delete_topic(name)

    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        await self.controller.create_partitions(name, total, validate_only)

    async def set_topic_configs(self, name: str, configs: dict[str, str | None], *, validate_only: bool = False) -> None:
        await self.controller.set_topic_configs(name, configs, validate_only)

    async def allocate_producer_id(self) -> int:
        return await self.controller.allocate_producer_ids(1)

    # ------------------------------------------------------------------ housekeeping
    async def housekeeping(self) -> None:
        """Retention, time-based flushes and high-watermark checkpoints, once a second."""
        while True:
            await anyio.sleep(HOUSEKEEPING_INTERVAL_S)
            now = SYSTEM.wall_ms()
            for replica in list(self._replicas.values()):
                try:
                    replica.housekeeping(now)
                except OSError:
                    log.exception("housekeeping failed for %s-%d", replica.topic, replica.index)

    def close(self) -> None:
        for replica in self._replicas.values():
            replica.close()
        for hook in self.close_hooks:
            hook()
