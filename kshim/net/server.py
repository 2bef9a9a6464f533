"""The network layer: a thin anyio TCP server around ConnectionCore.

Per connection, a reader task turns bytes into requests and dispatches them in arrival order; a
writer task sends responses in that same order. A handler may hand back an awaitable (a produce
waiting for commitment, a fetch waiting for data): the reader goes on with the next request while
the writer waits for that response before sending any later one. acks=0 produce yields no
response and takes no place in the order.

Sockets are non-blocking and driven with anyio.wait_readable / wait_writable: the reader
recv_into()s the buffer the connection core hands out (a large produce frame is read straight
into its own buffer), which saves the copy and the 256 KiB chunking of a stream transport.
"""
from __future__ import annotations

import inspect
import logging
import math
import socket
import time
from typing import Any, Awaitable, Mapping

import anyio
from anyio.abc import TaskGroup
from anyio.lowlevel import checkpoint
from anyio.streams.memory import MemoryObjectReceiveStream

from kshim.broker import Broker
from kshim.net.broker_server import BrokerServer
from kshim.net.handlers import Handler, RequestContext, load_handlers, supported_versions
from kshim.net.handlers.throttling import charge_request_time
from kshim.net.protocol import ConnectionCore, ProtocolError, Request
from kshim.net.quota_manager import Throttle

log = logging.getLogger("kshim.server")

LISTEN_BACKLOG = 128
ACCEPT_BACKOFF_S = 0.1
# the peer went away: reading or writing fails; this ends its connection, quietly
_PEER_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError)


