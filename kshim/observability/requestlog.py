"""A broker's request log: one entry per request answered (or refused by a fault rule), kept in a
bounded ring, so a test or an operator can see what clients sent: API, version, client id,
partitions, the error codes of the answer, latency and the fault rule applied.

Entries are numbered (`seq`, from 1); `since(seq)` gives those after one, which is how
`kshim ctl requests --follow` tails it over the admin socket. The ring holds `capacity` entries
(`kshim serve --request-log-entries`, 0 turns the log off); older ones are dropped, and a reader
that fell behind is told how many it missed (`dropped`).
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any, Iterable

from kshim.observability.faults import API_NAMES
from wire.errors import ErrorCode

DEFAULT_CAPACITY = 10_000
MAX_CAPACITY = 1_000_000
MAX_PARTITIONS_LISTED = 64  # per entry; `partitions_total` says how many the request named
MAX_ERRORS_LISTED = 16  # distinct error codes per entry
MAX_READ = 10_000  # entries per read


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class RequestLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if not 0 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"request log capacity must be within 0..{MAX_CAPACITY}, got {capacity}")
        self.capacity = capacity
        self._entries: deque[tuple] = deque(maxlen=capacity or 1)
        self.seq = 0  # the last entry's number

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def record(self, *, api_key: int, version: int, client_id: str | None, correlation_id: int, peer: str,
               partitions: Iterable[tuple[str, int | None]], errors: Iterable[int], started: float,
               fault: int | None = None, outcome: str = "answered") -> None:
        if not self.capacity:
            return
        self.seq += 1
        # a tuple now, the JSON-ready dict when read: the log costs each request little
        # at most MAX_PARTITIONS_LISTED kept: a ring of fetches of thousands of partitions stays small
        # tuples of strings and numbers only: the garbage collector stops tracking them after its
        # first look, so a full ring (10,000 entries; with a list inside each, ~20,000 objects) does
        # not lengthen every full collection, a pause of the whole broker
        named = partitions if isinstance(partitions, list) else list(partitions)
        self._entries.append((self.seq, time.time(), api_key, version, client_id, correlation_id, peer,
                              tuple(named[:MAX_PARTITIONS_LISTED]), len(named), tuple(errors)[:MAX_ERRORS_LISTED],
                              time.monotonic() - started, outcome, fault))

    @staticmethod
    def _entry(raw: tuple) -> dict[str, Any]:
        seq, at, api_key, version, client_id, correlation_id, peer, partitions, total, errors, latency, outcome, \
            fault = raw
        listed = [t if p is None else f"{t}/{p}" for t, p in partitions]
        entry: dict[str, Any] = {
            "seq": seq, "time": round(at, 6), "api": API_NAMES.get(api_key, str(api_key)), "api_key": api_key,
            "version": version, "client_id": client_id, "correlation_id": correlation_id, "peer": peer,
            "partitions": listed, "errors": [_error_name(c) for c in errors],
            "latency_ms": round(latency * 1000, 3), "outcome": outcome, "fault": fault}
        if total > len(listed):
            entry["partitions_total"] = total
        return entry

    def since(self, seq: int, limit: int = MAX_READ) -> tuple[list[dict[str, Any]], int]:
        """Entries numbered after `seq` (at most `limit`, oldest first), and how many of those
        the ring no longer holds."""
        if not self._entries:
            return [], 0
        first = self._entries[0][0]
        dropped = max(0, first - seq - 1)
        skip = max(0, seq + 1 - first)
        out = [self._entry(raw) for raw in itertools.islice(self._entries, skip, skip + max(0, min(limit, MAX_READ)))]
        return out, dropped

    def clear(self) -> None:
        self._entries.clear()
