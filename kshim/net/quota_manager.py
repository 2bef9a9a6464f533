"""Client quota enforcement, as Kafka's ClientQuotaManager and ClientRequestQuotaManager do it.

The quotas come from the metadata image (AlterClientQuotas through the controller). For each
(kind, user tag, client-id tag) that a quota applies to (kshim.configs.quotas.resolve_quota: the
tags say which clients share one budget), a Rate measures what the clients used: a sampled rate
over quota.window.num samples of quota.window.size.seconds, whose window counts at least
samples - 1 full windows (so a new client's first burst is measured over the whole window, as in
Kafka). A recording that takes the rate above the quota answers a throttle time of
(rate - quota) / quota * window, which the handler returns as throttle_time_ms and the connection
honours (Throttle: it reads no further request until then, as Kafka mutes the channel; KIP-219).

Byte rates are not bounded (the client must wait the whole excess off); request_percentage's
throttle is bounded by one window, as Kafka bounds it. connection_creation_rate (per client
address, KIP-612): a connection over the rate is held unread for the throttle time, then closed.
controller_mutation_rate (KIP-599) is a token bucket of partitions created, added or deleted. Rates of clients idle for a whole window
are dropped: nothing of them is left to measure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

import anyio

from kshim.cluster.image import ClientQuota, QuotaEntityPart
from kshim.configs.quotas import CONNECTION_CREATION_RATE, CONTROLLER_MUTATION_RATE, IP, Entity, resolve_quota

ANONYMOUS = "ANONYMOUS"
NANOS_TO_PERCENT = 100.0 / 1e9  # handler time -> percent of one second


@dataclass
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


class Rate:
    """Kafka's Rate over a SampledStat: a total per second over the recent samples."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples_n = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            # one placeholder more than the samples: a sample that started before the window but
            # overlaps it still counts
            self._current = (self._current + 1) % (self.samples_n + 1)
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms, now_ms))
            sample = self._samples[self._current]
            sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.samples_n * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples_n - 1:
            elapsed += (self.samples_n - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000)

    def idle(self, now_ms: int) -> bool:
        return all(now_ms - s.last_event_ms >= self.samples_n * self.window_ms for s in self._samples)


