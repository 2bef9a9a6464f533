"""The network layer: a thin anyio TCP server around ConnectionCore.

Per connection, a reader task turns bytes into requests and dispatches them in arrival order; a
writer task sends responses in that same order (kshim.net.outbox between them). A handler may hand
back an awaitable (a produce waiting for commitment, a fetch waiting for data): the reader goes on
with the next request while the writer waits for that response before sending any later one.
A response ready at once, with nothing ahead of it, the reader writes itself (what the socket
takes; the writer sends the rest). acks=0 produce yields no response and takes no place in the order.

Sockets are non-blocking and driven with asyncio's add_reader / add_writer: the reader
recv_into()s the buffer the connection core hands out (a large produce frame is read straight
into its own buffer), which saves the copy and the 256 KiB chunking of a stream transport.
connections.max.idle.ms is a third task per connection (`_idle_watchdog`), so that the reader's
wait for each request sets no timer; the hot path avoids anyio's per-call backend lookups where
asyncio offers the same for less (docs/benchmarks.md, "Where the broker's time goes").

Listeners (docs/security.md): one accept loop per listener. On SSL and SASL_SSL ones the socket
is wrapped in TLS with the listener's own context (its certificate, ssl.client.auth, versions and
suites: kshim.security.tls.listener_contexts; the handshake bounded by request_stall_timeout_ms; a failed one, a plaintext
client included, closes the connection with one log line) and responses go out through
SSLSocket.send, since sendmsg cannot encrypt; plaintext listeners keep the sendmsg path. On SASL
listeners the connection's ConnectionSecurity admits requests; an authentication failure is
answered after connection.failed.authentication.delay.ms and then the connection closes.
"""
from __future__ import annotations

import asyncio
import base64
import dataclasses
import inspect
import logging
import math
import os
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

import anyio
from anyio.abc import TaskGroup

from kshim.broker import Broker
from kshim.net.broker_server import BrokerServer
from kshim.net.handlers import Handler, RequestContext, load_handlers, supported_versions
from kshim.net.handlers.throttling import charge_request_time
from kshim.net.outbox import DirectSends, Outbox
from kshim.net.protocol import ConnectionCore, Encoded, ProtocolError, Request
from kshim.net.quota_manager import Throttle
from kshim.net.request_shape import error_response, request_partitions, response_errors
from kshim.observability.faults import API_NAMES, FaultRule, FaultRules
from kshim.observability.requestlog import RequestLog
from kshim.security.config import ANONYMOUS, Listener
from kshim.security.sasl import ScramCredential
from kshim.security.session import ConnectionSecurity, StaticCredentials
from kshim.sockets import ReadWaiter, open_listener, send_buffers, wait_ready
from wire.errors import ErrorCode
from wire.primitives import FileRecords

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs from Python 3.13

log = logging.getLogger("kshim.server")

# anyio.current_time() on asyncio is the loop's time(), which is time.monotonic(): called directly,
# without anyio's backend lookup (each asking asyncio for the running loop, a getpid system call
# on CPython 3.11: about 4 us a call on the benchmark machine, a few per request)
_now = time.monotonic

ACCEPT_BACKOFF_S = 0.1
# the peer went away: reading or writing fails; this ends its connection, quietly
_PEER_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError,
              ssl.SSLEOFError, ssl.SSLZeroReturnError)
TLS_CHUNK = 256 * 1024  # bytes joined per SSLSocket.send: records are encrypted (copied) anyway
# a read that fills its buffer is followed by another before the reader yields, up to this much
READ_ON_BYTES = 1 << 20
TLS_RETRY_S = 0.005  # a TLS read that must write (or the reverse) retries after this: one task per direction


SENDFILE_MAX = 1 << 20  # bytes per os.sendfile call: a non-blocking socket takes what fits anyway


async def send_all(sock: socket.socket, chunks: list[Any]) -> None:
    """Send the chunks in order: buffers with scatter-gather writes, FileRecords' file regions
    with os.sendfile (zero copy), waiting only when the socket is full."""
    buffers: list[bytes | bytearray | memoryview] = []
    for chunk in chunks:
        if not isinstance(chunk, FileRecords):
            buffers.append(chunk)
            continue
        for part in chunk.parts:
            if isinstance(part, bytes):
                buffers.append(part)
                continue
            await send_buffers(sock, buffers)
            buffers = []
            await send_region(sock, *part)
    await send_buffers(sock, buffers)


