"""The network layer: a thin anyio TCP server around ConnectionCore.

Per connection, a reader task turns bytes into requests and dispatches them in arrival order; a
writer task sends responses in that same order. A handler may hand back an awaitable (a produce
waiting for commitment, a fetch waiting for data): the reader goes on with the next request while
the writer waits for that response before sending any later one. acks=0 produce yields no
response and takes no place in the order.
"""
from __future__ import annotations

import inspect
import logging
import math
from typing import Any, Awaitable, Mapping

import anyio
from anyio.abc import SocketStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from kshim.broker import Broker
from kshim.handlers import Handler, RequestContext, load_handlers, supported_versions
from kshim.protocol import ConnectionCore, ProtocolError, Request

log = logging.getLogger("kshim.server")

READ_SIZE = 1 << 20
# the peer went away: reading or writing fails; this ends its connection, quietly
_PEER_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError)
MAX_IN_FLIGHT = 64  # responses queued per connection before the reader stops reading (back pressure)


class _Pending:
    """A response that completes later; the writer waits on it in order."""

    __slots__ = ("done", "data", "failed")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.data: Any = None
        self.failed = False


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.handlers: dict[int, Handler] = load_handlers()
        self.supported = supported_versions(self.handlers)

    async def serve(self, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        cfg = self.broker.config
        listener = await anyio.create_tcp_listener(local_host=cfg.host, local_port=cfg.port, reuse_port=False)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(self.broker.housekeeping)
            task_status.started(listener)
            await listener.serve(self._connection)

    async def _connection(self, stream: SocketStream) -> None:
        try:
            peer = "%s:%s" % stream.extra(anyio.abc.SocketAttribute.remote_address)[:2]
        except Exception:
            peer = "?"
        core = ConnectionCore(self.supported, self.broker.config.max_request_bytes)
        send, receive = anyio.create_memory_object_stream[Any](MAX_IN_FLIGHT)
        try:
            async with stream, anyio.create_task_group() as tg:
                tg.start_soon(self._writer, stream, receive, tg)
                try:
                    async with send:
                        await self._reader(stream, core, send, tg, peer)
                except ProtocolError as e:
                    log.warning("closing connection from %s: %s", peer, e)
                    tg.cancel_scope.cancel()
                except _PEER_GONE:
                    tg.cancel_scope.cancel()
        except Exception:
            # a handler bug must cost this connection only, never the server: anything escaping
            # here would end the listener's task group, and with it the broker
            log.exception("closing connection from %s after an internal error", peer)

    async def _reader(self, stream: SocketStream, core: ConnectionCore, send, tg: TaskGroup, peer: str) -> None:
        while True:
            data = await stream.receive(READ_SIZE)
            core.receive_data(data)
            while (request := core.next_request()) is not None:
                result = await self._dispatch(request, peer)
                if result is None:
                    continue
                if inspect.isawaitable(result):
                    pending = _Pending()
                    tg.start_soon(self._complete, request, result, pending, peer)
                    await send.send(pending)
                else:
                    await send.send(core.response_bytes(request, result))

    async def _dispatch(self, request: Request, peer: str) -> Mapping[str, Any] | None | Awaitable[Any]:
        handler = self.handlers[request.header.api_key]
        ctx = RequestContext(self.broker, request.header, peer, self.supported)
        if request.unsupported:
            return await handler.handle(ctx, None)
        return await handler.handle(ctx, request.body)

    async def _complete(self, request: Request, awaitable: Awaitable[Any], pending: _Pending, peer: str) -> None:
        try:
            body = await awaitable
            pending.data = ConnectionCore.response_bytes(request, body)
        except Exception:
            log.exception("handler %d failed for %s", request.header.api_key, peer)
            pending.failed = True
        finally:
            pending.done.set()

    async def _writer(self, stream: SocketStream, receive: MemoryObjectReceiveStream, tg: TaskGroup) -> None:
        try:
            async with receive:
                async for item in receive:
                    if isinstance(item, _Pending):
                        await item.done.wait()
                        if item.failed:
                            return
                        item = item.data
                    await stream.send(item)
        except _PEER_GONE:
            pass  # the peer closed (or reset) while responses were still going out to it
        finally:
            # done, failed, or the reader finished (peer closed its side): end the connection
            tg.cancel_scope.cancel()


async def run(broker: Broker, on_ready=None) -> None:
    server = Server(broker)
    async with anyio.create_task_group() as tg:
        listener = await tg.start(server.serve)
        if on_ready:
            on_ready(listener)
        await anyio.sleep(math.inf)
