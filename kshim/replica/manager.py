"""The ReplicaManager: the partition replicas hosted on this broker, opened, reconfigured and
removed as metadata images say, and the one way handlers and coordinators reach them."""
from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Mapping, Protocol

import anyio

from kshim import topic_config
from kshim.cluster.image import MetadataImage, PartitionInfo, TopicInfo
from kshim.partition import Partition, now_ms
from wire.errors import ErrorCode

log = logging.getLogger("kshim.replica")

HOUSEKEEPING_INTERVAL_S = 1.0

TopicPartition = tuple[str, int]


class Metadata(Protocol):
    """The broker's view of the cluster that the replica manager reads (it never changes it)."""
    image: MetadataImage
    topics: Mapping[str, TopicInfo]
    topics_by_id: Mapping[uuid.UUID, TopicInfo]


class ReplicaManager:
    def __init__(self, node_id: int, data_dir: Path, topic_defaults: Mapping[str, str], metadata: Metadata) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.topic_defaults = topic_defaults
        self.metadata = metadata
        self._replicas: dict[TopicPartition, Partition] = {}

    # ------------------------------------------------------------------ hosting
    def apply_image(self, image: MetadataImage) -> None:
        """Open, reconfigure or remove local replicas as the image assigns them."""
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

    def _open_replica(self, topic: TopicInfo, info: PartitionInfo) -> Partition:
        values = topic_config.effective(topic.configs, self.topic_defaults)
        return Partition(topic.name, info.index, self.data_dir / f"{topic.name}-{info.index}",
                         topic_config.log_config(values), node_id=self.node_id, topic_id=topic.topic_id)

    def _configure(self, replica: Partition, topic: TopicInfo) -> None:
        values = topic_config.effective(topic.configs, self.topic_defaults)
        if values != replica.config_values:
            replica.configure(values, topic_config.log_config(values))

    def _remove(self, key: TopicPartition) -> None:
        replica = self._replicas.pop(key)
        replica.retire()
        replica.log.close()
        shutil.rmtree(replica.directory, ignore_errors=True)
        log.info("removed replica %s-%d", *key)

    def partition(self, topic: str, index: int) -> Partition | None:
        """The replica of topic-index hosted here, leader or follower; None if not hosted."""
        return self._replicas.get((topic, index))

    def replicas(self) -> list[Partition]:
        return list(self._replicas.values())

    def get_partition_or_error(self, topic: str | uuid.UUID, index: int,
                               current_leader_epoch: int = -1) -> Partition | ErrorCode:
        """The replica of topic-index if this broker leads it, else why not: UNKNOWN_TOPIC_ID for a
        topic id not known (requests naming topics by id), UNKNOWN_TOPIC_OR_PARTITION for a name
        not known or an index out of range, NOT_LEADER_OR_FOLLOWER when it is not hosted here or
        only as a follower; then `current_leader_epoch` against ours (KIP-320, -1 skips it)."""
        if isinstance(topic, uuid.UUID):
            info = self.metadata.topics_by_id.get(topic)
            if info is None:
                return ErrorCode.UNKNOWN_TOPIC_ID
            topic = info.name
        else:
            info = self.metadata.topics.get(topic)
        if info is None or not 0 <= index < len(info.partitions):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        replica = self._replicas.get((topic, index))
        if replica is None or not replica.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        epoch_error = replica.leader_epoch_error(current_leader_epoch)
        return epoch_error if epoch_error else replica

    # ------------------------------------------------------------------ housekeeping
    async def housekeeping(self) -> None:
        """Retention, time-based flushes and high-watermark checkpoints, once a second."""
        while True:
            await anyio.sleep(HOUSEKEEPING_INTERVAL_S)
            now = now_ms()
            for replica in list(self._replicas.values()):
                try:
                    replica.housekeeping(now)
                except OSError:
                    log.exception("housekeeping failed for %s-%d", replica.topic, replica.index)

    def close(self) -> None:
        for replica in self._replicas.values():
            replica.close()
