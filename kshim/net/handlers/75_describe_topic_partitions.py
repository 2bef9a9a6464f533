"""DescribeTopicPartitions: topics and their partitions page by page (KIP-966), what the Java
Admin client's describeTopics uses from Kafka 3.7 on; as Kafka 4.x's handler answers it.

- Topics are answered in name order; an empty topic list means every topic (internal ones
  included), and then unknown or illegal names cannot occur. A named topic that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name), with no partitions.
- response_partition_limit bounds the partitions of one response: clamped to 1..2000 (Kafka's
  max.request.partition.size.limit). When a topic does not fit, the response stops at it and
  next_cursor names the topic and the first partition left out; when the limit is reached exactly
  at a topic's end, next_cursor names the next topic at partition 0 (as Kafka, even if that topic
  turns out not to exist). No cursor: everything fitted.
- cursor: start at that topic and partition; topics ordered before it are skipped. A cursor topic
  missing from a non-empty topic list, or a negative partition index, is INVALID_REQUEST for every
  asked topic.
- Per partition, from this broker's metadata image: leader (-1 with LEADER_NOT_AVAILABLE when it
  has none or it is fenced), leader epoch, replicas, ISR, offline replicas (on fenced brokers).
  kshim has no eligible leader replicas (KIP-966's ELR): both ELR lists are empty.
- Authorization: DESCRIBE on each topic. A named topic one may not describe is
  TOPIC_AUTHORIZATION_FAILED whether or not it exists (its existence is not disclosed); with an
  empty topic list such topics are left out. topic_authorized_operations holds the operations the
  principal may do on the topic, as Kafka fills it for every answered topic.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import TopicInfo
from kshim.errors import BrokerError, check_topic_name
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation, ResourceType
from wire.errors import ErrorCode
from wire.primitives import ZERO_UUID

API_KEY = 75
VERSIONS = (0, 0)

MAX_PARTITIONS_PER_RESPONSE = 2000  # Kafka's max.request.partition.size.limit default
NO_OPERATIONS = -(1 << 31)


def _partitions(topic: TopicInfo, start: int, limit: int, alive: set[int]) -> list[dict[str, Any]]:
    return [{
        "error_code": ErrorCode.NONE if p.leader in alive else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": p.index, "leader_id": p.leader if p.leader in alive else -1,
        "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
        "eligible_leader_replicas": [], "last_known_elr": [],
        "offline_replicas": [r for r in p.replicas if r not in alive],
    } for p in topic.partitions[start:start + limit]]


def _missing(name: str) -> dict[str, Any]:
    try:
        check_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except BrokerError:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": False, "partitions": [],
            "topic_authorized_operations": NO_OPERATIONS}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    asked = [t.name for t in req.topics]
    cursor = req.cursor
    if cursor is not None and ((asked and cursor.topic_name not in asked) or cursor.partition_index < 0):
        return {"throttle_time_ms": 0, "next_cursor": None, "topics": [
            {"error_code": ErrorCode.INVALID_REQUEST, "name": name, "topic_id": ZERO_UUID, "partitions": [],
             "topic_authorized_operations": NO_OPERATIONS} for name in asked]}
    topics = ctx.broker.topics
    every = not asked
    names = sorted(topics if every else set(asked))
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    refused = authz.denied_topics(ctx, AclOperation.DESCRIBE, names)
    if every:
        names = [n for n in names if n not in refused]
    alive = {b.node_id for b in ctx.broker.image.alive_brokers()}
    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, req.response_partition_limit), 1)
    answered: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if name in refused:
            answered.append({**_missing(name), "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
            continue
        topic = topics.get(name)
        if topic is None:
            if not every:
                answered.append(_missing(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions = _partitions(topic, start, remaining, alive)
        answered.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": topic.topic_id,
                         "is_internal": topic.is_internal, "partitions": partitions,
                         "topic_authorized_operations": authz.operations(ctx, ResourceType.TOPIC, name, True)})
        if start + len(partitions) < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": start + len(partitions)}
            break
        remaining -= len(partitions)
    return {"throttle_time_ms": 0, "topics": answered, "next_cursor": next_cursor}
