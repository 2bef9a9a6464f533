"""Client telemetry (KIP-714), as Kafka 4's ClientMetricsManager: which metrics each client instance
is asked to push (the CLIENT_METRICS subscriptions of the image that match it), and the metrics
it pushed, kept per client instance for `kshim ctl telemetry` and the console.

- A client instance is created by its first GetTelemetrySubscriptions (a zero id: the broker draws
  one) or PushTelemetry. Its subscription is evaluated then and again after any subscription
  change: the union of the matching subscriptions' metrics (`*` alone if one asks for all), the
  lowest of their intervals (300000 ms when none matches, with no metrics), and a subscription id
  (CRC32C of metrics and interval, XOR the instance id's hash, as Kafka computes it).
- GetTelemetrySubscriptions again before the push interval has passed since its last request is
  THROTTLING_QUOTA_EXCEEDED, unless its last push failed with UNKNOWN_SUBSCRIPTION_ID or
  UNSUPPORTED_COMPRESSION_TYPE. PushTelemetry: after a terminating push, INVALID_REQUEST; earlier
  than the interval after the previous push (the first push after a Get is always on time), unless
  terminating, THROTTLING_QUOTA_EXCEEDED; a subscription id other than the instance's
  UNKNOWN_SUBSCRIPTION_ID; an unknown compression type UNSUPPORTED_COMPRESSION_TYPE; more than
  telemetry max bytes (1 MiB) TELEMETRY_TOO_LARGE, also when it decompresses past it; bytes that
  do not decompress or decode as OTLP MetricsData INVALID_RECORD.
- Memory is bounded: at most MAX_INSTANCES client instances (the least recently seen goes), an
  instance unseen for max(60 s, 3 push intervals) is dropped, and per instance only the latest
  push's metrics are kept (at most MAX_METRICS of them).
"""
from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Mapping

from kshim.clock import SYSTEM, Clock
from kshim.configs import client_metrics
from kshim.errors import BrokerError
from kshim.observability import otlp
from wire import compression
from wire.crc import crc32c  # not the package: its __init__ loads importlib.metadata (wire.crc)
from wire.errors import ErrorCode

MAX_INSTANCES = 1000
MAX_METRICS = 500
MAX_SOFTWARE = 16384
EXPIRY_MS = 60_000
TELEMETRY_MAX_BYTES = 1024 * 1024
NEVER = -(1 << 62)  # a request time before any (the first request is always on time)
# Kafka's preference order; the client takes the first it supports
ACCEPTED_COMPRESSION = (compression.ZSTD, compression.LZ4, compression.GZIP, compression.SNAPPY)
KNOWN_COMPRESSION = (compression.NONE, *ACCEPTED_COMPRESSION)


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    client: dict[str, str]  # what subscriptions match on (client_id, software, source address...)
    subscription_id: int = 0
    subscription_version: int = -1
    metrics: tuple[str, ...] = ()
    push_interval_ms: int = client_metrics.DEFAULT_INTERVAL_MS
    last_get_ms: int = NEVER
    last_push_ms: int = NEVER
    last_seen_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    pushes: int = 0
    bytes_pushed: int = 0
    last_compression: int = 0
    latest: otlp.MetricsData | None = None
    latest_at_ms: int = 0  # wall clock

    def view(self) -> dict[str, Any]:
        data = self.latest
        return {
            "client_instance_id": str(self.instance_id), **self.client, "subscription_id": self.subscription_id,
            "requested_metrics": list(self.metrics), "push_interval_ms": self.push_interval_ms,
            "pushes": self.pushes, "bytes_pushed": self.bytes_pushed, "terminating": self.terminating,
            "last_error": self.last_error.name, "last_push_ms": self.latest_at_ms or None,
            "compression": self.last_compression,
            "resource": dict(data.resource) if data else {},
            "metrics": [{"name": m.name, "kind": m.kind, "unit": m.unit,
                         "points": [{"value": p.value, "count": p.count, "attributes": p.attributes}
                                    for p in m.points]} for m in (data.metrics if data else [])],
        }