@dataclass
class TokenBucket:
    """Kafka's TokenBucket (KIP-599): refills at the quota up to a burst of samples x window x
    quota; a recording may take it below zero, and -tokens / quota is the wait."""
    tokens: float
    last_ms: int

    def refill(self, quota: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms


class QuotaManager:
    """The rates and quotas of one broker; the handlers and the server record into it."""

    SWEEP_INTERVAL_MS = 10_000

    def __init__(self, samples: int = 11, window_s: int = 1) -> None:
        self.samples = samples
        self.window_ms = window_s * 1000
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._last_sweep_ms = 0

    def update(self, quotas: Iterable[ClientQuota]) -> None:
        """The quotas of a new metadata image; the rates measured so far stay."""
        self._quotas = {q.entity: q.values for q in quotas}

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def quota(self, key: str, user: str, client_id: str) -> float | None:
        found = resolve_quota(self._quotas, key, user, client_id)
        return None if found is None else found[0]

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int,
               max_throttle_ms: int | None = None) -> int:
        """Record `value` against the quota `key` of the client; the throttle time (ms) it earns."""
        found = resolve_quota(self._quotas, key, user, client_id)
        if found is None:
            return 0
        bound, user_tag, client_tag = found
        self._sweep(now_ms)
        rate = self._rates.get((key, user_tag, client_tag))
        if rate is None:
            rate = self._rates[(key, user_tag, client_tag)] = Rate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        throttle = round((observed - bound) / bound * rate.window_size_ms(now_ms))
        return throttle if max_throttle_ms is None else min(throttle, max_throttle_ms)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recording whose work was not done (a throttled fetch answers no data)."""
        found = resolve_quota(self._quotas, key, user, client_id)
        if found is not None and (rate := self._rates.get((key, found[1], found[2]))) is not None:
            rate.record(-value, now_ms)

    def connection_throttle(self, ip: str, now_ms: int) -> int:
        """connection_creation_rate (KIP-612): 0 if a new connection from `ip` may be served, else
        how long to hold it before closing it unread (at most one window); a refused connection
        is not counted."""
        found = None
        for name in (ip, None):  # /ips/<ip>, then /ips/<default>
            values = self._quotas.get((QuotaEntityPart(IP, name),))
            if values is not None and CONNECTION_CREATION_RATE in values:
                found = values[CONNECTION_CREATION_RATE], name
                break
        if found is None:
            return 0
        bound, _ = found
        self._sweep(now_ms)
        tags = (CONNECTION_CREATION_RATE, ip, "")
        rate = self._rates.get(tags)
        if rate is None:
            rate = self._rates[tags] = Rate(self.samples, self.window_ms)
        rate.record(1.0, now_ms)
        observed = rate.measure(now_ms)
        if observed <= bound:
            return 0
        rate.record(-1.0, now_ms)
        return min(round((observed - bound) / bound * rate.window_size_ms(now_ms)), self.window_ms)

    def record_mutation(self, user: str, client_id: str, permits: float, now_ms: int,
                        strict: bool) -> tuple[bool, int]:
        """controller_mutation_rate (KIP-599): (allowed, throttle ms) for `permits` partition
        mutations. Strict (recent request versions): refused while the bucket is below zero; the
        request that takes it below zero is still allowed. Permissive: always allowed."""
        found = resolve_quota(self._quotas, CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return True, 0
        bound, user_tag, client_tag = found
        burst = self.samples * self.window_ms / 1000 * bound
        self._sweep(now_ms)
        bucket = self._buckets.get((user_tag, client_tag))
        if bucket is None:
            bucket = self._buckets[(user_tag, client_tag)] = TokenBucket(burst, now_ms)
        bucket.refill(bound, burst, now_ms)
        if strict and bucket.tokens < 0:
            return False, round(-bucket.tokens / bound * 1000)
        bucket.tokens = min(burst, bucket.tokens - permits)
        return True, round(-bucket.tokens / bound * 1000) if bucket.tokens < 0 else 0

    def max_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """What the client may use in one quota window at most (a fetch returns no more)."""
        bound = self.quota(key, user, client_id)
        return None if bound is None else bound * (self.samples - 1) * self.window_ms / 1000

    def _sweep(self, now_ms: int) -> None:
        # one rate per client id that ever had a quota: drop the idle ones, so memory follows the
        # active clients
        if now_ms - self._last_sweep_ms < self.SWEEP_INTERVAL_MS:
            return
        self._last_sweep_ms = now_ms
        for tags in [t for t, r in self._rates.items() if r.idle(now_ms)]:
            del self._rates[tags]
        full = self.samples * self.window_ms  # a bucket untouched this long has refilled
        for key in [k for k, b in self._buckets.items() if now_ms - b.last_ms >= full]:
            del self._buckets[key]


@dataclass(slots=True)
class Throttle:
    """A connection's mute (KIP-219): the server reads no request of it before `until`
    (anyio.current_time()); handlers extend it by the throttle time they answer."""
    until: float = field(default=0.0)

    def mute(self, ms: int) -> None:
        if ms > 0:
            self.until = max(self.until, anyio.current_time() + ms / 1000)

    async def wait(self) -> None:
        if not self.until:  # never muted: no clock to read
            return
        delay = self.until - anyio.current_time()
        if delay > 0:
            await anyio.sleep(delay)


class _Context(Protocol):
    @property
    def header(self) -> Any: ...


def client_of(ctx: _Context) -> tuple[str, str]:
    """(user, client id) of a request. The principal is User:ANONYMOUS until the connection
    authenticates one (a `principal` on the request context, "User:name" or with a `.name`)."""
    principal = getattr(ctx, "principal", None)
    if principal is None:
        user = ANONYMOUS
    else:
        user = str(getattr(principal, "name", principal))
        user = user.removeprefix("User:") or ANONYMOUS
    return user, ctx.header.client_id or ""
