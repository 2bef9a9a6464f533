"""Quota charges of requests (kshim/net/quota_manager.py): the byte rates the produce and fetch
handlers record, and request_percentage, the handler time the server records for every request.
A throttle time is answered as throttle_time_ms (the larger one when both apply) and mutes the
connection for as long."""
from __future__ import annotations

import time
from typing import Any, Awaitable, Mapping

from kshim.configs.quotas import REQUEST_PERCENTAGE
from kshim.errors import BrokerError
from wire.errors import ErrorCode
from kshim.net.handlers import RequestContext, Response
from kshim.net.quota_manager import NANOS_TO_PERCENT, QuotaManager, client_of


def _manager(ctx: RequestContext) -> QuotaManager | None:
    quotas: QuotaManager | None = getattr(ctx.node, "quotas", None)  # None: a test's bare node
    return quotas if quotas is not None and quotas.enabled else None


def charge(ctx: RequestContext, key: str, value: float) -> int:
    """Record `value` against the client's quota `key`; the throttle time (ms), muting the connection."""
    quotas = _manager(ctx)
    if quotas is None:
        return 0
    user, client_id = client_of(ctx)
    throttle = quotas.record(key, user, client_id, value, _now_ms())
    ctx.throttle.mute(throttle)
    return throttle


def uncharge(ctx: RequestContext, key: str, value: float) -> None:
    quotas = _manager(ctx)
    if quotas is not None:
        user, client_id = client_of(ctx)
        quotas.unrecord(key, user, client_id, value, _now_ms())


def max_in_window(ctx: RequestContext, key: str) -> float | None:
    quotas = _manager(ctx)
    if quotas is None:
        return None
    return quotas.max_in_window(key, *client_of(ctx))


class MutationQuota:
    """controller_mutation_rate for one CreateTopics / CreatePartitions / DeleteTopics request:
    strict from `strict_since` (Kafka's versions 6, 3 and 5), permissive before."""

    def __init__(self, ctx: RequestContext, strict_since: int) -> None:
        self.ctx = ctx
        self.strict = ctx.version >= strict_since
        self.throttle_ms = 0
        self.recorded_ms = 0

    def record(self, permits: int) -> None:
        """Count `permits` partitions; THROTTLING_QUOTA_EXCEEDED while a strict quota is exhausted."""
        quotas = _manager(self.ctx)
        if quotas is None or permits <= 0:
            return
        user, client_id = client_of(self.ctx)
        now = _now_ms()
        allowed, throttle = quotas.record_mutation(user, client_id, permits, now, self.strict)
        if throttle:
            self.throttle_ms, self.recorded_ms = throttle, now
        if not allowed:
            raise BrokerError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")

    def finish(self) -> int:
        """The throttle time to answer (less the time the request took since), muting the connection."""
        if not self.throttle_ms:
            return 0
        left = max(0, self.throttle_ms - (_now_ms() - self.recorded_ms))
        self.ctx.throttle.mute(left)
        return left


def charge_request_time(ctx: RequestContext, nanos: int, result: Response) -> Response:
    """request_percentage: the handler's time, throttled at most one window (as Kafka bounds it);
    the throttle time goes into the response's throttle_time_ms when it has one."""
    quotas = _manager(ctx)
    if quotas is None or ctx.quota_exempt:
        return result
    user, client_id = client_of(ctx)
    throttle = quotas.record(REQUEST_PERCENTAGE, user, client_id, nanos * NANOS_TO_PERCENT, _now_ms(),
                             max_throttle_ms=quotas.window_ms)
    if throttle <= 0:
        return result
    ctx.throttle.mute(throttle)
    if isinstance(result, dict):
        _raise_throttle(result, throttle)
        return result
    if result is not None and not isinstance(result, Mapping):
        return _later(result, throttle)
    return result


async def _later(pending: Awaitable[Mapping[str, Any]], throttle: int) -> Mapping[str, Any]:
    body = await pending
    if isinstance(body, dict):
        _raise_throttle(body, throttle)
    return body


def _raise_throttle(body: dict, throttle: int) -> None:
    if "throttle_time_ms" in body:
        body["throttle_time_ms"] = max(body["throttle_time_ms"] or 0, throttle)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
