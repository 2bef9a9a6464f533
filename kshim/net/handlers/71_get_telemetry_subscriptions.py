"""GetTelemetrySubscriptions (KIP-714): which metrics this client instance should push, and how
often (kshim/observability/telemetry.py holds the rules; docs/telemetry.md).

- A zero client_instance_id gets a new one drawn by the broker; the answer carries the instance
  id, its subscription id, the metric prefixes asked for (empty: none; `*`: all), the push interval
  (the lowest of the matching CLIENT_METRICS subscriptions; 300000 ms when none matches), the
  accepted compression types (zstd, lz4, gzip, snappy, in Kafka's order), telemetry max bytes
  (1 MiB) and delta temporality (true).
- Asked again before the push interval has passed: THROTTLING_QUOTA_EXCEEDED (unless the last
  push failed with UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE).
- No ACL check, as in Kafka.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext

API_KEY = 71
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    return ctx.node.telemetry.get_subscriptions(req.client_instance_id, ctx.header.client_id, ctx.peer)
