"""What the config handlers share: per-resource answers, topic lookup, and a resolved config as
the entry CreateTopics and DescribeConfigs answer with.

Not a handler module (no NN_ prefix): the registry does not load it.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable, Mapping

from construct import Container

from kshim.cluster.image import TopicInfo
from kshim.configs import Resolved
from kshim.errors import BrokerError, check_topic_name
from kshim.net.handlers import RequestContext
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers.configs")

TOPIC = 2
BROKER = 4
CLIENT_METRICS = 16  # KIP-714 subscriptions (kshim.configs.client_metrics)
GROUP = 32


def target_group(resource: Container) -> str:
    """The group a GROUP resource names (any id: a group need not exist to have configs, as in
    Kafka); an empty name is INVALID_REQUEST (Kafka has no default group resource)."""
    if not resource.resource_name:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    return resource.resource_name


def target_broker(ctx: RequestContext, resource: Container) -> str:
    """The dynamic-config resource a BROKER resource names: "" for the cluster-wide default, else
    this broker's id (Kafka sends a broker's own settings to that broker); other ids INVALID_REQUEST."""
    name = resource.resource_name
    node_id = ctx.broker.config.node_id
    if name not in ("", str(node_id)):
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"broker resource name must be '' (cluster-wide default) or this broker's id "
                          f"{node_id}, got {name!r}")
    return name


def target_topic(ctx: RequestContext, resource: Container) -> TopicInfo:
    """The topic a config resource names, or the BrokerError to answer for it. The internal topics
    (__consumer_offsets, __transaction_state) are topics like the others here, as Kafka's KRaft
    controller takes config changes to them; only their writes are the coordinators' own."""
    if resource.resource_type != TOPIC:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"resource type {resource.resource_type} is not supported by kshim")
    name = resource.resource_name
    check_topic_name(name)
    topic = ctx.broker.topics.get(name)
    if topic is None:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    return topic


def config_entry(resolved: Resolved) -> dict[str, Any]:
    """The fields CreateTopics (v5+) and DescribeConfigs entries share."""
    return {"name": resolved.name, "value": resolved.raw, "read_only": not resolved.definition.dynamic,
            "config_source": resolved.source, "is_sensitive": resolved.definition.sensitive}


def config_dict(entries: Iterable[Container] | None, error: ErrorCode) -> dict[str, str]:
    """A request's config entries as a dict; a name given twice or a null value is `error`."""
    configs: dict[str, str] = {}
    for entry in entries or ():
        if entry.name in configs:
            raise BrokerError(error, f"config {entry.name!r} is given more than once")
        if entry.value is None:
            raise BrokerError(error, f"config {entry.name!r} has a null value")
        configs[entry.name] = entry.value
    return configs


async def alter_each(req: Container, alter: Callable[[Container, bool], Awaitable[None]]) -> Mapping[str, Any]:
    """Run `alter` per resource; each fails or succeeds on its own, with Kafka's error answer."""
    resources = list(req.resources or ())
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    responses = []
    for resource in resources:
        answer: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.NONE, "error_message": None}
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"resource {resource.resource_name!r} appears more than once in the request")
            await alter(resource, bool(req.validate_only))
        except BrokerError as e:
            answer["error_code"], answer["error_message"] = e.code, e.message
        except OSError as e:
            log.exception("altering configs of %r failed", resource.resource_name)
            answer["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            answer["error_message"] = f"storing the configs failed: {e}"
        responses.append(answer)
    return {"throttle_time_ms": 0, "responses": responses}
