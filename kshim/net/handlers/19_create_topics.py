"""CreateTopics: create topics on this broker, each one independently of the others.

- Checks run in Kafka's order: topic name, already exists, partition count, replication factor,
  manual assignments, configs. The first failure is the topic's error code and message.
- num_partitions -1 takes the broker default; 0 or below -1 is INVALID_PARTITIONS.
- replication_factor -1 is the default (min(3, brokers)); 0 or below -1 is INVALID_REPLICATION_FACTOR,
  and so is anything above the live brokers the controller knows (1 for a single broker).
- A non-empty `assignments` list is INVALID_REQUEST: kshim places partitions itself.
- Config values are validated by the controller (`kshim.configs`); a null value is INVALID_CONFIG
  (there is no default to fall back to at creation), as is a name given twice.
- A name that appears more than once in one request is INVALID_REQUEST, answered once.
- controller_mutation_rate (client quotas): a created topic's partitions count; from v6 a client
  past its quota gets THROTTLING_QUOTA_EXCEEDED for the topic, and throttle_time_ms says how long
  to wait (older versions are only throttled).
- validate_only runs every check and creates nothing; the answer is what creation would give,
  with a zero topic id.
- v5+ successful answers carry num_partitions, replication_factor and every topic config with its
  effective value (source DYNAMIC_TOPIC_CONFIG for overrides, the broker level's source for
  broker settings, DEFAULT_CONFIG otherwise); v7+ the topic id. Failed topics answer -1 counts and an
  empty config list.
- timeout_ms is ignored: creation on one broker completes before the response.
- ACLs (docs/security.md): CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED;
  the configs of the answer (v5+) need DESCRIBE_CONFIGS on the topic, else they are left out
  with topic_config_error_code TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import refuse_internal
from kshim.configs import resolve
from kshim.errors import BrokerError, check_topic_name
from kshim.net.handlers import RequestContext
from kshim.net.handlers.config_resources import config_dict, config_entry
from kshim.net.handlers.per_topic import each_topic
from kshim.net.handlers.throttling import MutationQuota
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode
from wire.primitives import ZERO_UUID

API_KEY = 19
VERSIONS = (2, 7)

def _config_entries(ctx: RequestContext, overrides: Mapping[str, str]) -> list[dict[str, Any]]:
    return [config_entry(r) for r in resolve(overrides, ctx.broker.broker_level()).entries.values()]


async def _create(ctx: RequestContext, topic: Container, validate_only: bool, quota: MutationQuota) -> dict[str, Any]:
    broker = ctx.broker
    name = topic.name
    if not authz.may_create_topic(ctx, name):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not CREATE topic {name!r}")
    check_topic_name(name)
    refuse_internal(name, "create")  # the coordinators create them, with their own partition counts
    if name in broker.topics:
        raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    count = broker.config.default_partitions if topic.num_partitions == -1 else topic.num_partitions
    if count < 1:
        raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                          f"number of partitions must be at least 1 (or -1 for the broker default), "
                          f"got {topic.num_partitions}")
    replication = topic.replication_factor
    if replication == 0 or replication < -1:
        raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor must be at least 1 (or -1 for the default), got {replication}")
    # the upper bound (live brokers) is the controller's to check: its view is current, while this
    # broker's image may still lack a broker that just registered
    if topic.assignments:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          "manual partition assignments are not supported; give num_partitions instead")
    configs = config_dict(topic.configs, ErrorCode.INVALID_CONFIG)
    if not validate_only:
        quota.record(count)  # controller_mutation_rate: THROTTLING_QUOTA_EXCEEDED from v6
    created = await broker.create_topic(name, count, configs, replication_factor=replication,
                                        validate_only=validate_only)
    describable = authz.topic_allowed(ctx, AclOperation.DESCRIBE_CONFIGS, name)
    return {
        "name": name,
        "topic_config_error_code": ErrorCode.NONE if describable else ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "topic_id": created.topic_id if created is not None else ZERO_UUID,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "num_partitions": len(created.partitions) if created is not None else count,
        "replication_factor": (len(created.partitions[0].replicas) if created is not None else
                               broker.config.default_replication_factor if replication == -1 else replication),
        "configs": _config_entries(ctx, created.configs if created is not None else configs) if describable else [],
    }


def _failed(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": []}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    quota = MutationQuota(ctx, strict_since=6)
    results = await each_topic(req.topics or (), lambda topic: _create(ctx, topic, bool(req.validate_only), quota),
                               _failed, "creating the topic")
    return {"throttle_time_ms": quota.finish(), "topics": results}
