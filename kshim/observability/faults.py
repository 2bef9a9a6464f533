"""Request-level fault rules: what a broker does instead of (or besides) answering a request.

A rule matches requests by API key, topic, partition and client id (any left out matches all) and
says what happens to them:

- ``error``: the request is not handled; the answer carries ``error_code`` at every error field it
  has (each partition of a Produce, the top level of a JoinGroup, ...). An acks=0 Produce, which
  has no answer, gets its connection closed, as Kafka does when one fails.
- ``delay``: the request is handled and its answer goes out ``delay_ms`` later.
- ``drop``: the connection is closed before the request is handled.
- ``timeout``: the request is handled (applied) but the answer is withheld for ``delay_ms``
  (default a minute), past any sane client timeout; then the connection is closed. Later answers
  on that connection wait behind it, as they would behind a stalled broker.

``after`` lets that many matching requests through untouched first, so "answer once and fail the
retry" is ``after=1, count=1``; ``probability`` faults only that fraction of the matching requests
(packet loss, flaky networks). ``label`` names a rule for `clear` (the network faults of
kshim.ctl.faults label theirs ``net:A-B``). Each rule ends after ``count`` faults or ``duration_ms``,
whichever comes first, and is then gone: rules never outlive what was asked. A broker holds at
most MAX_RULES.

Each broker holds its own FaultRules (kshim.net.server consults it at dispatch); `kshim ctl fault`
and kshim.ctl.faults.FaultClient reach it over the broker's admin socket. Rules are plain dicts
on the way in and out (JSON over the socket), validated here by ``FaultRule.from_dict``.
"""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from wire.errors import ErrorCode
from wire.schema.messages import MESSAGES

MAX_RULES = 256  # per broker
MAX_COUNT = 1_000_000
MAX_DURATION_MS = 24 * 3600 * 1000
MAX_DELAY_MS = 600_000  # a delay or a withheld answer lasts at most 10 minutes
DEFAULT_TIMEOUT_HOLD_MS = 60_000
ACTIONS = ("error", "delay", "drop", "timeout")

# API names as Kafka spells them ("Produce", "OffsetCommit"), by key, and back (case-insensitive)
API_NAMES: dict[int, str] = {k: msg.name.removesuffix("Request") for (k, kind), msg in MESSAGES.items()
                             if kind == "request"}
_API_KEYS = {name.lower(): k for k, name in API_NAMES.items()}


def replica_client_id(node_id: int) -> str:
    """The client id a broker's replica fetcher sends: network faults between brokers match it."""
    return f"kshim-replica-{node_id}"


def net_label(a: int, b: int) -> str:
    """The label of the rules of a network fault between brokers a and b (either order)."""
    return f"net:{min(a, b)}-{max(a, b)}"


class FaultError(ValueError):
    """A rule that cannot be: says why, for the user."""


