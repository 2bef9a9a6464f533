"""Client telemetry (KIP-714): CLIENT_METRICS subscriptions through the config APIs, the
TelemetryManager's rules for GetTelemetrySubscriptions and PushTelemetry (ids, intervals, error
codes, bounded memory), and the OTLP decoding of what clients push."""
from __future__ import annotations

import importlib
import struct
import uuid

import pytest

from kshim.broker import BrokerConfig
from kshim.clock import ManualClock
from kshim.ctl.telemetry import render
from kshim.net.handlers import RequestContext
from kshim.observability import otlp, telemetry
from kshim.observability.telemetry import TelemetryManager
from kshim.standalone import open_standalone
from tests.nodes import served
from wire import codec, compression
from wire.errors import ErrorCode
from wire.headers import RequestHeader

pytestmark = pytest.mark.unit
get_subs = importlib.import_module("kshim.net.handlers.71_get_telemetry_subscriptions")
push = importlib.import_module("kshim.net.handlers.72_push_telemetry")
describe_configs = importlib.import_module("kshim.net.handlers.32_describe_configs")
incremental_alter = importlib.import_module("kshim.net.handlers.44_incremental_alter_configs")
list_resources = importlib.import_module("kshim.net.handlers.74_list_config_resources")
CLIENT_METRICS = 16
ZERO = uuid.UUID(int=0)


# ---------------------------------------------------------------- a tiny protobuf writer (OTLP)
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fixed64(number: int, raw: bytes) -> bytes:
    return _varint(number << 3 | 1) + raw


def _kv(key: str, value: str) -> bytes:
    return _len(1, key.encode()) + _len(2, _len(1, value.encode()))


def otlp_metrics(*metrics: tuple[str, str, float | int, dict[str, str]]) -> bytes:
    """MetricsData with one resource and one scope; each metric (name, gauge|sum, value, attributes)."""
    encoded = b""
    for name, kind, value, attrs in metrics:
        point = _fixed64(3, struct.pack("<Q", 1_700_000_000_000_000_000))
        point += _fixed64(4, struct.pack("<d", value)) if isinstance(value, float) else _fixed64(6, struct.pack("<q", value))
        point += b"".join(_len(7, _kv(k, v)) for k, v in attrs.items())
        body = _len(1, point) + (_varint(2 << 3) + _varint(2) if kind == "sum" else b"")
        encoded += _len(2, _len(1, name.encode()) + _len(5 if kind == "gauge" else 7, body))
    resource = _len(1, _len(1, _kv("client_software_name", "test-client")))
    return _len(1, resource + _len(2, encoded))


