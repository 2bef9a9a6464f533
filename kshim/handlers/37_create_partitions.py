"""CreatePartitions: raise a topic's partition count, each topic independently of the others.

- `count` is the new total; it must be larger than the current count (INVALID_PARTITIONS otherwise).
  Partitions are never removed.
- Non-null `assignments` is INVALID_REQUEST: kshim places partitions itself.
- An unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a topic named twice in one request is
  INVALID_REQUEST, answered once.
- validate_only runs every check and changes nothing. timeout_ms is ignored.
- New partitions start empty; producers and consumers see them after their next metadata refresh.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Mapping

from construct import Container

from kshim.errors import BrokerError
from kshim.handlers import RequestContext
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers.create_partitions")

API_KEY = 37
VERSIONS = (0, 3)


async def _grow(ctx: RequestContext, topic: Container, validate_only: bool) -> None:
    if topic.name not in ctx.broker.topics:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist")
    if topic.assignments is not None:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          "manual partition assignments are not supported; give only the new count")
    await ctx.broker.add_partitions(topic.name, topic.count, validate_only=validate_only)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    topics = list(req.topics or ())
    counts = Counter(t.name for t in topics)
    results: list[dict[str, Any]] = []
    reported_duplicates: set[str] = set()
    for topic in topics:
        if counts[topic.name] > 1:
            if topic.name not in reported_duplicates:
                reported_duplicates.add(topic.name)
                results.append({"name": topic.name, "error_code": ErrorCode.INVALID_REQUEST,
                                "error_message": f"topic {topic.name!r} appears more than once in the request"})
            continue
        try:
            await _grow(ctx, topic, bool(req.validate_only))
            results.append({"name": topic.name, "error_code": ErrorCode.NONE, "error_message": None})
        except BrokerError as e:
            results.append({"name": topic.name, "error_code": e.code, "error_message": e.message})
        except OSError as e:
            log.exception("adding partitions to %r failed", topic.name)
            results.append({"name": topic.name, "error_code": ErrorCode.KAFKA_STORAGE_ERROR,
                            "error_message": f"adding partitions failed: {e}"})
    return {"throttle_time_ms": 0, "results": results}
