"""Control-plane RPC over a unix socket: the controller serves, brokers and `kshim ctl` call.

One connection carries many concurrent requests. The server answers each request in its own
task, as soon as it is done, so answers go out of order and the client matches them to its calls
by correlation id: a broker's heartbeat long-poll, pending for up to its wait, never holds up an
AlterPartition or a CreateTopic sent on the same connection meanwhile. Frames are written whole,
one at a time (a lock per connection).

Frames are bounded (messages.MAX_FRAME_BYTES). A frame that does not decode, or announces a size
out of bounds, closes that connection only; the listener and other connections go on.
"""
from __future__ import annotations

import logging
import math
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import anyio
from anyio.abc import SocketAttribute, SocketStream

from kshim.controller import messages
from kshim.controller.messages import FrameError, Operation, Reply
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller.rpc")

MAX_IN_FLIGHT = 256  # requests answered concurrently per connection before the reader waits
# the peer went away while reading or writing
_GONE = (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError,
         ConnectionError)
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its terminating NUL (Linux)


class RpcConnectionError(ConnectionError):
    """The connection to the controller is closed (or never opened); the call has no answer."""


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(str(path))) > UNIX_PATH_MAX:
        raise OSError(f"the socket path {path} is longer than {UNIX_PATH_MAX} bytes, "
                      f"the limit of unix sockets; use a shorter --data-dir")


class _FrameSocket:
    """Whole frames over a connected unix socket stream.

    The I/O goes through the raw non-blocking socket with anyio.wait_readable/wait_writable (as
    kshim.net.server does), not through the stream's receive/send: on asyncio, anyio's unix stream
    can fail with InvalidStateError in an event-loop callback when a pending receive is cancelled
    just as data arrives, which is exactly what a cancelled long-poll does.
    """

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.sock = stream.extra(SocketAttribute.raw_socket)
        self._buffer = bytearray()

    async def read_frame(self) -> bytes:
        size = messages.frame_size(await self._read_exactly(messages.SIZE_BYTES))
        return await self._read_exactly(size)

    async def _read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            try:
                chunk = self.sock.recv(min(max(n - len(self._buffer), 65536), 1 << 20))
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except OSError as e:
                raise anyio.BrokenResourceError(str(e)) from e
            if not chunk:
                raise anyio.EndOfStream
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self.sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
                continue
            except OSError as e:
                raise anyio.BrokenResourceError(str(e)) from e
            view = view[sent:]

    async def aclose(self) -> None:
        """Close; a task waiting to read or write gets ClosedResourceError."""
        if self.sock.fileno() >= 0:
            anyio.notify_closing(self.sock)
        await anyio.aclose_forcefully(self.stream)


# ------------------------------------------------------------------------------------------ server
R = TypeVar("R")
Handler = Callable[[Operation], Awaitable[Reply]]