class TelemetryManager:
    def __init__(self, clock: Clock = SYSTEM, max_bytes: int = TELEMETRY_MAX_BYTES) -> None:
        self.clock = clock
        self.max_bytes = max_bytes
        self._subscriptions: tuple[client_metrics.Subscription, ...] = ()
        self._configs: Mapping[str, Mapping[str, str]] = {}
        self._version = 0
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        # client software name and version from each connection's ApiVersions, by peer address
        self._software: OrderedDict[str, tuple[str, str]] = OrderedDict()

    # ------------------------------------------------------------------ subscriptions
    def update(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """The image's CLIENT_METRICS subscriptions; a change re-evaluates every instance lazily."""
        if configs == self._configs:
            return
        self._configs = configs
        subs = []
        for name, values in sorted(configs.items()):
            try:
                subs.append(client_metrics.parse(name, values))
            except BrokerError:
                continue  # the controller validated it; a newer kshim's config would be left out
        self._subscriptions = tuple(subs)
        self._version += 1

    def note_software(self, peer: str, name: str | None, version: str | None) -> None:
        self._software[peer] = (name or "", version or "")
        self._software.move_to_end(peer)
        while len(self._software) > MAX_SOFTWARE:
            self._software.popitem(last=False)

    def forget_connection(self, peer: str) -> None:
        self._software.pop(peer, None)

    # ------------------------------------------------------------------ instances
    def _instance(self, instance_id: uuid.UUID, client_id: str | None, peer: str) -> ClientInstance:
        now = self.clock.monotonic_ms()
        self._expire(now)
        inst = self._instances.get(instance_id)
        if inst is None:
            host, _, port = peer.rpartition(":")
            name, version = self._software.get(peer, ("", ""))
            inst = ClientInstance(instance_id, {
                "client_instance_id": str(instance_id), "client_id": client_id or "",
                "client_software_name": name, "client_software_version": version,
                "client_source_address": host.strip("[]"), "client_source_port": port})
            self._instances[instance_id] = inst
            while len(self._instances) > MAX_INSTANCES:
                self._instances.popitem(last=False)
        self._instances.move_to_end(instance_id)
        inst.last_seen_ms = now
        if inst.subscription_version != self._version:
            self._evaluate(inst)
        return inst

    def _evaluate(self, inst: ClientInstance) -> None:
        interval = client_metrics.DEFAULT_INTERVAL_MS
        metrics: set[str] = set()
        everything = False
        for sub in self._subscriptions:
            if sub.matches(inst.client):
                everything = everything or client_metrics.ALL_METRICS in sub.metrics
                metrics.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        if everything:
            metrics = {client_metrics.ALL_METRICS}
        inst.metrics = tuple(sorted(metrics))
        inst.push_interval_ms = interval
        digest = crc32c(("[" + ", ".join(inst.metrics) + "]" + str(interval)).encode())
        inst.subscription_id = _int32(digest ^ _java_hash(inst.instance_id))
        inst.subscription_version = self._version

    def _expire(self, now: int) -> None:
        for key in [k for k, i in self._instances.items()
                    if now - i.last_seen_ms > max(EXPIRY_MS, 3 * i.push_interval_ms)]:
            del self._instances[key]

    def get_subscriptions(self, instance_id: uuid.UUID, client_id: str | None, peer: str) -> dict[str, Any]:
        if instance_id.int == 0:
            instance_id = uuid.uuid4()
            for _ in range(100):  # never an id in use (Kafka's generateNewClientId)
                if instance_id not in self._instances:
                    break
                instance_id = uuid.uuid4()
        inst = self._instance(instance_id, client_id, peer)
        now = self.clock.monotonic_ms()
        answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                                  "client_instance_id": instance_id, "subscription_id": inst.subscription_id,
                                  "accepted_compression_types": list(ACCEPTED_COMPRESSION),
                                  "push_interval_ms": inst.push_interval_ms, "telemetry_max_bytes": self.max_bytes,
                                  "delta_temporality": True, "requested_metrics": list(inst.metrics)}
        last = max(inst.last_get_ms, inst.last_push_ms)
        if now - last < inst.push_interval_ms and inst.last_error not in (
                ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            answer.update(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, client_instance_id=uuid.UUID(int=0),
                          subscription_id=0, accepted_compression_types=[], push_interval_ms=0,
                          telemetry_max_bytes=0, requested_metrics=[])
            return answer
        inst.last_get_ms = now
        inst.last_error = ErrorCode.NONE
        return answer

    def push(self, instance_id: uuid.UUID, subscription_id: int, terminating: bool, compression_type: int,
             metrics: bytes | memoryview, client_id: str | None, peer: str) -> ErrorCode:
        if instance_id.int in (0, 1):  # Kafka's reserved ids (zero and one)
            return ErrorCode.INVALID_REQUEST
        inst = self._instance(instance_id, client_id, peer)
        error = self._check_push(inst, subscription_id, terminating, compression_type, len(metrics))
        inst.terminating = terminating
        if error:
            inst.last_error = error
            return error
        if len(metrics):
            try:
                raw = metrics if compression_type == compression.NONE else \
                    compression.decompress(compression_type, metrics, self.max_bytes)
                data = otlp.decode(raw)
            except compression.CorruptRecordError as e:
                inst.last_error = (ErrorCode.TELEMETRY_TOO_LARGE if "exceeds" in str(e)
                                   else ErrorCode.INVALID_RECORD)
                return inst.last_error
            except ValueError:
                inst.last_error = ErrorCode.INVALID_RECORD
                return inst.last_error
            del data.metrics[MAX_METRICS:]
            inst.latest, inst.latest_at_ms = data, self.clock.wall_ms()
            inst.pushes += 1
            inst.bytes_pushed += len(metrics)
            inst.last_compression = compression_type
        inst.last_error = ErrorCode.NONE
        return ErrorCode.NONE

    def _check_push(self, inst: ClientInstance, subscription_id: int, terminating: bool,
                    compression_type: int, size: int) -> ErrorCode:
        if inst.terminating:
            return ErrorCode.INVALID_REQUEST
        now = self.clock.monotonic_ms()
        on_time = inst.last_get_ms > inst.last_push_ms or now - inst.last_push_ms >= inst.push_interval_ms
        if on_time:
            inst.last_push_ms = now
        elif not terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if subscription_id != inst.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if compression_type not in KNOWN_COMPRESSION:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if size > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE

    def instances(self) -> list[dict[str, Any]]:
        """Every client instance known, most recently seen last (`kshim ctl telemetry`)."""
        self._expire(self.clock.monotonic_ms())
        return [inst.view() for inst in self._instances.values()]


def _java_hash(u: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the XOR of its two longs, folded to an int."""
    msb, lsb = u.int >> 64, u.int & ((1 << 64) - 1)
    h = msb ^ lsb
    return (h >> 32) ^ (h & 0xFFFFFFFF)


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


__all__ = ["TelemetryManager", "ClientInstance"]
