"""Just enough of OpenTelemetry's OTLP MetricsData (protobuf, opentelemetry/proto/metrics/v1) to show
what a client pushed with PushTelemetry (KIP-714): per metric its name, kind and latest data
points (value and attributes), and the resource attributes. A small protobuf wire-format reader,
so kshim needs no protobuf package; unknown fields are skipped, as protobuf readers do.

Raises ValueError on bytes that are not a well-formed message.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator

from wire.primitives import DecodeError, uvarint_at

VARINT, I64, LEN, I32 = 0, 1, 2, 5
MAX_POINTS_PER_METRIC = 16  # kept per metric: the newest pushes are what a person looks at


@dataclass
class Point:
    value: float | int | None  # a gauge's or sum's value; a histogram's or summary's sum
    attributes: dict[str, str] = field(default_factory=dict)
    count: int | None = None  # histograms and summaries
    time_unix_nano: int = 0


@dataclass
class Metric:
    name: str
    kind: str  # gauge, sum, histogram, exponential_histogram, summary
    unit: str = ""
    points: list[Point] = field(default_factory=list)


@dataclass
class MetricsData:
    resource: dict[str, str] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    try:
        return uvarint_at(buf, pos, 10)
    except DecodeError as e:  # this module's callers expect ValueError
        raise ValueError(str(e)) from None


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value): an int for VARINT/I64/I32, a view for LEN."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == VARINT:
            value, pos = _varint(buf, pos)
        elif wire == I64:
            if pos + 8 > len(buf):
                raise ValueError("truncated fixed64")
            value = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == I32:
            if pos + 4 > len(buf):
                raise ValueError("truncated fixed32")
            value = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        elif wire == LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated length-delimited field")
            value = buf[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _text(v: int | memoryview) -> str:
    return bytes(v).decode("utf-8", "replace") if isinstance(v, memoryview) else str(v)


def _double(v: int | memoryview) -> float:
    return struct.unpack("<d", struct.pack("<Q", v))[0] if isinstance(v, int) else 0.0


def _signed64(v: int | memoryview) -> int:
    return struct.unpack("<q", struct.pack("<Q", v))[0] if isinstance(v, int) else 0


def _any_value(buf: memoryview) -> str:
    for number, _, v in _fields(buf):  # AnyValue: string 1, bool 2, int 3, double 4, ...
        if number == 1:
            return _text(v)
        if number == 2 and isinstance(v, int):
            return "true" if v else "false"
        if number == 3 and isinstance(v, int):
            return str(v if v < 1 << 63 else v - (1 << 64))
        if number == 4:
            return repr(_double(v))
    return ""


def _key_value(buf: memoryview) -> tuple[str, str]:
    key = value = ""
    for number, _, v in _fields(buf):
        if number == 1:
            key = _text(v)
        elif number == 2 and isinstance(v, memoryview):
            value = _any_value(v)
    return key, value


def _point(buf: memoryview, kind: str) -> Point:
    point = Point(None)
    for number, _, v in _fields(buf):
        if number == 7 and kind in ("gauge", "sum") and isinstance(v, memoryview) \
                or number == 9 and kind not in ("gauge", "sum") and isinstance(v, memoryview):
            k, val = _key_value(v)
            point.attributes[k] = val
        elif number == 3:
            point.time_unix_nano = v if isinstance(v, int) else 0
        elif kind in ("gauge", "sum"):
            if number == 4:  # as_double
                point.value = _double(v)
            elif number == 6:  # as_int (sfixed64)
                point.value = _signed64(v)
        elif number == 4 and isinstance(v, int):  # count (fixed64) of histograms and summaries
            point.count = v
        elif number == 5 and isinstance(v, int):  # sum (double)
            point.value = _double(v)
    return point


_KINDS = {5: "gauge", 7: "sum", 9: "histogram", 10: "exponential_histogram", 11: "summary"}


def _metric(buf: memoryview) -> Metric:
    metric = Metric("", "")
    for number, _, v in _fields(buf):
        if number == 1:
            metric.name = _text(v)
        elif number == 3:
            metric.unit = _text(v)
        elif number in _KINDS and isinstance(v, memoryview):
            metric.kind = _KINDS[number]
            for n, _, p in _fields(v):
                if n == 1 and isinstance(p, memoryview) and len(metric.points) < MAX_POINTS_PER_METRIC:
                    metric.points.append(_point(p, metric.kind))
    return metric


def decode(data: bytes | memoryview) -> MetricsData:
    """MetricsData: resource_metrics (1) -> resource (1) attributes (1), scope_metrics (2) -> metrics (2)."""
    out = MetricsData()
    for number, _, rm in _fields(memoryview(data)):
        if number != 1 or not isinstance(rm, memoryview):
            continue
        for n, _, v in _fields(rm):
            if n == 1 and isinstance(v, memoryview):
                for a, _, kv in _fields(v):
                    if a == 1 and isinstance(kv, memoryview):
                        k, val = _key_value(kv)
                        out.resource[k] = val
            elif n == 2 and isinstance(v, memoryview):
                for s, _, m in _fields(v):
                    if s == 2 and isinstance(m, memoryview):
                        out.metrics.append(_metric(m))
    return out
