"""A minimal Kafka client connection for broker-to-broker requests (followers fetching from
leaders, transaction markers). Sequential: one request in flight; the wire layer does the encoding.
Without TLS it drives its non-blocking socket itself (kshim.sockets): an anyio stream costs a
checkpoint, a loop turn, per 64 KiB received and a copy into its buffer, on the path of every
follower fetch.

In a cluster whose inter-broker listener has TLS or SASL (docs/security.md), the broker process
sets `BrokerConnection.inter_broker` once at start: every connection then speaks TLS (trusting the
cluster's CA) and authenticates with SASL PLAIN or SCRAM as the inter-broker user before its
first request."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import os
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from construct import Container

from kshim.security.config import SecurityConfig
from kshim.sockets import ReadWaiter, send_buffers
from wire import codec
from wire.headers import decode_response_header, encode_request_header, frame

MAX_RESPONSE_BYTES = 512 * 1024 * 1024
RECEIVE_STEP = 64 * 1024  # a response's first buffer; it doubles as bytes arrive
# what a lost or broken broker connection raises: the caller reconnects and retries
CONNECTION_LOST = (OSError, anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                   anyio.ClosedResourceError, TimeoutError, ConnectionError)


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationError(ConnectionError):
    """The peer refused this broker's SASL credentials (a misconfiguration, retried like a lost peer)."""


@dataclass(frozen=True)
class ClientSecurity:
    """How this broker connects to the others: TLS (a context trusting the cluster's CA) and SASL."""
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None  # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    username: str = ""
    password: str = field(default="", repr=False)


