"""CreatePartitions: raise a topic's partition count, each topic independently of the others.

- `count` is the new total; it must be larger than the current count (INVALID_PARTITIONS otherwise).
  Partitions are never removed.
- `assignments` null: kshim places the new partitions' replicas (round robin over the live brokers).
  Non-null: one list of broker ids per new partition, in order, each checked as Kafka's controller
  does, else INVALID_REPLICA_ASSIGNMENT: as many lists as new partitions, none empty, no broker
  twice, every broker registered, the topic's replication factor, and at least one broker of each
  unfenced. The first live broker of a list leads; its live brokers form the ISR (fenced ones join
  once they are back and caught up).
- An unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a topic named twice in one request is
  INVALID_REQUEST, answered once.
- validate_only runs every check and changes nothing. timeout_ms is ignored.
- controller_mutation_rate (client quotas): the partitions added count; from v3 a client past its
  quota gets THROTTLING_QUOTA_EXCEEDED for the topic, and throttle_time_ms says how long to wait.
- New partitions start empty; producers and consumers see them after their next metadata refresh.
- ACLs (docs/security.md): ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import refuse_internal
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.net.handlers.per_topic import each_topic
from kshim.net.handlers.throttling import MutationQuota
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 37
VERSIONS = (0, 3)


async def _grow(ctx: RequestContext, topic: Container, validate_only: bool, quota: MutationQuota) -> None:
    if not authz.topic_allowed(ctx, AclOperation.ALTER, topic.name):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not ALTER topic {topic.name!r}")
    if topic.name not in ctx.broker.topics:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
    refuse_internal(topic.name, "add partitions to")  # it would move every group's or transaction's coordinator
    assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
    if not validate_only:
        # controller_mutation_rate: the partitions added; THROTTLING_QUOTA_EXCEEDED from v3
        quota.record(topic.count - len(ctx.broker.topics[topic.name].partitions))
    await ctx.broker.add_partitions(topic.name, topic.count, validate_only=validate_only, assignments=assignments)


def _answer(name: str, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
    return {"name": name, "error_code": code, "error_message": message}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    quota = MutationQuota(ctx, strict_since=3)

    async def grow(topic: Container) -> dict[str, Any]:
        await _grow(ctx, topic, bool(req.validate_only), quota)
        return _answer(topic.name)

    results = await each_topic(req.topics or (), grow, _answer, "adding partitions")
    return {"throttle_time_ms": quota.finish(), "results": results}