async def send_region(sock: socket.socket, fd: int, pos: int, length: int) -> None:
    """os.sendfile one file region to the non-blocking socket. Each call moves at least a byte or
    waits for writability, so the loop ends. A file that shrank under us (a truncated segment)
    ends the connection, as Kafka does: the frame's sizes are already written, and bytes of
    anything else would corrupt the response."""
    end = pos + length
    while pos < end:
        try:
            sent = os.sendfile(sock.fileno(), fd, pos, min(end - pos, SENDFILE_MAX))
        except BlockingIOError:
            await wait_ready(sock, writable=True)
            continue
        if sent == 0:
            raise ConnectionAbortedError(f"records file shrank while sending: {end - pos} bytes missing")
        pos += sent


async def send_all_tls(sock: ssl.SSLSocket, chunks: list[Any]) -> None:
    """Send the buffers in order through TLS, joined into pieces of up to TLS_CHUNK bytes; file
    regions are read (pread) here: TLS encrypts, so it copies the records anyway."""
    try:
        chunks = [c.read() if isinstance(c, FileRecords) else c for c in chunks]
    except ValueError as e:  # a segment truncated under the read: end the connection, as above
        raise ConnectionAbortedError(str(e)) from e
    piece = bytearray()
    for i, chunk in enumerate(chunks):
        piece += chunk
        if len(piece) < TLS_CHUNK and i + 1 < len(chunks):
            continue
        view = memoryview(piece)
        while view:
            try:
                view = view[sock.send(view):]
            except ssl.SSLWantWriteError:
                await wait_ready(sock, writable=True)
            except ssl.SSLWantReadError:
                await anyio.sleep(TLS_RETRY_S)  # the reader task waits for readability, not this one
        view.release()
        piece = bytearray()


def close_regions(chunks: list[Any]) -> None:
    """Close a response's FileRecords descriptors once it is sent (or will never be)."""
    for chunk in chunks:
        if isinstance(chunk, FileRecords):
            chunk.close()


def _drop_queued(outbox: Outbox) -> None:
    """Close the file regions of the responses still queued when a connection's writer ends.
    (One whose handler is still running when the connection goes is dropped unsent: its
    FileRecords close when collected.)"""
    while outbox.items:
        item = outbox.take_nowait()
        if isinstance(item, asyncio.Task):
            item = item.result() if item.done() and not item.cancelled() and item.exception() is None else None
        close_regions(item or [])


def open_listeners(listeners: list[Listener]) -> list[tuple[Listener, socket.socket]]:
    """Bind every listener (port 0: a free one; the Listener returned carries the bound port)."""
    out: list[tuple[Listener, socket.socket]] = []
    try:
        for listener in listeners:
            sock = open_listener(listener.host, listener.port)
            out.append((dataclasses.replace(listener, port=sock.getsockname()[1]), sock))
    except BaseException:
        for _, sock in out:
            sock.close()
        raise
    return out


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
        now = _now()
        if now - self.last_log >= REFUSAL_LOG_INTERVAL_S:
            log.warning("refusing connections: %s (from %s; %d refused since the last such line)",
                        why, peer, self.count)
            self.count, self.last_log = 0, now


class _Connection:
    """What the server tracks of one connection."""

    __slots__ = ("ip", "outstanding", "reserved", "last_sent", "throttle", "waiting_since", "completions")

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.outstanding = 0  # responses queued or in the making
        self.last_sent = _now()  # when the last response went out
        self.reserved = 0  # bytes held in RequestMemory for the large frame being received
        self.throttle = Throttle()  # client quotas: no request is handled before its mute ends
        self.waiting_since: float | None = None  # the reader waits for a request since then
        # answers in the making (Server._complete): plain asyncio tasks, cancelled with the connection
        self.completions: set[asyncio.Task] = set()


class _DropConnection(Exception):
    """A fault rule closes this connection (drop, an error for acks=0 produce, a withheld answer)."""


