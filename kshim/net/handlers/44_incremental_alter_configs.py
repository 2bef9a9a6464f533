"""IncrementalAlterConfigs: edit a topic's config overrides, each resource independently of the others.

- TOPIC (2): the operations apply in order to the topic's current overrides, then the result is
  validated as a whole (INVALID_CONFIG with the reason) and stored; a failure changes nothing.
  - SET (0) overrides a config; DELETE (1) drops the override (back to the default);
  - APPEND (2) / SUBTRACT (3) only for list configs (INVALID_CONFIG otherwise): the comma-separated
    items are added (skipping ones present) to / removed from the current effective value (the
    override, else the broker's setting, else the default). A SUBTRACT of every item leaves the
    empty list: cleanup.policy "" (neither retention nor compaction, as in Kafka 4.2+).
- A null value for SET/APPEND/SUBTRACT, an unknown operation, or a config named twice in one
  resource is INVALID_REQUEST. Unknown config names are INVALID_CONFIG (DELETE included).
- An unknown topic is UNKNOWN_TOPIC_OR_PARTITION. The internal topics are reconfigured like any
  other, as Kafka's KRaft brokers allow.
- BROKER (4), named "" (the cluster-wide default) or this broker's id: the same operations on that
  resource's dynamic broker settings (the topic-config defaults: log.retention.ms, compression.type,
  message.max.bytes, ...); APPEND/SUBTRACT start from the broker's effective value. A read-only
  (command-line) or unknown name is INVALID_CONFIG; another broker's id is INVALID_REQUEST. The
  controller stores them, so they survive a restart. Other resource types are INVALID_REQUEST. A resource named twice in one request is INVALID_REQUEST for each entry.
- CLIENT_METRICS (16), a client-metrics subscription (KIP-714, kshim.configs.client_metrics):
  `metrics`, `interval.ms`, `match` set or deleted (APPEND/SUBTRACT on the two lists), then the
  whole validated (INVALID_CONFIG for a bad interval or pattern, INVALID_REQUEST for another name
  or an empty subscription name) and stored by the controller; deleting every config removes the
  subscription. ALTER_CONFIGS on the cluster.
- GROUP (32), any group id: SET / DELETE on the group's overrides (kshim.configs.groups; no list
  configs, so APPEND / SUBTRACT are INVALID_CONFIG), the result validated as AlterConfigs does.
  An empty name is INVALID_REQUEST.
- validate_only runs every check and changes nothing.
- ACLs (docs/security.md): ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the
  group (else GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster (else
  CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

from construct import Container

from kshim.configs import client_metrics
from kshim.configs import LIST, ConfigDef, broker_definition, broker_settings, resolve, resolve_group, topic_definition
from kshim.configs.groups import group_definition
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from kshim.net.handlers.config_resources import (BROKER, CLIENT_METRICS, GROUP, alter_each, target_broker, target_group,
                                                target_topic)
from wire.errors import ErrorCode

API_KEY = 44
VERSIONS = (0, 1)


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _apply(current: Mapping[str, Any], entry: Container, result: dict[str, str | None],
           definition_of: Callable[[str], ConfigDef]) -> None:
    """Apply one operation to `result` (the overrides, None meaning deleted); `current` holds the
    typed effective values before the request."""
    name, op, value = entry.name, entry.config_operation, entry.value
    if op not in _OP_NAMES:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op} for {name!r}")
    if op != DELETE and value is None:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"{_OP_NAMES[op]} of config {name!r} needs a value")
    definition = definition_of(name)
    if op == SET:
        result[name] = value
    elif op == DELETE:
        result[name] = None
    else:
        if definition.type is not LIST:
            raise BrokerError(ErrorCode.INVALID_CONFIG,
                              f"{_OP_NAMES[op]} is only allowed for list configs; {name!r} is a {definition.type.name}")
        old = list(current[name])
        new = LIST.parse(value)
        if op == APPEND:
            merged = old + [item for item in new if item not in old]
        else:
            merged = [item for item in old if item not in new]
        result[name] = ",".join(merged)


def _check_duplicates(entries: list[Container]) -> None:
    seen = Counter(e.name for e in entries)
    duplicated = sorted(n for n, count in seen.items() if count > 1)
    if duplicated:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config(s) given more than once: {', '.join(duplicated)}")


async def _alter_broker(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    target = target_broker(ctx, resource)
    entries = list(resource.configs or ())
    _check_duplicates(entries)
    image_configs = ctx.broker.image.broker_configs
    current = {r.name: r.value for r in broker_settings(ctx.broker.config, image_configs)}
    result: dict[str, str | None] = dict(image_configs.get(target, {}))
    for entry in entries:
        _apply(current, entry, result, broker_definition)
    await ctx.broker.set_broker_configs(target, result, validate_only=validate_only)


async def _alter_group(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    group = target_group(resource)
    entries = list(resource.configs or ())
    _check_duplicates(entries)
    overrides = ctx.broker.image.group_configs.get(group, {})
    current = {r.name: r.value for r in resolve_group(overrides, ctx.broker.config.group_settings)}
    result: dict[str, str | None] = dict(overrides)
    for entry in entries:
        _apply(current, entry, result, group_definition)
    await ctx.broker.set_group_configs(group, result, validate_only=validate_only)


async def _alter_client_metrics(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    entries = list(resource.configs or ())
    _check_duplicates(entries)
    result = dict(ctx.broker.image.client_metrics.get(resource.resource_name, {}))
    for entry in entries:
        name, op, value = entry.name, entry.config_operation, entry.value
        if op not in _OP_NAMES:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op} for {name!r}")
        if op != DELETE and value is None:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{_OP_NAMES[op]} of config {name!r} needs a value")
        if name not in client_metrics.DEFAULTS:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown client metrics configuration {name!r}")
        if op == SET:
            result[name] = value
        elif op == DELETE:
            result.pop(name, None)
        elif name == client_metrics.INTERVAL_MS:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"{_OP_NAMES[op]} is only allowed for list configs")
        else:
            old = [i.strip() for i in result.get(name, "").split(",") if i.strip()]
            new = [i.strip() for i in value.split(",") if i.strip()]
            merged = old + [i for i in new if i not in old] if op == APPEND else [i for i in old if i not in new]
            result[name] = ",".join(merged)
    await ctx.broker.set_client_metrics(resource.resource_name, result, validate_only=validate_only)


async def _alter(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    authz.check_configs(ctx, resource.resource_type, resource.resource_name, AclOperation.ALTER_CONFIGS)
    if resource.resource_type == CLIENT_METRICS:
        await _alter_client_metrics(ctx, resource, validate_only)
        return
    if resource.resource_type == BROKER:
        await _alter_broker(ctx, resource, validate_only)
        return
    if resource.resource_type == GROUP:
        await _alter_group(ctx, resource, validate_only)
        return
    topic = target_topic(ctx, resource)
    entries = list(resource.configs or ())
    _check_duplicates(entries)
    current = resolve(topic.configs, ctx.broker.broker_level())
    result: dict[str, str | None] = dict(topic.configs)
    for entry in entries:
        _apply({name: r.value for name, r in current.entries.items()}, entry, result, topic_definition)
    await ctx.broker.set_topic_configs(topic.name, result, validate_only=validate_only)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    return await alter_each(req, lambda resource, validate_only: _alter(ctx, resource, validate_only))