def _scram_exchange(mechanism: str, username: str, password: str):
    """RFC 5802's client side as a generator: yields each client message, is sent each server one."""
    algo = _HASHES[mechanism]
    nonce = base64.b64encode(os.urandom(24)).decode()
    name = username.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = (yield f"n,,{first_bare}".encode()).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    if not attrs.get("r", "").startswith(nonce):
        raise AuthenticationError("SCRAM: the server's nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(algo, client_key).digest(), auth, algo).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server_final = (yield f"{without_proof},p={proof}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    expected = base64.b64encode(hmac.new(server_key, auth, algo).digest()).decode()
    if server_final != f"v={expected}":
        raise AuthenticationError("SCRAM: the server's signature does not match")
    yield b""


class BrokerConnection:
    inter_broker: ClassVar[ClientSecurity | None] = None  # set once per broker process (see above)

    def __init__(self, host: str, port: int, client_id: str, security: ClientSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security if security is not None else BrokerConnection.inter_broker
        self._stream: anyio.abc.ByteStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._sock: socket.socket | None = None  # without TLS: the socket, driven directly
        self._waiter: ReadWaiter | None = None
        self._ids = itertools.count(1)

    async def connect(self, timeout_s: float = 5.0) -> None:
        """Connect (and authenticate); on any failure nothing stays open: callers drop a
        connection that failed to connect without closing it."""
        sec = self.security
        try:
            with anyio.fail_after(timeout_s):
                if sec is not None and sec.tls is not None:
                    self._stream = await anyio.connect_tcp(self.host, self.port, ssl_context=sec.tls,
                                                           tls_standard_compatible=False)
                    self._reader = BufferedByteReceiveStream(self._stream)
                else:
                    self._sock = await _open_socket(self.host, self.port)
                    self._waiter = ReadWaiter(self._sock)
                if sec is not None and sec.mechanism is not None:
                    await self._authenticate(sec)
        except BaseException:
            # the socket's selector registration (ReadWaiter) would keep it open past the caller
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise

    async def _authenticate(self, sec: ClientSecurity) -> None:
        assert sec.mechanism is not None
        answer = await self.request(SASL_HANDSHAKE, 1, {"mechanism": sec.mechanism})
        if answer.error_code:
            raise AuthenticationError(f"SaslHandshake {sec.mechanism} to {self.host}:{self.port}: "
                                      f"error {answer.error_code}")
        exchange = None
        if sec.mechanism == "PLAIN":
            token = f"\0{sec.username}\0{sec.password}".encode()
        else:
            exchange = _scram_exchange(sec.mechanism, sec.username, sec.password)
            token = next(exchange)
        while True:
            answer = await self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if answer.error_code:
                raise AuthenticationError(f"SASL {sec.mechanism} to {self.host}:{self.port}: "
                                          f"{answer.error_message or answer.error_code}")
            if exchange is None:
                return
            token = exchange.send(bytes(answer.auth_bytes))
            if not token:
                return

    async def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Container:
        correlation_id = next(self._ids)
        payload = encode_request_header(api_key, version, correlation_id, self.client_id) + \
            codec.encode(api_key, version, "request", body)
        await self._send(frame(payload))
        (size,) = struct.unpack(">i", await self._receive_exactly(4))
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise ConnectionError(f"response frame size {size} from {self.host}:{self.port}")
        data = memoryview(await self._receive_exactly(size))
        got, header_size = decode_response_header(api_key, version, data)
        if got != correlation_id:
            raise ConnectionError(f"correlation id {got} answered request {correlation_id}")
        return codec.decode(api_key, version, "response", data[header_size:])

    async def _send(self, data: bytes) -> None:
        if self._sock is None:
            assert self._stream is not None, "not connected"
            await self._stream.send(data)
            return
        try:
            await send_buffers(self._sock, [data])
        except ConnectionError as e:  # a reset or a closed peer: what an anyio stream raises
            raise anyio.BrokenResourceError from e

    async def _receive_exactly(self, n: int) -> bytes | bytearray:
        if self._sock is None:
            assert self._reader is not None, "not connected"
            return await self._reader.receive_exactly(n)
        assert self._waiter is not None
        # memory follows the bytes that arrived, never the size the peer claimed (up to
        # MAX_RESPONSE_BYTES): the buffer starts small and doubles as it fills
        buf = bytearray(min(n, RECEIVE_STEP))
        got = 0
        while got < n:
            if got == len(buf):
                buf += bytes(min(len(buf), n - len(buf)))
            try:
                with memoryview(buf) as view, view[got:] as rest:
                    k = self._sock.recv_into(rest)
            except BlockingIOError:
                await self._waiter.wait()
                continue
            except ConnectionError as e:
                raise anyio.BrokenResourceError from e
            if not k:
                raise anyio.IncompleteRead  # as BufferedByteReceiveStream.receive_exactly
            got += k
        return buf

    async def aclose(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = self._reader = None
        if self._sock is not None:
            assert self._waiter is not None
            self._waiter.close()
            self._sock.close()
            self._sock = self._waiter = None


async def _open_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket (TCP_NODELAY, as asyncio's streams set it)."""
    loop = asyncio.get_running_loop()
    failure: OSError = OSError(f"no address for {host}:{port}")
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
            return sock
        except OSError as e:
            sock.close()
            failure = e
        except BaseException:
            sock.close()
            raise
    raise failure


def inter_broker_client(config: SecurityConfig) -> ClientSecurity | None:
    """How this broker reaches the others on the inter-broker listener; None for PLAINTEXT."""
    listener = config.inter_broker()
    if listener is None or listener.protocol == "PLAINTEXT":
        return None
    tls = None
    if listener.tls:
        from kshim.security.tls import client_context  # start-up: cryptography loads only for TLS
        # the listener's CAs; its own certificate when that listener asks for client certificates
        tls = client_context(config, listener, None)
    user = config.inter_broker_user or ""
    return ClientSecurity(tls, config.inter_broker_mechanism if listener.sasl else None, user,
                          config.users.get(user, ""))


class BrokerConnections:
    """One connection to each other broker with one request in flight on it: how the coordinators
    reach other brokers (transaction markers, transaction verification, share-group state). A
    connection whose broker moved to another address is replaced; one whose request failed or was
    cancelled (its answer may still come) is closed, and the next request opens a new one."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, anyio.Lock] = {}

    async def request(self, node_id: int, host: str, port: int, api_key: int, version: int,
                      body: Mapping[str, Any], timeout_s: float) -> Container:
        """The answer of broker `node_id` within `timeout_s` once this request's turn came; raises
        what the connection raised (CONNECTION_LOST; TimeoutError is one) after closing it."""
        async with self._locks.setdefault(node_id, anyio.Lock()):
            conn = self._connections.get(node_id)
            try:
                with anyio.fail_after(timeout_s):
                    if conn is None or (conn.host, conn.port) != (host, port):
                        await self.drop(node_id)
                        conn = BrokerConnection(host, port, self.client_id)
                        self._connections[node_id] = conn
                        await conn.connect()
                    return await conn.request(api_key, version, body)
            except BaseException:
                await self.drop(node_id)
                raise

    async def drop(self, node_id: int) -> None:
        conn = self._connections.pop(node_id, None)
        if conn is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await conn.aclose()
                except OSError:
                    pass

    async def aclose(self) -> None:
        for node_id in list(self._connections):
            await self.drop(node_id)