def test_otlp_decoding_reads_names_kinds_values_and_attributes():
    data = otlp.decode(otlp_metrics(("org.apache.kafka.producer.record.send.rate", "gauge", 12.5, {"client_id": "p1"}),
                                    ("org.apache.kafka.producer.bytes", "sum", 4096, {})))
    assert data.resource == {"client_software_name": "test-client"}
    assert [(m.name, m.kind, m.points[0].value, m.points[0].attributes) for m in data.metrics] == [
        ("org.apache.kafka.producer.record.send.rate", "gauge", 12.5, {"client_id": "p1"}),
        ("org.apache.kafka.producer.bytes", "sum", 4096, {})]
    for bad in (b"\x0a\x05ab", b"\x0f", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"):
        with pytest.raises(ValueError):
            otlp.decode(bad)


# ---------------------------------------------------------------- the manager's rules
def manager_with(**subs: dict[str, str]) -> tuple[TelemetryManager, ManualClock]:
    clock = ManualClock()
    manager = TelemetryManager(clock)
    manager.update(subs)
    return manager, clock


def test_no_subscription_means_no_metrics_and_the_default_interval():
    manager, _ = manager_with()
    answer = manager.get_subscriptions(ZERO, "c1", "127.0.0.1:5000")
    assert answer["error_code"] == 0 and answer["client_instance_id"] != ZERO
    assert answer["requested_metrics"] == [] and answer["push_interval_ms"] == 300_000
    assert answer["accepted_compression_types"] == [compression.ZSTD, compression.LZ4, compression.GZIP,
                                                    compression.SNAPPY]
    assert answer["telemetry_max_bytes"] == 1024 * 1024 and answer["delta_temporality"] is True


def test_matching_subscriptions_union_metrics_and_take_the_lowest_interval():
    manager, clock = manager_with(
        a={"metrics": "org.apache.kafka.producer.", "interval.ms": "5000", "match": "client_id=prod-.*"},
        b={"metrics": "org.apache.kafka.consumer.", "interval.ms": "2000"},
        c={"metrics": "*", "interval.ms": "100", "match": "client_software_name=nope"})
    manager.note_software("127.0.0.1:5000", "apache-kafka-java", "4.3.0")
    prod = manager.get_subscriptions(ZERO, "prod-1", "127.0.0.1:5000")
    assert prod["requested_metrics"] == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    assert prod["push_interval_ms"] == 2000
    other = manager.get_subscriptions(ZERO, "other", "127.0.0.1:5001")
    assert other["requested_metrics"] == ["org.apache.kafka.consumer."]
    assert prod["subscription_id"] != other["subscription_id"]
    manager.update({"all": {"metrics": "*,org.x", "interval.ms": "1000"}})
    clock.advance(2.0)
    again = manager.get_subscriptions(prod["client_instance_id"], "prod-1", "127.0.0.1:5000")
    assert again["requested_metrics"] == ["*"] and again["push_interval_ms"] == 1000
    assert again["subscription_id"] != prod["subscription_id"]


def test_push_rules_and_error_codes():
    manager, clock = manager_with(s={"metrics": "*", "interval.ms": "1000"})
    peer = "127.0.0.1:5000"
    sub = manager.get_subscriptions(ZERO, "c", peer)
    instance, sub_id = sub["client_instance_id"], sub["subscription_id"]
    # asked again before the interval: throttled
    assert manager.get_subscriptions(instance, "c", peer)["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    payload = otlp_metrics(("org.apache.kafka.producer.record.send.total", "sum", 7, {}))
    assert manager.push(ZERO, sub_id, False, 0, payload, "c", peer) == ErrorCode.INVALID_REQUEST
    assert manager.push(instance, sub_id + 1, False, 0, payload, "c", peer) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    clock.advance(1.0)
    assert manager.push(instance, sub_id, False, 0, payload, "c", peer) == 0  # the first push after a Get
    assert manager.push(instance, sub_id, False, 0, payload, "c", peer) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.advance(1.0)
    assert manager.push(instance, sub_id, False, 9, payload, "c", peer) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    clock.advance(1.0)
    assert manager.push(instance, sub_id, False, 0, b"\x0f", "c", peer) == ErrorCode.INVALID_RECORD
    clock.advance(1.0)
    assert manager.push(instance, sub_id, False, 0, b"x" * (1024 * 1024 + 1), "c", peer) == ErrorCode.TELEMETRY_TOO_LARGE
    clock.advance(1.0)
    bomb = compression.compress(compression.GZIP, b"\0" * (2 * 1024 * 1024))
    assert manager.push(instance, sub_id, False, compression.GZIP, bomb, "c", peer) == ErrorCode.TELEMETRY_TOO_LARGE
    for codec_id in (compression.GZIP, compression.ZSTD, compression.LZ4, compression.SNAPPY):
        clock.advance(1.0)
        assert manager.push(instance, sub_id, False, codec_id, compression.compress(codec_id, payload), "c", peer) == 0
    [view] = manager.instances()
    assert view["pushes"] == 5 and view["metrics"][0]["name"] == "org.apache.kafka.producer.record.send.total"
    assert view["metrics"][0]["points"][0]["value"] == 7 and view["client_id"] == "c"
    assert "org.apache.kafka.producer.record.send.total" in render([{"node": 0, **view}])
    # a terminating push is on time whenever it comes; nothing is accepted after it
    assert manager.push(instance, sub_id, True, 0, payload, "c", peer) == 0
    assert manager.push(instance, sub_id, False, 0, payload, "c", peer) == ErrorCode.INVALID_REQUEST


def test_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(telemetry, "MAX_INSTANCES", 5)
    manager, clock = manager_with()
    for i in range(20):
        manager.get_subscriptions(ZERO, f"c{i}", f"127.0.0.1:{i}")
    assert [v["client_id"] for v in manager.instances()] == [f"c{i}" for i in range(15, 20)]
    clock.advance(301 * 3)  # three default intervals unseen: dropped
    assert manager.instances() == []


# ---------------------------------------------------------------- through the handlers
@pytest.fixture
def broker(tmp_path):
    b = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield b
    b.close()


async def call(broker, module, version: int, body: dict, client_id: str = "cli"):
    key = module.API_KEY
    req = codec.decode(key, version, "request", codec.encode(key, version, "request", body), exact=True)
    ctx = RequestContext(served(broker), RequestHeader(key, version, 1, client_id, 0), "127.0.0.1:4000", {})
    resp = await module.handle(ctx, req)
    return codec.decode(key, version, "response", codec.encode(key, version, "response", resp), exact=True)


async def alter(broker, name: str, *ops: tuple[str, int, str | None]):
    resp = await call(broker, incremental_alter, 1, {"resources": [{
        "resource_type": CLIENT_METRICS, "resource_name": name,
        "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}], "validate_only": False})
    return resp.responses[0].error_code


@pytest.mark.anyio
async def test_client_metrics_resources_and_the_telemetry_apis(broker):
    assert await alter(broker, "sub", ("metrics", 0, "org.apache.kafka.producer."), ("interval.ms", 0, "100"),
                       ("match", 0, "client_id=cli")) == 0
    assert await alter(broker, "sub", ("metrics", 2, "org.apache.kafka.consumer.")) == 0  # APPEND
    assert await alter(broker, "bad", ("interval.ms", 0, "50")) == ErrorCode.INVALID_CONFIG
    assert await alter(broker, "bad", ("match", 0, "nokey=x")) == ErrorCode.INVALID_CONFIG
    assert await alter(broker, "bad", ("other", 0, "x")) == ErrorCode.INVALID_REQUEST
    resp = await call(broker, describe_configs, 4, {"resources": [
        {"resource_type": CLIENT_METRICS, "resource_name": "sub", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    assert {c.name: (c.value, c.config_source) for c in resp.results[0].configs} == {
        "metrics": ("org.apache.kafka.producer.,org.apache.kafka.consumer.", 7), "interval.ms": ("100", 7),
        "match": ("client_id=cli", 7)}
    listed = await call(broker, list_resources, 1, {"resource_types": [CLIENT_METRICS]})
    assert [(r.resource_name, r.resource_type) for r in listed.config_resources] == [("sub", CLIENT_METRICS)]
    assert [r.resource_name for r in (await call(broker, list_resources, 0, {})).config_resources] == ["sub"]

    sub = await call(broker, get_subs, 0, {"client_instance_id": ZERO})
    assert sub.error_code == 0 and sub.push_interval_ms == 100
    assert sorted(sub.requested_metrics) == ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
    payload = otlp_metrics(("org.apache.kafka.producer.node.request.latency.avg", "gauge", 3.5, {"node_id": "0"}))
    pushed = await call(broker, push, 0, {"client_instance_id": sub.client_instance_id,
                                          "subscription_id": sub.subscription_id, "terminating": False,
                                          "compression_type": compression.ZSTD,
                                          "metrics": compression.compress(compression.ZSTD, payload)})
    assert pushed.error_code == 0
    [view] = served(broker).telemetry.instances()
    assert view["metrics"][0]["points"][0]["value"] == 3.5
    # the subscription goes: a push under the old id is UNKNOWN_SUBSCRIPTION_ID
    assert await alter(broker, "sub", ("metrics", 1, None), ("interval.ms", 1, None), ("match", 1, None)) == 0
    assert broker.image.client_metrics == {}
    pushed = await call(broker, push, 0, {"client_instance_id": sub.client_instance_id,
                                          "subscription_id": sub.subscription_id, "terminating": True,
                                          "compression_type": 0, "metrics": payload})
    assert pushed.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