def api_key_of(value: int | str) -> int:
    """An API key from its number or its name ("Produce", "produce", "0")."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        key = _API_KEYS.get(value.strip().lower())
        if key is None:
            raise FaultError(f"unknown API {value!r} (e.g. Produce, Fetch, Metadata, or a number)")
        return key
    key = int(value)
    if key not in API_NAMES:
        raise FaultError(f"unknown API key {key}")
    return key


def error_code_of(value: int | str) -> ErrorCode:
    """An error code from its number or its Kafka name ("NOT_LEADER_OR_FOLLOWER", "6")."""
    try:
        if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
            return ErrorCode[value.strip().upper()]
        return ErrorCode(int(value))
    except (KeyError, ValueError):
        raise FaultError(f"unknown error code {value!r} (a Kafka error name such as NOT_LEADER_OR_FOLLOWER, "
                         f"or its number)") from None


def _bounded(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise FaultError(f"{name} must be within {lo}..{hi}, got {value}")
    return value


@dataclass
class FaultRule:
    action: str
    api_key: int | None = None
    topic: str | None = None
    partition: int | None = None
    client_id: str | None = None
    error_code: int = 0
    delay_ms: int = 0
    after: int = 0
    count: int | None = None  # faults left; None: until duration_ms
    duration_ms: int | None = None
    probability: float | None = None  # fault only this fraction of matching requests
    label: str | None = None
    id: int = 0
    matched: int = 0  # matching requests seen
    applied: int = 0  # faults done
    created: float = field(default_factory=time.monotonic)

    FIELDS = ("action", "api", "topic", "partition", "client_id", "error", "delay_ms", "after", "count",
              "duration_ms", "probability", "label")

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> FaultRule:
        unknown = set(spec) - set(cls.FIELDS)
        if unknown:
            raise FaultError(f"unknown rule fields {sorted(unknown)} (known: {', '.join(cls.FIELDS)})")
        action = spec.get("action")
        if action not in ACTIONS:
            raise FaultError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
        rule = cls(action=action)
        if spec.get("api") is not None:
            rule.api_key = api_key_of(spec["api"])
        if spec.get("topic") is not None:
            if not isinstance(spec["topic"], str) or not spec["topic"]:
                raise FaultError(f"topic must be a topic name, got {spec['topic']!r}")
            rule.topic = spec["topic"]
        if spec.get("partition") is not None:
            if rule.topic is None:
                raise FaultError("a partition needs its topic")
            rule.partition = _bounded("partition", spec["partition"], 0, 2**31 - 1)
        if spec.get("client_id") is not None:
            if not isinstance(spec["client_id"], str):
                raise FaultError(f"client_id must be a string, got {spec['client_id']!r}")
            rule.client_id = spec["client_id"]
        if action == "error":
            if spec.get("error") is None:
                raise FaultError("an error rule needs the error code to answer (error=NOT_LEADER_OR_FOLLOWER, ...)")
            code = error_code_of(spec["error"])
            if code == ErrorCode.NONE:
                raise FaultError("an error rule needs an error code other than NONE")
            rule.error_code = int(code)
        elif spec.get("error") is not None:
            raise FaultError(f"error= only goes with action error, not {action}")
        if action == "delay":
            if spec.get("delay_ms") is None:
                raise FaultError("a delay rule needs delay_ms")
            rule.delay_ms = _bounded("delay_ms", spec["delay_ms"], 1, MAX_DELAY_MS)
        elif action == "timeout":
            rule.delay_ms = _bounded("delay_ms", spec.get("delay_ms", DEFAULT_TIMEOUT_HOLD_MS) or
                                     DEFAULT_TIMEOUT_HOLD_MS, 1, MAX_DELAY_MS)
        elif spec.get("delay_ms"):
            raise FaultError(f"delay_ms only goes with actions delay and timeout, not {action}")
        rule.after = _bounded("after", spec.get("after", 0) or 0, 0, MAX_COUNT)
        if spec.get("count") is not None:
            rule.count = _bounded("count", spec["count"], 1, MAX_COUNT)
        if spec.get("duration_ms") is not None:
            rule.duration_ms = _bounded("duration_ms", spec["duration_ms"], 1, MAX_DURATION_MS)
        if spec.get("probability") is not None:
            p = spec["probability"]
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
                raise FaultError(f"probability must be within (0, 1], got {p!r}")
            rule.probability = float(p)
        if spec.get("label") is not None:
            if not isinstance(spec["label"], str) or len(spec["label"]) > 200:
                raise FaultError("label must be a string of at most 200 characters")
            rule.label = spec["label"]
        if rule.count is None and rule.duration_ms is None:
            rule.count = 1  # a rule always ends: one fault unless told otherwise
        return rule

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        out: dict[str, Any] = {"id": self.id, "action": self.action,
                               "api": API_NAMES.get(self.api_key) if self.api_key is not None else None,
                               "topic": self.topic, "partition": self.partition, "client_id": self.client_id}
        if self.action == "error":
            out["error"] = ErrorCode(self.error_code).name
        if self.action in ("delay", "timeout"):
            out["delay_ms"] = self.delay_ms
        out.update(after=self.after, count=self.count, duration_ms=self.duration_ms,
                   matched=self.matched, applied=self.applied)
        if self.probability is not None:
            out["probability"] = self.probability
        if self.label is not None:
            out["label"] = self.label
        if self.duration_ms is not None:
            out["remaining_ms"] = max(0, round(self.duration_ms - (now - self.created) * 1000))
        return out

    def expired(self, now: float) -> bool:
        return (self.count is not None and self.applied >= self.count) or \
            (self.duration_ms is not None and (now - self.created) * 1000 >= self.duration_ms)

    def matches(self, api_key: int, client_id: str | None, partitions: Callable[[], Iterable[tuple[str, int | None]]]
                ) -> bool:
        if self.api_key is not None and api_key != self.api_key:
            return False
        if self.client_id is not None and client_id != self.client_id:
            return False
        if self.topic is None:
            return True
        return any(t == self.topic and (self.partition is None or p is None or p == self.partition)
                   for t, p in partitions())


class FaultRules:
    """One broker's rules, in the order they were added; the first live match applies."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self._clock = clock
        self._random = rng or random.Random()

    def __bool__(self) -> bool:
        return bool(self._rules)

    def add(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        rule = FaultRule.from_dict(spec)
        self._prune()
        if len(self._rules) >= MAX_RULES:
            raise FaultError(f"this broker already holds {MAX_RULES} rules; clear some first")
        rule.id = next(self._ids)
        rule.created = self._clock()
        self._rules.append(rule)
        return rule.to_dict(rule.created)

    def list(self) -> list[dict[str, Any]]:
        self._prune()
        now = self._clock()
        return [r.to_dict(now) for r in self._rules]

    def clear(self, rule_id: int | None = None, label: str | None = None) -> int:
        """Remove one rule (by id), the rules of a label, or all; how many were removed."""
        before = len(self._rules)
        self._rules = [r for r in self._rules if (rule_id is not None and r.id != rule_id) or
                       (label is not None and r.label != label)]
        return before - len(self._rules)

    def match(self, api_key: int, client_id: str | None,
              partitions: Callable[[], Iterable[tuple[str, int | None]]]) -> FaultRule | None:
        """The rule to apply to this request, counted as applied; None to handle it normally.
        `partitions` is called only when a rule names a topic (it walks the request)."""
        if not self._rules:
            return None
        now = self._clock()
        hit = None
        for rule in self._rules:
            if rule.expired(now) or not rule.matches(api_key, client_id, partitions):
                continue
            rule.matched += 1
            if rule.matched <= rule.after:
                continue
            if rule.probability is not None and self._random.random() >= rule.probability:
                continue
            rule.applied += 1
            hit = rule
            break
        self._prune(now)
        return hit

    def _prune(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        if any(r.expired(now) for r in self._rules):
            self._rules = [r for r in self._rules if not r.expired(now)]
