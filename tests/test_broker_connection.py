"""The broker-to-broker client's own socket path (no TLS): a large answer arriving in pieces, a
peer that goes away halfway, a claimed size never sent, a connect that fails, against a stand-in
broker on a loopback socket in this process."""
from __future__ import annotations

import asyncio
import struct
import tracemalloc
from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio
import pytest

from kshim.replication.client import BrokerConnection, ClientSecurity
from wire import codec
from wire.headers import frame

API_VERSIONS = 18


def answer(correlation_id: int, keys: int) -> bytes:
    body = codec.encode(API_VERSIONS, 0, "response", {
        "error_code": 0, "api_keys": [{"api_key": k % 30000, "min_version": 0, "max_version": k % 7}
                                      for k in range(keys)]})
    return frame(struct.pack(">i", correlation_id) + body)


async def stand_in(reply) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        request = await reader.readexactly(size)
        (correlation_id,) = struct.unpack_from(">i", request, 4)
        await reply(correlation_id, writer)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@asynccontextmanager
async def plain_connection(port: int) -> AsyncIterator[BrokerConnection]:
    conn = BrokerConnection("127.0.0.1", port, "test", security=None)
    conn.security = None  # plaintext (another test may have set the process's inter-broker security)
    await conn.connect()
    try:
        yield conn
    finally:
        await conn.aclose()


@pytest.mark.anyio
async def test_a_large_answer_in_pieces_is_read_whole():
    async def reply(correlation_id: int, writer: asyncio.StreamWriter) -> None:
        data = answer(correlation_id, 200_000)  # 1.2 MB: more than one read, more than the socket holds
        for i in range(0, len(data), 300_000):
            writer.write(data[i:i + 300_000])
            await writer.drain()
            await asyncio.sleep(0.01)

    server, port = await stand_in(reply)
    async with server, plain_connection(port) as conn:
        assert conn._sock is not None  # the socket path, not an anyio stream
        with anyio.fail_after(10):
            got = await conn.request(API_VERSIONS, 0, {})
        assert len(got.api_keys) == 200_000
        assert (got.api_keys[-1].api_key, got.api_keys[-1].max_version) == (199_999 % 30000, 199_999 % 7)


@pytest.mark.anyio
async def test_a_peer_gone_halfway_is_an_incomplete_read():
    async def reply(correlation_id: int, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(correlation_id, 1000)[:100])  # the size says more: then the end
        await writer.drain()

    server, port = await stand_in(reply)
    async with server, plain_connection(port) as conn:
        with anyio.fail_after(10), pytest.raises(anyio.IncompleteRead):
            await conn.request(API_VERSIONS, 0, {})


@pytest.mark.anyio
async def test_a_claimed_size_is_not_allocated_before_its_bytes_arrive():
    """A peer that announces a 500 MiB answer and sends 100 bytes: the client holds about what
    arrived, not the claim (as the server's ConnectionCore does for requests)."""
    async def reply(correlation_id: int, writer: asyncio.StreamWriter) -> None:
        writer.write(struct.pack(">ii", 500 * 1024 * 1024, correlation_id) + bytes(96))
        await writer.drain()

    server, port = await stand_in(reply)
    async with server, plain_connection(port) as conn:
        tracemalloc.start()
        try:
            with anyio.fail_after(10), pytest.raises(anyio.IncompleteRead):
                await conn.request(API_VERSIONS, 0, {})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"{peak} bytes allocated for a 100-byte answer"


@pytest.mark.anyio
async def test_a_connect_that_fails_leaves_nothing_open():
    """SASL to a peer that accepts and never answers: the connect times out, and the socket is
    closed (the peer sees the end) though the caller drops the connection without closing it."""
    ended = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):  # bounded: ends when the client closes
            pass
        ended.set()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        conn = BrokerConnection("127.0.0.1", port, "test",
                                security=ClientSecurity(mechanism="PLAIN", username="u", password="p"))
        with pytest.raises(TimeoutError):
            await conn.connect(timeout_s=0.2)
        assert conn._sock is None
        del conn
        with anyio.fail_after(10):
            await ended.wait()
