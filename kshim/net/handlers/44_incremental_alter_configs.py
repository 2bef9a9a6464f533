"""IncrementalAlterConfigs: edit a topic's config overrides, each resource independently of the others.

- TOPIC (2): the operations apply in order to the topic's current overrides, then the result is
  validated as a whole (INVALID_CONFIG with the reason) and stored; a failure changes nothing.
  - SET (0) overrides a config; DELETE (1) drops the override (back to the default);
  - APPEND (2) / SUBTRACT (3) only for list configs (INVALID_CONFIG otherwise): the comma-separated
    items are added (skipping ones present) to / removed from the current effective value (the
    override, else the broker's setting, else the default). cleanup.policy is kshim's only list
    config and only 'delete' is valid, so a SUBTRACT that empties it fails validation.
- A null value for SET/APPEND/SUBTRACT, an unknown operation, or a config named twice in one
  resource is INVALID_REQUEST. Unknown config names are INVALID_CONFIG (DELETE included).
- An unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
- BROKER (4) is INVALID_REQUEST: broker settings come from the command line. Other resource types
  are INVALID_REQUEST too. A resource named twice in one request is INVALID_REQUEST for each entry.
- validate_only runs every check and changes nothing.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from construct import Container

from kshim.configs import LIST, TopicConfig, resolve, topic_definition
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.net.handlers.config_resources import alter_each, target_topic
from wire.errors import ErrorCode

API_KEY = 44
VERSIONS = (0, 1)


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _apply(current: TopicConfig, entry: Container, result: dict[str, str | None]) -> None:
    """Apply one operation to `result` (the overrides, None meaning deleted); `current` is the
    topic's effective configs before the request."""
    name, op, value = entry.name, entry.config_operation, entry.value
    if op not in _OP_NAMES:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op} for {name!r}")
    if op != DELETE and value is None:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"{_OP_NAMES[op]} of config {name!r} needs a value")
    definition = topic_definition(name)
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


async def _alter(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    topic = target_topic(ctx, resource)
    name = topic.name
    entries = list(resource.configs or ())
    seen = Counter(e.name for e in entries)
    duplicated = sorted(n for n, count in seen.items() if count > 1)
    if duplicated:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config(s) given more than once: {', '.join(duplicated)}")
    current = resolve(topic.configs, ctx.broker.config.topic_defaults)
    result: dict[str, str | None] = dict(topic.configs)
    for entry in entries:
        _apply(current, entry, result)
    await ctx.broker.set_topic_configs(name, result, validate_only=validate_only)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    return await alter_each(req, lambda resource, validate_only: _alter(ctx, resource, validate_only))
