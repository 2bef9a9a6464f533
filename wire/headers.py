"""Request and response headers, framing, and the two header quirks Kafka has.

- Request header v1 and v2 carry ClientId with the classic int16 length prefix even in flexible
  versions (v2 = v1 + tagged fields).
- ApiVersions responses always use response header v0 (no tagged fields), so that a client that
  sent a version the broker does not know can still read the error.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from wire.codec import is_flexible
from wire.primitives import DecodeError, encode_uvarint, uvarint_at
from wire.schema.messages import MESSAGES

API_VERSIONS_KEY = 18
_FIXED = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int  # bytes before the body
    tagged: dict[int, bytes] = field(default_factory=dict)


def request_header_version(api_key: int, version: int) -> int:
    return 2 if _flexible_or_false(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if _flexible_or_false(api_key, version) else 0


def _flexible_or_false(api_key: int, version: int) -> bool:
    flexible = _FLEXIBLE.get((api_key, version))
    if flexible is None:  # once per API and version (twice a request otherwise: header in, header out)
        flexible = (api_key, "request") in MESSAGES and is_flexible(api_key, version)
        if 0 <= version < 128 and (api_key, "request") in MESSAGES:  # bounded: a peer picks these
            _FLEXIBLE[(api_key, version)] = flexible
    return flexible


_FLEXIBLE: dict[tuple[int, int], bool] = {}


def decode_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse the header at the start of a request frame (without its size prefix).

    The header version depends on whether (api_key, version) is flexible; an api key or version
    unknown to the schema is parsed as header v1, which is all the caller needs to answer it.
    """
    if len(frame) < 10:
        raise DecodeError(f"request header needs at least 10 bytes, got {len(frame)}")
    api_key, api_version, correlation_id = _FIXED.unpack_from(frame, 0)
    (n,) = struct.unpack_from(">h", frame, 8)
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise DecodeError("client id longer than the frame")
        try:
            client_id = bytes(frame[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("client id is not UTF-8") from None
        pos += n
    elif n != -1:
        raise DecodeError(f"invalid client id length {n}")
    tagged: dict[int, bytes] = {}
    if request_header_version(api_key, api_version) >= 2:
        count, pos = uvarint_at(frame, pos)
        for _ in range(count):
            tag, pos = uvarint_at(frame, pos)
            size, pos = uvarint_at(frame, pos)
            if pos + size > len(frame):
                raise DecodeError("tagged field longer than the frame")
            tagged[tag] = bytes(frame[pos:pos + size])
            pos += size
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, tagged)


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    out = bytearray(_FIXED.pack(api_key, api_version, correlation_id))
    if client_id is None:
        out += b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        out += struct.pack(">h", len(raw)) + raw
    if request_header_version(api_key, api_version) >= 2:
        out += b"\x00"
    return bytes(out)


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    head = _SIZE.pack(correlation_id)
    return head + b"\x00" if response_header_version(api_key, api_version) >= 1 else head


def decode_response_header(api_key: int, api_version: int, frame: bytes | memoryview) -> tuple[int, int]:
    """(correlation id, header size) of a response frame."""
    if len(frame) < 4:
        raise DecodeError(f"response header needs at least 4 bytes, got {len(frame)}")
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        count, pos = uvarint_at(frame, pos)
        for _ in range(count):
            _, pos = uvarint_at(frame, pos)
            size, pos = uvarint_at(frame, pos)
            pos += size
            if pos > len(frame):
                raise DecodeError("tagged field longer than the frame")
    return correlation_id, pos


def frame(payload: bytes) -> bytes:
    """Prefix with the int32 size, as every Kafka frame is."""
    return _SIZE.pack(len(payload)) + payload


__all__ = [
    "RequestHeader", "decode_request_header", "encode_request_header", "encode_response_header",
    "decode_response_header", "request_header_version", "response_header_version", "frame", "encode_uvarint",
]
