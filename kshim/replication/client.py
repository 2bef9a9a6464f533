"""A minimal Kafka client connection for broker-to-broker requests (followers fetching from
leaders). Sequential: one request in flight; the wire layer does the encoding."""
from __future__ import annotations

import itertools
import struct
from typing import Any, Mapping

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from construct import Container

from wire import codec
from wire.headers import decode_response_header, encode_request_header, frame

MAX_RESPONSE_BYTES = 512 * 1024 * 1024
# what a lost or broken broker connection raises: the caller reconnects and retries
CONNECTION_LOST = (OSError, anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                   anyio.ClosedResourceError, TimeoutError, ConnectionError)


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._ids = itertools.count(1)

    async def connect(self, timeout_s: float = 5.0) -> None:
        with anyio.fail_after(timeout_s):
            self._stream = await anyio.connect_tcp(self.host, self.port)
        self._reader = BufferedByteReceiveStream(self._stream)

    async def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Container:
        assert self._stream is not None and self._reader is not None, "not connected"
        correlation_id = next(self._ids)
        payload = encode_request_header(api_key, version, correlation_id, self.client_id) + \
            codec.encode(api_key, version, "request", body)
        await self._stream.send(frame(payload))
        (size,) = struct.unpack(">i", await self._reader.receive_exactly(4))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise ConnectionError(f"response frame size {size} from {self.host}:{self.port}")
        data = await self._reader.receive_exactly(size)
        got, header_size = decode_response_header(api_key, version, data)
        if got != correlation_id:
            raise ConnectionError(f"correlation id {got} answered request {correlation_id}")
        return codec.decode(api_key, version, "response", memoryview(data)[header_size:])

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = self._reader = None