def open_listener(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


IOV_MAX = 512  # buffers per sendmsg call, under the kernel's 1024


async def send_all(sock: socket.socket, chunks: list[bytes | bytearray | memoryview]) -> None:
    """Send the buffers in order with scatter-gather writes, waiting only when the socket is full."""
    views = [memoryview(c) for c in chunks if len(c)]
    i = 0
    while i < len(views):
        try:
            sent = sock.sendmsg(views[i:i + IOV_MAX])
        except BlockingIOError:
            await anyio.wait_writable(sock)
            continue
        while sent and i < len(views):
            n = len(views[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0
MAX_IN_FLIGHT = 64  # responses queued per connection before the reader stops reading (back pressure)
MAX_HELD_CONNECTIONS = 1000  # connections over a connection_creation_rate quota held until their throttle ends
REFUSAL_LOG_INTERVAL_S = 10.0  # refused connections are logged once, then summed up at most this often


class RequestMemory:
    """queued.max.request.bytes: bytes of large requests being received or handled, across every
    connection. A connection reserves a large frame's size once the size is known (its buffer still
    grows only as bytes arrive) and gives it back once the request is handled; while the budget is
    spent, readers wait before reading more (back pressure, as Kafka mutes channels)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._freed = anyio.Event()

    async def reserve(self, n: int) -> None:
        while self.used and self.used + n > self.capacity:  # with nothing reserved, any one frame fits
            await self._freed.wait()
        self.used += n

    def release(self, n: int) -> None:
        self.used -= n
        freed, self._freed = self._freed, anyio.Event()
        freed.set()


class _Refusals:
    """Connections refused over a limit: one log line when it starts, then a count per interval."""

    def __init__(self) -> None:
        self.count = 0
        self.last_log = -math.inf

    def note(self, peer: str, why: str) -> None:
        self.count += 1
        now = anyio.current_time()
        if now - self.last_log >= REFUSAL_LOG_INTERVAL_S:
            log.warning("refusing connections: %s (from %s; %d refused since the last such line)",
                        why, peer, self.count)
            self.count, self.last_log = 0, now


class _Connection:
    """What the server tracks of one connection."""

    __slots__ = ("ip", "outstanding", "reserved", "last_sent", "throttle")

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.outstanding = 0  # responses queued or in the making
        self.last_sent = anyio.current_time()  # when the last response went out
        self.reserved = 0  # bytes held in RequestMemory for the large frame being received
        self.throttle = Throttle()  # client quotas: no request is handled before its mute ends


class _Pending:
    """A response that completes later; the writer waits on it in order."""

    __slots__ = ("done", "data", "failed")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.data: Any = None
        self.failed = False


class Server:
    def __init__(self, node: BrokerServer) -> None:
        self.node = node
        self.broker = node.broker
        self.handlers: dict[int, Handler] = load_handlers()
        self.supported = supported_versions(self.handlers)
        cfg = self.broker.config
        self.memory = RequestMemory(cfg.queued_max_request_bytes)
        self.open_connections = 0
        self.per_ip: dict[str, int] = {}
        self.refusals = _Refusals()
        self.held_connections = 0  # refused by a connection_creation_rate quota, closed after their throttle

    async def serve(self, listener: socket.socket | None = None, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Accept on `listener` (bound by the caller before it opened any log) or on a new one."""
        if listener is None:
            cfg = self.broker.config
            listener = open_listener(cfg.host, cfg.port)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.node.run)
                task_status.started(listener.getsockname()[1])
                while True:
                    await anyio.wait_readable(listener)
                    try:
                        conn, address = listener.accept()
                    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                        continue
                    except OSError as e:
                        # out of file descriptors or memory: refuse this one, keep serving the others
                        log.warning("cannot accept a connection: %s", e)
                        await anyio.sleep(ACCEPT_BACKOFF_S)
                        continue
                    peer = "%s:%s" % address[:2]
                    over = self._over_limit(address[0])
                    if over:
                        self.refusals.note(peer, over)
                        conn.close()
                        continue
                    if self._connection_throttled(tg, conn, address[0]):  # client quotas (KIP-612)
                        self.refusals.note(peer, f"over the connection_creation_rate quota of {address[0]}")
                        continue
                    try:
                        conn.setblocking(False)
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    except OSError as e:
                        log.warning("dropping a connection from %s: %s", address, e)
                        conn.close()
                        continue
                    tg.start_soon(self._connection, conn, peer, address[0])
        finally:
            listener.close()

    def _connection_throttled(self, tg: TaskGroup, conn: socket.socket, ip: str) -> bool:
        """Over its address's connection_creation_rate: closed unread once its throttle time is up,
        as Kafka does (at once past MAX_HELD_CONNECTIONS, so a flood holds no more descriptors)."""
        throttle_ms = self.node.quotas.connection_throttle(ip, time.monotonic_ns() // 1_000_000)
        if not throttle_ms:
            return False
        if self.held_connections >= MAX_HELD_CONNECTIONS:
            conn.close()
            return True
        self.held_connections += 1

        async def close_later() -> None:
            try:
                await anyio.sleep(throttle_ms / 1000)
            finally:
                conn.close()
                self.held_connections -= 1
        tg.start_soon(close_later)
        return True

    def _over_limit(self, ip: str) -> str | None:
        cfg = self.broker.config
        if self.open_connections >= cfg.max_connections:
            return f"{self.open_connections} connections are open (max.connections={cfg.max_connections})"
        if self.per_ip.get(ip, 0) >= cfg.max_connections_per_ip:
            return f"{self.per_ip[ip]} connections are open from {ip} " \
                   f"(max.connections.per.ip={cfg.max_connections_per_ip})"
        return None

    async def _connection(self, conn: socket.socket, peer: str, ip: str) -> None:
        core = ConnectionCore(self.supported, self.broker.config.max_request_bytes)
        state = _Connection(ip)
        self.open_connections += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        send, receive = anyio.create_memory_object_stream[Any](MAX_IN_FLIGHT)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._writer, conn, receive, tg, state)
                try:
                    async with send:
                        await self._reader(conn, core, send, tg, peer, state)
                except ProtocolError as e:
                    log.warning("closing connection from %s: %s", peer, e)
                    tg.cancel_scope.cancel()
                except _PEER_GONE:
                    tg.cancel_scope.cancel()
        except Exception:
            # a handler bug must cost this connection only, never the server: anything escaping
            # here would end the accept loop's task group, and with it the broker
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            conn.close()
            if state.reserved:
                self.memory.release(state.reserved)
            self.open_connections -= 1
            self.per_ip[ip] -= 1
            if not self.per_ip[ip]:
                del self.per_ip[ip]

    async def _reader(self, conn: socket.socket, core: ConnectionCore, send, tg: TaskGroup, peer: str,
                      state: _Connection) -> None:
        cfg = self.broker.config
        while True:
            with core.receive_buffer() as view:
                try:
                    n = conn.recv_into(view)
                except BlockingIOError:
                    n = -1
            if n < 0:  # nothing to read now: wait, within the connection's time limits
                if core.in_frame:
                    timeout = cfg.request_stall_timeout_ms / 1000
                    with anyio.move_on_after(timeout):
                        await anyio.wait_readable(conn)
                        continue
                    log.info("closing connection from %s: it stopped sending halfway through a request "
                             "for %.1f s", peer, timeout)
                    raise anyio.EndOfStream
                core.release_idle()
                last_read = anyio.current_time()
                idle_s = cfg.connections_max_idle_ms / 1000
                while True:  # idle: nothing read and nothing answered for idle_s (a long poll is not idle)
                    quiet_since = max(last_read, state.last_sent)
                    with anyio.move_on_after(quiet_since + idle_s - anyio.current_time()):
                        await anyio.wait_readable(conn)
                        break
                    if not state.outstanding and anyio.current_time() >= max(last_read, state.last_sent) + idle_s:
                        log.debug("closing connection from %s: idle for %.1f s", peer, idle_s)
                        raise anyio.EndOfStream
                    if state.outstanding:
                        state.last_sent = anyio.current_time()  # waiting on its own answer: not idle yet
                continue
            if n == 0:
                raise anyio.EndOfStream
            core.received(n)
            await checkpoint()  # a peer that always has bytes ready must not starve the others
            while (request := core.next_request()) is not None:
                await state.throttle.wait()  # muted by a quota (KIP-219): the next request waits
                result = await self._dispatch(request, peer, state.throttle)
                if state.reserved and request.size == state.reserved:  # the large frame is handled
                    self.memory.release(state.reserved)
                    state.reserved = 0
                if result is None:
                    continue
                state.outstanding += 1
                if inspect.isawaitable(result):
                    pending = _Pending()
                    tg.start_soon(self._complete, request, result, pending, peer)
                    await send.send(pending)
                else:
                    await send.send(core.response_bytes(request, result))
            if core.frame_size and not state.reserved:
                # a large frame has begun: hold its size in the shared budget before reading on
                state.reserved = core.frame_size
                await self.memory.reserve(state.reserved)

    async def _dispatch(self, request: Request, peer: str,
                        throttle: Throttle) -> Mapping[str, Any] | None | Awaitable[Any]:
        handler = self.handlers[request.header.api_key]
        ctx = RequestContext(self.node, request.header, peer, self.supported, throttle)
        if request.unsupported:
            return await handler.handle(ctx, None)
        started = time.perf_counter_ns()
        result = await handler.handle(ctx, request.body)
        return charge_request_time(ctx, time.perf_counter_ns() - started, result)  # request_percentage

    async def _complete(self, request: Request, awaitable: Awaitable[Any], pending: _Pending, peer: str) -> None:
        # failed until a response exists: a completion cancelled while the connection is torn
        # down (cancellation is no Exception) must not leave the writer a response without data
        pending.failed = True
        try:
            body = await awaitable
            pending.data = ConnectionCore.response_bytes(request, body)
            pending.failed = False
        except Exception:
            log.exception("handler %d failed for %s", request.header.api_key, peer)
        finally:
            pending.done.set()

    async def _writer(self, conn: socket.socket, receive: MemoryObjectReceiveStream, tg: TaskGroup,
                      state: _Connection) -> None:
        try:
            async with receive:
                async for item in receive:
                    if isinstance(item, _Pending):
                        await item.done.wait()
                        if item.failed:
                            return
                        item = item.data
                    await send_all(conn, item)
                    state.outstanding -= 1
                    state.last_sent = anyio.current_time()
        except _PEER_GONE:
            pass  # the peer closed (or reset) while responses were still going out to it
        finally:
            # done, failed, or the reader finished (peer closed its side): end the connection
            tg.cancel_scope.cancel()


async def run(broker: Broker, on_ready=None) -> None:
    server = Server(BrokerServer(broker))
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        if on_ready:
            on_ready(port)
        await anyio.sleep(math.inf)
