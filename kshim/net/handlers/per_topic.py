"""What CreateTopics and CreatePartitions share: one answer per topic, each failing on its own.

Not a handler module (no NN_ prefix): the registry does not load it.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable

from construct import Container

from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.handlers")


async def each_topic(topics: Iterable[Container], run: Callable[[Container], Awaitable[dict[str, Any]]],
                     failed: Callable[[str, ErrorCode, str], dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """Run `run` per topic. A topic named twice is INVALID_REQUEST (answered once); a BrokerError
    is that topic's answer; a storage failure is KAFKA_STORAGE_ERROR for that topic only."""
    topics = list(topics)
    counts = Counter(t.name for t in topics)
    results: list[dict[str, Any]] = []
    reported: set[str] = set()
    for topic in topics:
        if counts[topic.name] > 1:
            if topic.name not in reported:
                reported.add(topic.name)
                results.append(failed(topic.name, ErrorCode.INVALID_REQUEST,
                                      f"topic {topic.name!r} appears more than once in the request"))
            continue
        try:
            results.append(await run(topic))
        except BrokerError as e:
            results.append(failed(topic.name, e.code, e.message))
        except OSError as e:
            log.exception("%s %r failed", what, topic.name)
            results.append(failed(topic.name, ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed: {e}"))
    return results
