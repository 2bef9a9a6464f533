"""AlterConfigs: replace a topic's config overrides, each resource independently of the others.

- TOPIC (2): the given configs become the topic's whole set of overrides; every config left out
  goes back to its default (Kafka's semantics for this API; IncrementalAlterConfigs edits instead).
  Names and values are validated as a whole before anything changes: INVALID_CONFIG with the
  reason. A null value or a name given twice is INVALID_REQUEST. An unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION.
- BROKER (4) is INVALID_REQUEST: broker settings come from the command line. Other resource types
  are INVALID_REQUEST too.
- A resource named twice in one request is INVALID_REQUEST for each entry.
- validate_only runs every check and changes nothing.
- New values apply at once to the topic's partitions (retention, segment rolling, max.message.bytes,
  timestamp type) and are stored so they survive a restart.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Mapping

from construct import Container

from kshim.broker import BrokerError, check_topic_name
from kshim.handlers import RequestContext
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers.alter_configs")

API_KEY = 33
VERSIONS = (0, 2)

TOPIC = 2
BROKER = 4


def _alter(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    if resource.resource_type == BROKER:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "broker configs are static in kshim")
    if resource.resource_type != TOPIC:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"resource type {resource.resource_type} is not supported by kshim")
    name = resource.resource_name
    check_topic_name(name)
    if name not in ctx.broker.topics:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    configs: dict[str, str] = {}
    for entry in resource.configs or ():
        if entry.name in configs:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {entry.name!r} is given more than once")
        if entry.value is None:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {entry.name!r} has a null value")
        configs[entry.name] = entry.value
    ctx.broker.set_topic_configs(name, configs, validate_only=validate_only)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
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
            _alter(ctx, resource, bool(req.validate_only))
        except BrokerError as e:
            answer["error_code"], answer["error_message"] = e.code, e.message
        except OSError as e:
            log.exception("altering configs of %r failed", resource.resource_name)
            answer["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            answer["error_message"] = f"storing the configs failed: {e}"
        responses.append(answer)
    return {"throttle_time_ms": 0, "responses": responses}
