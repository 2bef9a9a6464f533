"""Quota charges of requests (kshim/net/quota_manager.py): the byte rates the produce and fetch
handlers record, and request_percentage, the handler time the server records for every request.
A throttle time is answered as throttle_time_ms (the larger one when both apply) and mutes the
connection for as long."""
from __future__ import annotations

import time
from typing import Any, Awaitable, Mapping

from kshim.configs.quotas import REQUEST_PERCENTAGE
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