class RpcServer:
    """Serves `handler(request) -> Reply` on a unix socket. BrokerError from the handler is
    answered as its error code and message; any other exception as UNKNOWN_SERVER_ERROR."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def serve(self, path: Path, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        check_socket_path(path)
        # owner only: the sockets control the cluster, and a broker's hands out the inter-broker password
        listener = await anyio.create_unix_listener(path, mode=0o600)
        try:
            async with listener:
                task_status.started()
                await listener.serve(self._connection)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    async def _connection(self, stream: SocketStream) -> None:
        conn = _FrameSocket(stream)
        write_lock = anyio.Lock()
        limit = anyio.Semaphore(MAX_IN_FLIGHT)
        try:
            await self._requests(conn, write_lock, limit)
        finally:
            await conn.aclose()

    async def _requests(self, conn: _FrameSocket, write_lock: anyio.Lock, limit: anyio.Semaphore) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    body = await conn.read_frame()
                    correlation_id, request = messages.decode_request(body)
                except FrameError as e:
                    log.warning("closing a control connection: %s", e)
                    break
                except _GONE:
                    break  # the peer closed its end: its pending answers have no one to go to
                await limit.acquire()
                tg.start_soon(self._answer, conn, write_lock, limit, correlation_id, request)
            tg.cancel_scope.cancel()

    async def _answer(self, conn: _FrameSocket, write_lock: anyio.Lock, limit: anyio.Semaphore,
                      correlation_id: int, request: Operation) -> None:
        op = type(request)
        try:
            try:
                frame = messages.encode_response(correlation_id, op, await self.handler(request))
            except BrokerError as e:
                frame = messages.encode_response(correlation_id, op, error_code=e.code, message=e.message)
            except Exception as e:  # a controller bug answers this request only
                log.exception("control request %s failed", op.__name__)
                frame = messages.encode_response(correlation_id, op,
                                                 error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                                 message=f"{type(e).__name__}: {e}")
            async with write_lock:
                await conn.send(frame)
        except _GONE:
            pass
        finally:
            limit.release()


# ------------------------------------------------------------------------------------------ client
class _Call:
    __slots__ = ("done", "response", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.response: messages.Response | None = None
        self.error: Exception | None = None


class RpcConnection:
    """One connection to the controller; `call` may be used by many tasks at once."""

    def __init__(self, stream: SocketStream) -> None:
        self._socket = _FrameSocket(stream)
        self._write_lock = anyio.Lock()
        self._pending: dict[int, _Call] = {}
        self._next_id = 0
        self.closed: Exception | None = None

    async def call(self, request: Operation[R], timeout_s: float = math.inf) -> R:
        """The result of `request` (see `answer`)."""
        return (await self.answer(request, timeout_s)).result

    async def answer(self, request: Operation[R], timeout_s: float = math.inf) -> Reply[R]:
        """The result of `request` with the controller's image version. Raises BrokerError for an
        error answer, TimeoutError after timeout_s, RpcConnectionError when the connection closes
        before the answer."""
        if self.closed is not None:
            raise RpcConnectionError(f"connection to the controller closed: {self.closed}")
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        correlation_id = self._next_id
        frame = messages.encode_request(correlation_id, request)
        pending = self._pending[correlation_id] = _Call()
        try:
            with anyio.fail_after(timeout_s):
                try:
                    async with self._write_lock:
                        await self._socket.send(frame)
                except _GONE as e:
                    self._close(e)
                await pending.done.wait()
        finally:
            self._pending.pop(correlation_id, None)
        if pending.error is not None:
            raise RpcConnectionError(f"connection to the controller closed: {pending.error}")
        response = pending.response
        assert response is not None
        if response.code != request.CODE:
            raise RpcConnectionError(f"the controller answered type {response.code} to {type(request).__name__}")
        if response.error_code != ErrorCode.NONE:
            raise BrokerError(response.error_code, response.message or response.error_code.name)
        assert response.reply is not None
        return response.reply

    async def _read_loop(self) -> None:
        try:
            while True:
                response = messages.decode_response(await self._socket.read_frame())
                pending = self._pending.get(response.correlation_id)
                if pending is not None:  # else: its caller gave up (timeout) meanwhile
                    pending.response = response
                    pending.done.set()
        except (FrameError, *_GONE) as e:
            self._close(e if not isinstance(e, anyio.EndOfStream) else RpcConnectionError("closed by the controller"))

    async def aclose(self) -> None:
        """Close the connection: pending calls fail with RpcConnectionError."""
        self._close(RpcConnectionError("connection closed by this side"))
        await self._socket.aclose()

    def _close(self, error: Exception) -> None:
        if self.closed is None:
            self.closed = error
        for pending in self._pending.values():
            if not pending.done.is_set():
                pending.error = error
                pending.done.set()


@asynccontextmanager
async def connect(path: Path) -> AsyncIterator[RpcConnection]:
    """A connection to the controller at `path`; OSError if nothing listens there."""
    check_socket_path(path)
    stream = await anyio.connect_unix(path)
    connection = RpcConnection(stream)
    error: Exception | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection._read_loop)
            try:
                yield connection
            except Exception as e:  # raised below, outside the task group, so not as an ExceptionGroup
                error = e
            finally:
                connection._close(RpcConnectionError("connection closed by this side"))
                tg.cancel_scope.cancel()
    finally:
        await connection._socket.aclose()
    if error is not None:
        raise error


async def call_once(path: Path, request: Operation[R], timeout_s: float = 60.0) -> R:
    """Connect, call, close: what `kshim ctl` does."""
    async with connect(path) as connection:
        return await connection.call(request, timeout_s)


__all__ = ["RpcServer", "RpcConnection", "RpcConnectionError", "connect", "call_once"]