PRODUCE_KEY = 0
# requests whose answer the reader waits for itself when nothing is ahead of it, reading no further
# request of the connection meanwhile (Kafka mutes a connection while it handles a request): a task
# and the writer's turn each saved. Clients send the transaction coordinator one of these at a time
# and wait for its answer. EndTxn is not among them: measured with the Java client's 1-record
# transactions v2, it gained nothing (1,708-2,111 against 1,814-2,008 txn/s).
AWAITED_BY_READER = frozenset({24, 25, 28})  # AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit
# requests that read or write the replicas they name: while some replica a crash left unclean is
# still being recovered (kshim.replica.recovery), one that names it waits for it (recovered first)
WAITS_FOR_RECOVERY = frozenset({0, 1, 2, 21, 23, 27, 34, 61, 78, 79})  # Produce, Fetch, ListOffsets,
# DeleteRecords, OffsetForLeaderEpoch, WriteTxnMarkers, AlterReplicaLogDirs, DescribeProducers, ShareFetch,
# ShareAcknowledge
FAULT_MESSAGE = "injected by a kshim fault rule"


class Server:
    def __init__(self, node: BrokerServer, faults: FaultRules | None = None, requests: RequestLog | None = None) -> None:
        self.node = node
        self.faults = faults if faults is not None else FaultRules()
        self.requests = requests if requests is not None else RequestLog(0)
        self.broker = node.broker
        self._recovering = self.broker.replica_manager.recovering  # the dict itself: empty once all are
        self.handlers: dict[int, Handler] = load_handlers()
        self.supported = supported_versions(self.handlers)
        cfg = self.broker.config
        self.memory = RequestMemory(cfg.queued_max_request_bytes)
        self.open_connections = 0
        self.per_ip: dict[str, int] = {}
        self.refusals = _Refusals()
        self.held_connections = 0  # refused by a connection_creation_rate quota, closed after their throttle
        security = cfg.security
        self.credentials = StaticCredentials(security.users, security.scram_iterations, self._stored_scram)
        self.tls: dict[str, ssl.SSLContext] = {}  # listener name -> its context
        self.dev_ca = None  # the CA file clients trust, with --tls-dev
        if security.needs_tls:
            from kshim.security.tls import listener_contexts  # start-up: cryptography loads only for TLS listeners
            self.tls, self.dev_ca = listener_contexts(security, cfg.data_dir)
        self.bound: list[Listener] = []  # the listeners with the ports they were bound to

    def _stored_scram(self, mechanism: str, user: str) -> ScramCredential | None:
        entry = self.broker.scram_credential(user, mechanism)
        if entry is None:
            return None
        return ScramCredential(base64.b64decode(entry.salt), base64.b64decode(entry.stored_key),
                               base64.b64decode(entry.server_key), entry.iterations)

    async def serve(self, listeners: list[tuple[Listener, socket.socket]] | socket.socket | None = None, *,
                    task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Accept on `listeners` (bound by the caller before it opened any log) or on new ones;
        a bare socket is one PLAINTEXT listener. Started with the first listener's port."""
        cfg = self.broker.config
        if listeners is None:
            listeners = open_listeners(cfg.security.listeners or [Listener("PLAINTEXT", cfg.host, cfg.port)])
        elif isinstance(listeners, socket.socket):
            listeners = [(Listener("PLAINTEXT", cfg.host, listeners.getsockname()[1]), listeners)]
        self.bound = [listener for listener, _ in listeners]
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.node.run)
                for listener, sock in listeners:
                    tg.start_soon(self._accept, listener, sock, tg)
                task_status.started(listeners[0][1].getsockname()[1])
        finally:
            for _, sock in listeners:
                sock.close()

    async def _accept(self, listener: Listener, sock: socket.socket, tg: TaskGroup) -> None:
        while True:
            await anyio.wait_readable(sock)
            try:
                conn, address = sock.accept()
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
            tg.start_soon(self._connection, conn, peer, address[0], listener)

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

    async def _tls_handshake(self, conn: socket.socket, peer: str, listener: Listener) -> ssl.SSLSocket | None:
        """The TLS handshake within request_stall_timeout_ms, with the listener's context; None
        (logged once) if it fails."""
        try:
            tls = self.tls[listener.name].wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError) as e:
            log.info("closing connection from %s: cannot start TLS: %s", peer, e)
            return None
        timeout = self.broker.config.request_stall_timeout_ms / 1000
        with anyio.move_on_after(timeout):
            while True:
                try:
                    tls.do_handshake()
                    return tls
                except ssl.SSLWantReadError:
                    await anyio.wait_readable(tls)
                except ssl.SSLWantWriteError:
                    await anyio.wait_writable(tls)
                except (ssl.SSLError, OSError) as e:
                    log.warning("closing connection from %s on listener %s: TLS handshake failed: %s", peer,
                                listener.name, getattr(e, "reason", None) or e)
                    tls.close()
                    return None
        log.warning("closing connection from %s: no TLS handshake within %.1f s", peer, timeout)
        tls.close()
        return None

    async def _connection(self, conn: socket.socket, peer: str, ip: str, listener: Listener | None = None) -> None:
        listener = listener or Listener("PLAINTEXT", self.broker.config.host, self.broker.config.port)
        self.open_connections += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        state = _Connection(ip)
        try:
            if listener.tls:
                wrapped = await self._tls_handshake(conn, peer, listener)
                if wrapped is None:
                    return
                conn = wrapped
            principal = ANONYMOUS
            if isinstance(conn, ssl.SSLSocket):
                from kshim.security.tls import certificate_principal  # loaded already: see __init__
                principal = certificate_principal(conn)
            security = ConnectionSecurity(listener, self.broker.config.security, self.credentials, principal)
            core = ConnectionCore(self.supported, self.broker.config.max_request_bytes,
                                  security if listener.sasl else None)
            sender: Callable[[Any, list], Awaitable[None]] = send_all_tls if listener.tls else send_all
            outbox = Outbox(MAX_IN_FLIGHT)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._writer, conn, outbox, tg, state, sender)
                    tg.start_soon(self._idle_watchdog, tg, state, peer)
                    try:
                        try:
                            await self._reader(conn, core, outbox, peer, state, security, not listener.tls)
                        finally:
                            outbox.close()
                    except ProtocolError as e:
                        log.warning("closing connection from %s: %s", peer, e)
                        tg.cancel_scope.cancel()
                    except _DropConnection as e:
                        log.info("closing connection from %s: %s", peer, e)
                        tg.cancel_scope.cancel()
                    except _PEER_GONE:
                        tg.cancel_scope.cancel()
                    except ssl.SSLError as e:
                        log.warning("closing connection from %s: TLS error: %s", peer, getattr(e, "reason", None) or e)
                        tg.cancel_scope.cancel()
            except Exception:
                # a handler bug must cost this connection only, never the server: anything escaping
                # here would end the accept loop's task group, and with it the broker
                log.exception("closing connection from %s after an internal error", peer)
        finally:
            for task in list(state.completions):  # handlers still waiting: their answers go nowhere
                task.cancel()
            conn.close()
            if state.reserved:
                self.memory.release(state.reserved)
            self.open_connections -= 1
            self.per_ip[ip] -= 1
            if not self.per_ip[ip]:
                del self.per_ip[ip]

    async def _reader(self, conn: socket.socket, core: ConnectionCore, outbox: Outbox, peer: str,
                      state: _Connection, security: ConnectionSecurity, plaintext: bool = True) -> None:
        # the waiter makes the reader's read itself when bytes arrive
        waiter = ReadWaiter(conn, lambda: _read_into(conn, core)) if plaintext else None
        wait_readable = waiter.wait if waiter is not None else lambda: wait_ready(conn)
        try:
            await self._read_requests(conn, core, outbox, peer, state, security, plaintext, wait_readable)
        finally:
            if waiter is not None:
                waiter.close()

    async def _read_requests(self, conn: socket.socket, core: ConnectionCore, outbox: Outbox, peer: str,
                             state: _Connection, security: ConnectionSecurity, plaintext: bool,
                             wait_readable: Callable[[], Awaitable[tuple[int, int] | None]]) -> None:
        cfg = self.broker.config
        loop = asyncio.get_running_loop()
        direct = DirectSends(conn, outbox, state, self._settle)
        waited = False  # the task waited (yielded) since its last read
        unyielded = 0  # bytes read since the task last yielded
        drained = False  # the last plaintext read took less than it had room for: the socket was empty
        try:
            while True:
                if drained:  # wait at once: another recv would only fail (a syscall and an exception)
                    drained = False
                    n = -1
                else:
                    try:
                        n, room = _read_into(conn, core)
                    except (BlockingIOError, ssl.SSLWantReadError):
                        n = -1
                    except ssl.SSLWantWriteError:  # TLS wants to write first: the writer task owns writability
                        n = -2
                if n == -2:
                    await anyio.sleep(TLS_RETRY_S)
                    continue
                if n < 0:  # nothing to read now: wait, within the connection's time limits
                    waited = True
                    if core.in_frame:
                        timeout = cfg.request_stall_timeout_ms / 1000
                        stalled = True
                        with anyio.move_on_after(timeout):
                            got = await wait_readable()
                            stalled = False
                        if stalled:
                            log.info("closing connection from %s: it stopped sending halfway through a request "
                                     "for %.1f s", peer, timeout)
                            raise anyio.EndOfStream
                    else:
                        core.release_idle()
                        state.waiting_since = _now()  # the idle watchdog closes the connection if this lasts
                        try:
                            got = await wait_readable()
                        finally:
                            state.waiting_since = None
                    if got is None:  # readable: read below
                        continue
                    n, room = got  # read already, by the waiter (kshim.sockets.ReadWaiter)
                if n == 0:
                    raise anyio.EndOfStream
                core.received(n)
                # TLS may hold decrypted bytes the selector cannot see: only a plaintext read tells
                drained = plaintext and n < room
                unyielded = n if waited else unyielded + n
                if not waited and (n < room or unyielded > READ_ON_BYTES):
                    # a peer that always has bytes ready must not starve the others; a read that filled
                    # its buffer reads on first (the rest of the request is likely there already)
                    await asyncio.sleep(0)  # anyio's checkpoint(), without its backend lookup
                    unyielded = 0
                waited = False
                while (request := core.next_request()) is not None:
                    if state.throttle.until:  # muted once by a quota: checked (and waited for) before each request
                        direct.flush()
                        await state.throttle.wait()  # muted by a quota (KIP-219): the next request waits
                    direct.guard()
                    result = await self._dispatch(request, peer, security, state.throttle, direct.settled)
                    if state.reserved and request.size == state.reserved:  # the large frame is handled
                        self.memory.release(state.reserved)
                        state.reserved = 0
                    if security.failed:
                        # answered after the delay, then closed: one try per delay per connection
                        log.warning("closing connection from %s on %s: authentication failed: %s",
                                    peer, security.listener.name, security.failure)
                        direct.flush()
                        await anyio.sleep(cfg.security.failed_auth_delay_ms / 1000)
                        if result is not None and not request.raw and not _awaitable(result):
                            state.outstanding += 1
                            await outbox.put(core.response_bytes(request, result))
                        return
                    if result is None:
                        continue
                    state.outstanding += 1
                    if _awaitable(result) and request.header.api_key in AWAITED_BY_READER and outbox.idle:
                        direct.flush()
                        answered = await self._complete(request, result, peer)
                        if answered is None:
                            return  # the handler failed, or a fault rule drops the connection
                        response = answered
                    elif _awaitable(result):
                        # a plain task, not the task group's: anyio's start_soon cost 8% of a single-record
                        # produce's event-loop time; _connection cancels what is left when it ends
                        task = loop.create_task(self._complete(request, result, peer))
                        state.completions.add(task)
                        task.add_done_callback(state.completions.discard)
                        direct.flush()
                        await outbox.put(task)
                        continue
                    else:
                        response = core.response_bytes(request, result)
                    if plaintext and outbox.idle and not any(isinstance(c, FileRecords) for c in response):
                        # nothing ahead of it and the writer waiting: sent from here, a loop turn sooner,
                        # with the other answers to this read (kshim.net.outbox.DirectSends)
                        direct.add(response)
                        continue
                    direct.flush()
                    await outbox.put(response)
                direct.flush()
                if core.frame_size and not state.reserved:
                    # a large frame has begun: hold its size in the shared budget before reading on
                    state.reserved = core.frame_size
                    await self.memory.reserve(state.reserved)
        finally:
            direct.flush()  # answers to requests read before a failure or a dropped one still go out

    async def _idle_watchdog(self, tg: TaskGroup, state: _Connection, peer: str) -> None:
        """connections.max.idle.ms: closes the connection once its reader has waited for a request
        that long with nothing answered meanwhile (a long poll, a response still in the making, is
        not idle). A task per connection, so the reader's wait for each request needs no timer of
        its own (a cancel scope per request cost a few percent of a small request's CPU)."""
        cfg = self.broker.config
        while True:  # ends when it closes the connection, or with the connection's task group
            idle_s = cfg.connections_max_idle_ms / 1000
            now = _now()
            if state.waiting_since is None:  # reading or handling a request: not idle
                await anyio.sleep(idle_s)
                continue
            quiet_since = max(state.waiting_since, state.last_sent)
            if now < quiet_since + idle_s:
                await anyio.sleep(quiet_since + idle_s - now)
            elif state.outstanding:
                state.last_sent = now  # waiting on its own answer: not idle yet
            else:
                log.debug("closing connection from %s: idle for %.1f s", peer, idle_s)
                tg.cancel_scope.cancel()
                return

    async def _dispatch(self, request: Request, peer: str, security: ConnectionSecurity, throttle: Throttle,
                        settled: list) -> Mapping[str, Any] | None | Awaitable[Any]:
        """The request's answer: its handler's, unless a fault rule (kshim.observability.faults) says otherwise;
        timed for the metrics and recorded in the request log. An answer ready now is timed now and
        left in `settled` (the connection's DirectSends list) to be recorded after it is sent
        (`_settle`): a client waiting for it does not wait for the bookkeeping too."""
        started = time.monotonic()
        metric_started = _now()
        h = request.header
        rule = None
        if self.faults and not request.unsupported:
            rule = self.faults.match(h.api_key, h.client_id, lambda: self._partitions(request))
        if rule is None:
            result = await self._handle(request, peer, security, throttle)
        elif rule.action == "error":
            if h.api_key == PRODUCE_KEY and request.body is not None and request.body.acks == 0:
                self._log(request, peer, None, started, rule, "dropped")
                raise _DropConnection(f"fault rule {rule.id}: an acks=0 Produce failed "
                                      f"({_code_name(rule.error_code)})")
            result = error_response(h.api_key, h.api_version, request.body, rule.error_code, FAULT_MESSAGE)
        elif rule.action == "drop":
            self._log(request, peer, None, started, rule, "dropped")
            raise _DropConnection(f"fault rule {rule.id} drops this {_api_name(h.api_key)} request")
        else:  # delay, timeout: handled, then answered late or never
            result = self._late(request, await self._handle(request, peer, security, throttle), rule, peer, started)
        if result is None:  # acks=0 produce: no answer
            self.node.metrics.observe(h.api_key, request.body, None, _now() - metric_started)
            return None
        if _awaitable(result):
            request.started = metric_started  # the metric is taken when it completes (_complete)
            if self.requests.enabled and (rule is None or rule.action == "delay"):
                return self._logged(request, peer, result, started, rule)
            return result
        settled.append((request, peer, result, started, rule, _now() - metric_started))
        return result

    def _settle(self, answered: list) -> None:
        """The metrics and request log entries of answers `_dispatch` left for after their send."""
        observe, log_request = self.node.metrics.observe, self._log
        for request, peer, result, started, rule, took in answered:
            observe(request.header.api_key, request.body, result, took)
            log_request(request, peer, result, started, rule)

    async def _logged(self, request: Request, peer: str, result: Awaitable[Any], started: float,
                      rule: FaultRule | None) -> Any:
        body = await result
        self._log(request, peer, body, started, rule)
        return body

    async def _handle(self, request: Request, peer: str, security: ConnectionSecurity,
                      throttle: Throttle) -> Mapping[str, Any] | None | Awaitable[Any]:
        handler = self.handlers[request.header.api_key]
        if log.isEnabledFor(logging.DEBUG):  # which versions clients really send (compat tests read it)
            log.debug("request %s v%d from %s (%s)", handler.name, request.header.api_version, peer,
                      request.header.client_id)
        ctx = RequestContext(self.node, request.header, peer, self.supported, principal=security.principal,
                             security=security, throttle=throttle)
        if request.unsupported:
            return await handler.handle(ctx, None)
        if self._recovering and request.header.api_key in WAITS_FOR_RECOVERY:
            await self.broker.replica_manager.wait_recovered(self._partitions(request))
        started = time.perf_counter_ns()
        result = await handler.handle(ctx, request.body)
        return charge_request_time(ctx, time.perf_counter_ns() - started, result)  # request_percentage

    def _partitions(self, request: Request) -> list[tuple[str, int | None]]:
        h = request.header
        return request_partitions(h.api_key, h.api_version, request.body, self._topic_name)

    def _topic_name(self, topic_id: Any) -> str | None:
        info = self.broker.topics_by_id.get(topic_id)
        return info.name if info is not None else None

    def _log(self, request: Request, peer: str, body: Mapping[str, Any] | None, started: float,
             rule: FaultRule | None, outcome: str = "answered") -> None:
        if not self.requests.enabled:
            return
        h = request.header
        if body is None:
            errors: list[int] | tuple = ()
        elif type(body) is Encoded:  # an answer repeated word for word (Metadata): walked once
            memo = body.memo
            if "errors" not in memo:
                memo["errors"] = response_errors(h.api_key, request.response_version, body)
            errors = memo["errors"]
        else:
            errors = response_errors(h.api_key, request.response_version, body)
        self.requests.record(
            api_key=h.api_key, version=h.api_version, client_id=h.client_id, correlation_id=h.correlation_id,
            peer=peer, partitions=self._partitions(request), started=started, errors=errors,
            fault=rule.id if rule is not None else None, outcome=outcome)

    def _late(self, request: Request, result: Mapping[str, Any] | None | Awaitable[Any], rule: FaultRule,
              peer: str, started: float) -> Awaitable[Any] | None:
        """The answer of a delay or timeout rule: after delay_ms, or withheld and the connection closed."""
        if result is None:  # acks=0: no answer to delay or withhold
            return None

        async def late() -> Any:
            body = await result if _awaitable(result) else result
            if rule.action == "timeout":  # logged now: the client usually hangs up before the hold ends
                self._log(request, peer, body, started, rule, "withheld")
            await anyio.sleep(rule.delay_ms / 1000)
            if rule.action == "timeout":
                raise _DropConnection(f"fault rule {rule.id} withheld the answer to this "
                                      f"{_api_name(request.header.api_key)} request for {rule.delay_ms} ms")
            return body
        return late()

    async def _complete(self, request: Request, awaitable: Awaitable[Any], peer: str) -> list | None:
        """The response frame of an answer that completes later; None (the writer then ends the
        connection) if it failed."""
        try:
            body = await awaitable
            self.node.metrics.observe(request.header.api_key, request.body, body, _now() - request.started)
            return ConnectionCore.response_bytes(request, body)
        except _DropConnection as e:
            log.info("closing connection from %s: %s", peer, e)
        except Exception:
            log.exception("handler %d failed for %s", request.header.api_key, peer)
        return None

    async def _writer(self, conn: socket.socket, outbox: Outbox, tg: TaskGroup,
                      state: _Connection, sender: Callable[[Any, list], Awaitable[None]] = send_all) -> None:
        try:
            try:
                while True:  # ends with the outbox (the reader is done) or the connection
                    try:
                        item = await outbox.take()
                    except anyio.EndOfStream:
                        break
                    if isinstance(item, asyncio.Task):  # an answer in the making (_complete)
                        item = await item
                        if item is None:
                            return
                    try:
                        await sender(conn, item)
                    finally:
                        close_regions(item)
                    state.outstanding -= 1
                    state.last_sent = _now()
            finally:
                _drop_queued(outbox)
        except (*_PEER_GONE, ssl.SSLError):
            pass  # the peer closed (or reset) while responses were still going out to it
        finally:
            # done, failed, or the reader finished (peer closed its side): end the connection
            tg.cancel_scope.cancel()


def _read_into(conn: socket.socket, core: ConnectionCore) -> tuple[int, int]:
    """A connection's read, into its receive buffer: (bytes read, 0 at the end of the stream; the
    room there was)."""
    with core.receive_buffer() as view:
        return conn.recv_into(view), len(view)


def _awaitable(result: Any) -> TypeIs[Awaitable[Any]]:
    """inspect.isawaitable, with the common answers (a dict or a subclass of it, None) told apart first."""
    return result is not None and not isinstance(result, dict) and inspect.isawaitable(result)


def _api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, str(api_key))


def _code_name(code: int) -> str:
    return ErrorCode(code).name


async def run(broker: Broker, on_ready=None) -> None:
    server = Server(BrokerServer(broker))
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        if on_ready:
            on_ready(port)
        await anyio.sleep(math.inf)
