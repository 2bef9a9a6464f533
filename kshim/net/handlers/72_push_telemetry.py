"""PushTelemetry (KIP-714): a client instance's metrics, OTLP MetricsData protobuf, maybe
compressed; kept per instance (the latest push) for `kshim ctl telemetry` (docs/telemetry.md).

- A zero (or reserved) client_instance_id: INVALID_REQUEST.
- After a terminating push: INVALID_REQUEST. Before the push interval since the last push (the
  first push after GetTelemetrySubscriptions is on time; a terminating push always is):
  THROTTLING_QUOTA_EXCEEDED. A subscription id other than the instance's current one (the
  subscriptions changed): UNKNOWN_SUBSCRIPTION_ID, so the client asks again. A compression type
  Kafka does not know: UNSUPPORTED_COMPRESSION_TYPE. Metrics over 1 MiB, compressed or not:
  TELEMETRY_TOO_LARGE. Bytes that do not decompress or decode as MetricsData: INVALID_RECORD.
- No ACL check, as in Kafka.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext

API_KEY = 72
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    error = ctx.node.telemetry.push(req.client_instance_id, req.subscription_id, bool(req.terminating),
                                    req.compression_type, req.metrics or b"", ctx.header.client_id, ctx.peer)
    return {"throttle_time_ms": 0, "error_code": error}
