"""The broker's state: topics and their partitions on disk, the metadata store, and housekeeping.

Handlers call into this module; it never calls back into handlers or the server.
"""
from __future__ import annotations

import logging
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from kshim import topic_config
from kshim.metadata.store import MetadataStore, TopicRecord
from kshim.partition import Partition, now_ms
from wire.errors import ErrorCode

log = logging.getLogger("kshim.broker")

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
HOUSEKEEPING_INTERVAL_S = 1.0


class BrokerError(Exception):
    """A request-level failure with the Kafka error code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("kshim-data")
    default_partitions: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    node_id: int = 0
    advertised_host: str | None = None  # what Metadata tells clients; defaults to host

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


def check_topic_name(name: str | None) -> None:
    if not name or name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-] and not '.' or '..'")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = MetadataStore(config.data_dir / "metadata.sqlite")
        self.cluster_id = self.store.cluster_value("cluster_id", _new_cluster_id())
        # brokers that can hold replicas; CreateTopics rejects a larger replication factor
        self.cluster_size = 1
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        for record in self.store.load_topics():
            self._open_topic(record.name, record.topic_id, record.partitions, record.configs)

    # -- topics
    def _partition_dir(self, topic: str, index: int) -> Path:
        return self.config.data_dir / f"{topic}-{index}"

    def _new_partition(self, topic: Topic, index: int) -> Partition:
        values = topic_config.effective(topic.configs)
        return Partition(
            topic.name, index, self._partition_dir(topic.name, index),
            topic_config.log_config(topic.configs),
            max_message_bytes=int(values["max.message.bytes"]),
            log_append_time=values["message.timestamp.type"] == "LogAppendTime",
        )

    def _open_topic(self, name: str, topic_id: uuid.UUID, partitions: int, configs: dict[str, str]) -> Topic:
        topic = Topic(name, topic_id, dict(configs))
        topic.partitions = [self._new_partition(topic, i) for i in range(partitions)]
        self.topics[name] = topic
        self.topics_by_id[topic_id] = topic
        return topic

    def create_topic(self, name: str, partitions: int | None = None, configs: dict[str, str | None] | None = None,
                     *, validate_only: bool = False) -> Topic | None:
        check_topic_name(name)
        if name in self.topics:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        count = self.config.default_partitions if partitions is None or partitions == -1 else partitions
        if count < 1:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at least 1, got {count}")
        try:
            clean = topic_config.validate(configs or {})
        except topic_config.InvalidConfig as e:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if validate_only:
            return None
        record = TopicRecord(name, uuid.uuid4(), count, now_ms(), clean)
        self.store.create_topic(record)
        log.info("created topic %s with %d partition(s)", name, count)
        return self._open_topic(name, record.topic_id, count, clean)

    def auto_create(self, name: str) -> Topic | None:
        """The topic, created with defaults if auto-creation is on; None otherwise."""
        topic = self.topics.get(name)
        if topic is None and self.config.auto_create_topics:
            topic = self.create_topic(name)
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        del self.topics[name]
        del self.topics_by_id[topic.topic_id]
        for partition in topic.partitions:
            partition.wake_all()
            partition.log.close()
            shutil.rmtree(partition.directory, ignore_errors=True)
        self.store.delete_topic(name)
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if total <= len(topic.partitions):
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} has {len(topic.partitions)} partitions; the new count must be larger")
        if validate_only:
            return
        self.store.set_partition_count(name, total)
        topic.partitions += [self._new_partition(topic, i) for i in range(len(topic.partitions), total)]

    def set_topic_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> None:
        """Replace a topic's overrides (the caller computed the full set)."""
        topic = self.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            clean = topic_config.validate(dict(configs))
        except topic_config.InvalidConfig as e:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if validate_only:
            return
        self.store.replace_configs(name, clean)
        topic.configs = clean
        values = topic_config.effective(clean)
        for partition in topic.partitions:
            partition.log_config = topic_config.log_config(clean)
            partition.log.update_config(partition.log_config)
            partition.max_message_bytes = int(values["max.message.bytes"])
            partition.log_append_time = values["message.timestamp.type"] == "LogAppendTime"

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    def allocate_producer_id(self) -> int:
        return self.store.allocate_producer_ids(1)

    # -- housekeeping: retention and time-based flushes
    async def housekeeping(self) -> None:
        while True:
            await anyio.sleep(HOUSEKEEPING_INTERVAL_S)
            now = now_ms()
            for topic in list(self.topics.values()):
                for partition in topic.partitions:
                    try:
                        if partition.log.apply_retention(now):
                            partition.producers.forget_before(partition.log_start_offset)
                        partition.log.maybe_flush(now)
                    except OSError:
                        log.exception("housekeeping failed for %s-%d", topic.name, partition.index)

    def close(self) -> None:
        for topic in self.topics.values():
            for partition in topic.partitions:
                partition.close()
        self.store.close()


def _new_cluster_id() -> str:
    # Kafka cluster ids are 22-character URL-safe base64 of a UUID
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
