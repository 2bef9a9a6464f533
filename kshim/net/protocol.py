"""The connection core, with no I/O: bytes in, requests out; responses in, bytes out.

The server feeds it whatever the socket gave and asks for complete requests; tests feed it bytes
directly. It enforces the frame rules that decide whether a connection may go on:
- a negative frame size, or one above max_request_bytes, is fatal (ProtocolError); on a SASL
  listener, before authentication, the limit is Kafka's sasl.server.max.receive.size (512 KiB), so
  an unauthenticated peer cannot make the broker take in large frames;
- an unparsable header or an api key that is not served is fatal;
- ApiVersions at a version outside what is served is NOT fatal: it yields a request marked
  `unsupported`, answered with UNSUPPORTED_VERSION in a v0 body so any client can read it;
- any other api at an unsupported version, or a body that does not parse, is fatal, as in Kafka;
- on a SASL listener, a request its ConnectionSecurity does not admit yet (anything but
  ApiVersions and the SASL exchange before authentication) is fatal; after SaslHandshake v0 the
  next frames are bare SASL tokens, handed on as `raw` SaslAuthenticate v0 requests.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any, Mapping

from construct import Container

from kshim.security.session import SASL_AUTHENTICATE_KEY, ConnectionSecurity
from wire import codec
from wire.headers import API_VERSIONS_KEY, RequestHeader, decode_request_header, encode_response_header
from wire.primitives import DecodeError, GatherStream

_SIZE = struct.Struct(">i")
# resizes a bytearray in place without zeroing what is added: `frame += bytes(n)` wrote every
# added byte twice more (the zeroes, then their copy) on the event loop, 7% of a produce
# benchmark's samples; recv fills the added bytes before a frame is handed out
_resize = ctypes.pythonapi.PyByteArray_Resize
_resize.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
_resize.restype = ctypes.c_int
SASL_MAX_RECEIVE_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size: frames before authentication


class Encoded(dict):
    """A response body that carries its encoding at one version, for answers that repeat word for
    word (ApiVersions): encoded once, sent as those bytes while its throttle_time_ms is still the
    one encoded (a quota may raise it on the way out; then it is encoded afresh). The mapping stays
    the body, for the request log and anything else that reads it."""
    __slots__ = ("version", "data", "throttle", "memo")

    def __init__(self, api_key: int, version: int, body: Mapping[str, Any]) -> None:
        super().__init__(body)
        stream = GatherStream()
        codec.encode_into(api_key, version, "response", body, stream)
        self.version, self.data, self.throttle = version, b"".join(stream.finish()), body.get("throttle_time_ms")
        # what others derive from the body once for all its copies (the request log's error codes)
        self.memo: dict[str, Any] = {}

    def copy(self) -> "Encoded":
        """Another body with the same encoding (what a handler returns: a quota may change it)."""
        other = Encoded.__new__(Encoded)
        dict.update(other, self)
        other.version, other.data, other.throttle, other.memo = self.version, self.data, self.throttle, self.memo
        return other


class ProtocolError(Exception):
    """The peer broke the framing or sent something unanswerable: close this connection only."""


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: Container | None  # None when `unsupported`
    size: int
    unsupported: bool = False
    started: float = 0.0  # when the server began handling it (its clock), for the request-time metric
    raw: bool = False  # a bare SASL token (after SaslHandshake v0): answered with a bare token


    @property
    def response_version(self) -> int:
        return 0 if self.unsupported else self.header.api_version


class ConnectionCore:
    """Bytes in, requests out, without copying records more than once.

    The network layer asks `receive_buffer()` where the next bytes should land, reads into it
    (recv_into) and reports `received(n)`; tests may call `receive_data(bytes)` instead. Small
    frames collect in a receive buffer and are copied out once; a large frame (a produce of
    megabytes) gets a bytearray of its own once its size is known, and the rest of it is read
    straight into place. Decoding is zero-copy over that frame, so records reach the log as views
    into it.

    Memory follows the bytes that arrived, never a claimed size: the receive buffer starts small
    and grows only when a read fills it (doubling, or to the size of the small frame in it, under
    LARGE_FRAME, so that the rest of it is one read); a large frame's buffer starts at what arrived
    and doubles as more arrives, up to its size (realloc of a large block remaps, it does not copy).
    `release_idle()` gives a grown, empty receive buffer back.
    """

    LARGE_FRAME = 64 * 1024
    INITIAL_BUFFER = 8 * 1024
    FRAME_STEP = 64 * 1024  # a large frame's first buffer holds at least this much

    def __init__(self, supported: Mapping[int, tuple[int, int]], max_request_bytes: int,
                 security: ConnectionSecurity | None = None) -> None:
        self.supported = supported
        self.security = security  # None: every request is admitted (no SASL on this connection)
        self.max_request_bytes = max_request_bytes
        self._buf = bytearray(self.INITIAL_BUFFER)
        self._pos = 0  # start of unconsumed bytes in _buf
        self._end = 0  # end of received bytes in _buf
        self._frame: bytearray | None = None  # a large frame being filled in place
        self._frame_size = 0  # its final size
        self._filled = 0
        self._ready: bytearray | None = None  # a large frame complete, not yet taken

    def receive_buffer(self) -> memoryview:
        """Where the next received bytes go; release the view before calling `received`."""
        if self._frame is not None:
            if self._filled == len(self._frame):
                _resize(self._frame, min(self._frame_size, 2 * len(self._frame)))
            return memoryview(self._frame)[self._filled:]
        if self._end == len(self._buf):
            pending = self._end - self._pos
            if self._pos:
                self._buf[:pending] = self._buf[self._pos:self._end]  # same size: a move, no resize
                self._pos, self._end = 0, pending
            if self._end == len(self._buf):
                # full of one incomplete small frame, or of requests not taken yet (receive_data in
                # tests: the server takes every complete request after each read)
                grow = len(self._buf)
                if pending >= 4:  # a small frame's size is known: room for the rest of it at once
                    (size,) = _SIZE.unpack_from(self._buf, 0)
                    if 0 <= size < self.LARGE_FRAME:
                        grow = max(grow, 4 + size - len(self._buf))
                self._buf += bytes(grow)
        return memoryview(self._buf)[self._end:]

    def received(self, n: int) -> None:
        if self._frame is None:
            self._end += n
            return
        self._filled += n
        if self._filled == self._frame_size:
            # complete: it precedes every byte that lands in _buf from now on
            self._ready = self._frame
            self._frame, self._filled = None, 0

    def release_idle(self) -> None:
        """Nothing is buffered and the peer is quiet: shrink a grown receive buffer back."""
        if self._pos == self._end and len(self._buf) > self.INITIAL_BUFFER:
            self._buf = bytearray(self.INITIAL_BUFFER)
            self._pos = self._end = 0

    @property
    def in_frame(self) -> bool:
        """Part of a request has arrived and the rest has not: the peer owes bytes."""
        return self._frame is not None or self._end > self._pos

    @property
    def frame_size(self) -> int:
        """The size of the large frame being received in place, 0 if none."""
        return self._frame_size if self._frame is not None else 0

    @property
    def memory(self) -> int:
        """Bytes this connection holds for requests (buffers, whatever they contain)."""
        return len(self._buf) + (len(self._frame) if self._frame is not None else 0) + \
            (len(self._ready) if self._ready is not None else 0)

    def receive_data(self, data: bytes) -> None:
        """Feed bytes that were read elsewhere (tests, other transports)."""
        with memoryview(data) as rest:
            while rest:
                with self.receive_buffer() as target:
                    n = min(len(target), len(rest))
                    target[:n] = rest[:n]
                self.received(n)
                rest = rest[n:]

    @property
    def buffered(self) -> int:
        return self._end - self._pos + self._filled + (len(self._ready) if self._ready is not None else 0)

    def next_request(self) -> Request | None:
        """The next complete request, or None if more bytes are needed. Raises ProtocolError."""
        if self._ready is not None:
            frame, self._ready = self._ready, None
            return self._parse(frame, len(frame))
        if self._frame is not None:
            return None
        available = self._end - self._pos
        if available < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        limit = self.max_request_bytes
        if self.security is not None and not self.security.authenticated:
            limit = min(limit, SASL_MAX_RECEIVE_BYTES)
        if size < 0 or size > limit:
            raise ProtocolError(f"frame size {size} is outside [0, {limit}]")
        start = self._pos + 4
        available -= 4
        if available >= size:
            frame = self._buf[start:start + size]  # a bytearray copy: the frame's own buffer
            self._pos = start + size
            if self._pos == self._end:
                self._pos = self._end = 0
            return self._parse(frame, size)
        if size >= self.LARGE_FRAME:
            # its own buffer, as big as what arrived (and a step more), never its claimed size
            self._frame = bytearray(min(size, max(available, self.FRAME_STEP)))
            self._frame[:available] = self._buf[start:self._end]
            self._frame_size, self._filled = size, available
            self._pos = self._end = 0
            return None
        if len(self._buf) - self._pos < 4 + size:
            # a small frame that does not fit behind _pos: move it to the front (the buffer then
            # grows as its bytes arrive, see receive_buffer)
            self._buf[:available + 4] = self._buf[self._pos:self._end]
            self._pos, self._end = 0, available + 4
        return None

    def _parse(self, frame: bytearray, size: int) -> Request:
        security = self.security
        if security is not None and security.raw_tokens:
            header = RequestHeader(SASL_AUTHENTICATE_KEY, 0, 0, None, 0)
            return Request(header, Container(auth_bytes=bytes(frame)), size, raw=True)
        try:
            header = decode_request_header(frame)
        except DecodeError as e:
            raise ProtocolError(f"unparsable request header: {e}") from None
        served = self.supported.get(header.api_key)
        if served is None:
            raise ProtocolError(f"api key {header.api_key} is not served")
        if security is not None and (refused := security.admit(header.api_key)) is not None:
            raise ProtocolError(refused)
        in_range = served[0] <= header.api_version <= served[1]
        if not in_range:
            if header.api_key == API_VERSIONS_KEY:
                return Request(header, None, size, unsupported=True)
            raise ProtocolError(f"api key {header.api_key} v{header.api_version} is outside {served}")
        try:
            body = codec.decode(header.api_key, header.api_version, "request", memoryview(frame)[header.header_size:])
        except DecodeError as e:
            raise ProtocolError(f"api key {header.api_key} v{header.api_version}: bad body: {e}") from None
        return Request(header, body, size)

    @staticmethod
    def response_bytes(request: Request, body: Mapping[str, Any]) -> list[bytes | bytearray | memoryview]:
        """A whole response frame (size prefix, header, body) as buffers to send in order.
        Records (megabytes in a fetch response) stay their own chunks, never copied here."""
        h = request.header
        if request.raw:
            token = body["auth_bytes"]
            return [_SIZE.pack(len(token)), token]
        version = request.response_version
        stream = GatherStream(b"\0\0\0\0" + encode_response_header(h.api_key, version, h.correlation_id))
        if type(body) is Encoded and body.version == version and body.get("throttle_time_ms") == body.throttle:
            stream.write(body.data)
        else:
            codec.encode_into(h.api_key, version, "response", body, stream)
        chunks = stream.finish()
        _SIZE.pack_into(chunks[0], 0, stream.size - 4)  # the first chunk holds the head: a bytearray
        return chunks
