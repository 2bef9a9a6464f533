"""A small HTTP/1.1 server over anyio for the console: enough for a browser and a Prometheus scraper.

One request per connection (`Connection: close`; HTTPS with an `ssl_context`), except a
server-sent event stream, which stays open and carries the console's state each time it changes.
Bounded everywhere: the request head (16 KiB) and body (64 KiB, or `max_body_bytes`), the time to
send them (10 s; the TLS handshake's too), and the connections open at once; a request past a bound gets its 4xx answer and the connection is closed. It serves what `routes`
gives; it knows nothing of kshim.
"""
from __future__ import annotations

import json
import logging
import ssl
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream
from anyio.streams.tls import TLSStream

log = logging.getLogger("kshim.console.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 30.0  # a client that stops reading (an event stream's too) is dropped after this
MAX_CONNECTIONS = 64
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 413: "Content Too Large", 415: "Unsupported Media Type",
           422: "Unprocessable Content", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""

    def json(self) -> object:
        return json.loads(self.body or b"null")


@dataclass
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    # a stream of server-sent events instead of a body: each item one event's data, None a keep-alive
    events: Callable[[], AsyncIterator[str | None]] | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: object, status: int = 200) -> "HttpResponse":
        return cls(status, json.dumps(value).encode(), "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200) -> "HttpResponse":
        return cls(status, text.encode())


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class BadRequest(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


async def _read_request(stream: ByteStream, max_body_bytes: int = MAX_BODY_BYTES) -> HttpRequest:
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            raise BadRequest(431, "request head too large")
        chunk = await stream.receive(4096)
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest(431, "request head too large")
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(400, "HTTP/1.x only")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise BadRequest(400, "bad Content-Length") from None
    if length < 0:
        raise BadRequest(400, "bad Content-Length")
    if length > max_body_bytes:
        raise BadRequest(413, f"bodies are limited to {max_body_bytes} bytes")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequest(400, "chunked request bodies are not supported: send Content-Length")
    body = bytearray(rest)
    while len(body) < length:
        body += await stream.receive(65536)
    path, _, query = target.partition("?")
    return HttpRequest(method.upper(), path, query, headers, bytes(body[:length]))


def _head(status: int, content_type: str, length: int | None, extra: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"Content-Type: {content_type}",
             "Cache-Control: no-store", "X-Content-Type-Options: nosniff"]
    if length is not None:
        lines += [f"Content-Length: {length}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class HttpServer:
    def __init__(self, handler: Handler, *, max_body_bytes: int = MAX_BODY_BYTES, name: str = "the console",
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.connections = 0
        self.max_body_bytes, self.name = max_body_bytes, name
        self.ssl_context = ssl_context  # HTTPS: the handshake is bounded like the request

    async def serve(self, host: str, port: int, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on host:port (0: a free one) until cancelled; task_status gets the port bound."""
        try:
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        except OSError as e:
            raise OSError(e.errno, f"{self.name} cannot listen on {host}:{port}: {e.strerror}") from None
        async with listener:
            task_status.started(listener.extra(SocketAttribute.local_port))
            await listener.serve(self._connection)

    async def _connection(self, tcp: SocketStream) -> None:
        async with tcp:
            if self.connections >= MAX_CONNECTIONS:
                await self._send_plain(tcp, 503, "too many connections")
                return
            self.connections += 1
            try:
                stream: ByteStream = tcp
                if self.ssl_context is not None:
                    with anyio.move_on_after(READ_TIMEOUT_S):
                        stream = await TLSStream.wrap(tcp, server_side=True, ssl_context=self.ssl_context,
                                                      standard_compatible=False)
                    if stream is tcp:
                        return
                await self._exchange(stream)
            except (ssl.SSLError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                    ConnectionError):
                pass
            finally:
                self.connections -= 1

    async def _send_plain(self, stream: ByteStream, status: int, text: str) -> None:
        body = (text + "\n").encode()
        try:
            await stream.send(_head(status, "text/plain; charset=utf-8", len(body), {}) + body)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass

    async def _exchange(self, stream: ByteStream) -> None:
        try:
            with anyio.fail_after(READ_TIMEOUT_S):
                request = await _read_request(stream, self.max_body_bytes)
        except TimeoutError:
            return  # nothing complete within the time: just close
        except BadRequest as e:
            await self._send_plain(stream, e.status, str(e))
            return
        try:
            response = await self.handler(request)
        except BadRequest as e:
            response = HttpResponse.text(str(e) + "\n", e.status)
        except Exception:
            log.exception("console: %s %s failed", request.method, request.path)
            response = HttpResponse.text("internal error\n", 500)
        try:
            if response.events is None:
                with anyio.fail_after(SEND_TIMEOUT_S):
                    await stream.send(_head(response.status, response.content_type, len(response.body),
                                            response.headers) + response.body)
                return
            with anyio.fail_after(SEND_TIMEOUT_S):
                await stream.send(_head(200, "text/event-stream", None, {"Connection": "close", **response.headers}))
            async for data in response.events():
                if data is None:  # a comment: finds a browser gone away, keeps proxies from timing out
                    chunk = b": keep-alive\n\n"
                else:
                    chunk = ("".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode()
                with anyio.fail_after(SEND_TIMEOUT_S):
                    await stream.send(chunk)
        except TimeoutError:
            log.info("console: dropping a client that stopped reading")
