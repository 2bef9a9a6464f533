"""The connection core, with no I/O: bytes in, requests out; responses in, bytes out.

The server feeds it whatever the socket gave and asks for complete requests; tests feed it bytes
directly. It enforces the frame rules that decide whether a connection may go on:
- a negative frame size, or one above max_request_bytes, is fatal (ProtocolError);
- an unparsable header or an api key that is not served is fatal;
- ApiVersions at a version outside what is served is NOT fatal: it yields a request marked
  `unsupported`, answered with UNSUPPORTED_VERSION in a v0 body so any client can read it;
- any other api at an unsupported version, or a body that does not parse, is fatal, as in Kafka.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from construct import Container

from wire import codec
from wire.headers import API_VERSIONS_KEY, RequestHeader, decode_request_header, encode_response_header
from wire.primitives import DecodeError

_SIZE = struct.Struct(">i")


class ProtocolError(Exception):
    """The peer broke the framing or sent something unanswerable: close this connection only."""


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: Container | None  # None when `unsupported`
    size: int
    unsupported: bool = False

    @property
    def response_version(self) -> int:
        return 0 if self.unsupported else self.header.api_version


class ConnectionCore:
    def __init__(self, supported: Mapping[int, tuple[int, int]], max_request_bytes: int) -> None:
        self.supported = supported
        self.max_request_bytes = max_request_bytes
        self._buf = bytearray()
        self._pos = 0  # consumed prefix of _buf, compacted lazily to avoid quadratic copying

    def receive_data(self, data: bytes) -> None:
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_request(self) -> Request | None:
        """The next complete request, or None if more bytes are needed. Raises ProtocolError."""
        if self.buffered < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        if size < 0 or size > self.max_request_bytes:
            raise ProtocolError(f"frame size {size} is outside [0, {self.max_request_bytes}]")
        if self.buffered < 4 + size:
            return None
        start = self._pos + 4
        frame = memoryview(self._buf)[start:start + size]
        try:
            return self._parse(frame, size)
        finally:
            frame.release()
            self._pos = start + size

    def _parse(self, frame: memoryview, size: int) -> Request:
        try:
            header = decode_request_header(frame)
        except DecodeError as e:
            raise ProtocolError(f"unparsable request header: {e}") from None
        served = self.supported.get(header.api_key)
        if served is None:
            raise ProtocolError(f"api key {header.api_key} is not served")
        in_range = served[0] <= header.api_version <= served[1]
        if not in_range:
            if header.api_key == API_VERSIONS_KEY:
                return Request(header, None, size, unsupported=True)
            raise ProtocolError(f"api key {header.api_key} v{header.api_version} is outside {served}")
        try:
            body = codec.decode(header.api_key, header.api_version, "request", frame[header.header_size:])
        except DecodeError as e:
            raise ProtocolError(f"api key {header.api_key} v{header.api_version}: bad body: {e}") from None
        return Request(header, body, size)

    @staticmethod
    def response_bytes(request: Request, body: Mapping[str, Any]) -> memoryview:
        """A whole response frame (size prefix, header, body), written once into one buffer:
        fetch responses carry megabytes of records, so avoid concatenating copies."""
        h = request.header
        version = request.response_version
        stream = io.BytesIO()
        stream.write(b"\0\0\0\0")
        stream.write(encode_response_header(h.api_key, version, h.correlation_id))
        codec.encode_into(h.api_key, version, "response", body, stream)
        view = stream.getbuffer()
        _SIZE.pack_into(view, 0, len(view) - 4)
        return view
