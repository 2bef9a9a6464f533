"""Client-metrics subscriptions (KIP-714): the configs of a CLIENT_METRICS config resource, as
Kafka 4's ClientMetricsConfigs has them, validated the same way.

- `metrics`: comma-separated metric name prefixes the matching clients push; `*` is every metric;
  empty (the default) subscribes to none.
- `interval.ms`: how often matching clients push, 100..3600000 (default 300000).
- `match`: comma-separated `key=regex` selectors, every one must match the client (its regex
  whole): client_instance_id, client_id, client_software_name, client_software_version,
  client_source_address, client_source_port. Empty matches every client.

A resource whose configs are all deleted is no subscription any more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from kshim.errors import BrokerError
from wire.errors import ErrorCode

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
ALL_METRICS = "*"
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
              "client_source_address", "client_source_port")
DEFAULTS = {METRICS: "", INTERVAL_MS: str(DEFAULT_INTERVAL_MS), MATCH: ""}
DOCS = {METRICS: "Metric name prefixes the matching clients push, comma-separated; * for all.",
        INTERVAL_MS: "How often the matching clients push their metrics, in ms (100..3600000).",
        MATCH: "key=regex selectors of the clients this subscription is for, comma-separated."}
CONFIG_TYPES = {METRICS: 7, INTERVAL_MS: 3, MATCH: 7}  # DescribeConfigs v3+ config_type: LIST, INT


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, client: Mapping[str, str]) -> bool:
        return all(pattern.fullmatch(client.get(key, "")) is not None for key, pattern in self.match)


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def parse(name: str, configs: Mapping[str, str]) -> Subscription:
    """The subscription `configs` (name -> value) describe, or BrokerError as Kafka's validation:
    INVALID_REQUEST for an empty name or an unknown config, INVALID_CONFIG for a bad value."""
    if not name:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "a client-metrics subscription needs a name")
    unknown = sorted(set(configs) - set(DEFAULTS))
    if unknown:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown client metrics configuration(s): {', '.join(unknown)}")
    try:
        interval = int(configs.get(INTERVAL_MS, DEFAULTS[INTERVAL_MS]))
    except ValueError:
        raise BrokerError(ErrorCode.INVALID_CONFIG, f"{INTERVAL_MS} must be an integer") from None
    if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise BrokerError(ErrorCode.INVALID_CONFIG,
                          f"{INTERVAL_MS} must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS}, got {interval}")
    match = []
    for item in _items(configs.get(MATCH, "")):
        key, sep, regex = item.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS or not regex:
            raise BrokerError(ErrorCode.INVALID_CONFIG,
                              f"illegal client matching pattern {item!r}: expected key=regex with a key among "
                              f"{', '.join(MATCH_KEYS)}")
        try:
            match.append((key, re.compile(regex)))
        except re.error as e:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"illegal regex in client matching pattern {item!r}: {e}") from None
    return Subscription(name, tuple(_items(configs.get(METRICS, ""))), interval, tuple(match))
