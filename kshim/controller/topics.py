"""Topics and their partitions: creation (with the assignment of replicas to brokers, round-robin
or as the request places them), deletion, more partitions, and a topic's config overrides.

Separate from the partitions' later life (kshim.controller.elections, reassignments): here a
partition is placed once, there its leader and replicas change.
"""
from __future__ import annotations

import logging
import random
import uuid

from kshim.cluster.image import TopicInfo
from kshim.configs import check_values, resolve, validate
from kshim.controller.state import ControllerState, _Topic
from kshim.controller.store import PartitionRow, TopicRecord
from kshim.errors import BrokerError, check_topic_name
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")

# each partition replica is a directory with open files on every broker hosting it: one request
# must not be able to ask for millions (Kafka's controller caps one operation at 10,000 records)
MAX_PARTITIONS_PER_TOPIC = 10_000


class TopicAdmin(ControllerState):
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


def _assign(count: int, rf: int, brokers: list[int], first_index: int = 0) -> list[PartitionRow]:
    """Round-robin replicas from a random start, as Kafka does: leaders spread over brokers."""
    n = len(brokers)
    start = random.randrange(n)
    rows = []
    for i in range(first_index, first_index + count):
        replicas = [brokers[(start + i + j) % n] for j in range(rf)]
        rows.append(PartitionRow(i, replicas, replicas[0], 0, list(replicas)))
    return rows
