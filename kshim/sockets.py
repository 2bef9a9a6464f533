"""Waiting on and writing to non-blocking sockets from asyncio, cheaply: what the server's
connections and the broker-to-broker client (kshim.replication.client) share. anyio's wait_readable and streams ask for
the running backend on every call and checkpoint on every receive: a loop turn, and several us, a
request (docs/benchmarks.md, "Where the broker's time goes")."""
from __future__ import annotations

import asyncio
import contextvars
import socket
from typing import Any, Callable


def wake(future: asyncio.Future | None) -> None:
    """Wake the task waiting on `future`, if any and not woken already (the selector may call
    again before the waiting task runs)."""
    if future is not None and not future.done():
        future.set_result(None)


async def wait_ready(sock: socket.socket, writable: bool = False) -> None:
    """anyio.wait_readable(sock) (or wait_writable) on asyncio without its backend lookup per call
    (several us on CPython 3.11, where each asks asyncio for the running loop: once per request)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    fd = sock.fileno()
    (loop.add_writer if writable else loop.add_reader)(fd, wake, future)
    try:
        await future
    finally:
        (loop.remove_writer if writable else loop.remove_reader)(fd)


class Readable(asyncio.Future):
    """What a ReadWaiter's reader awaits: an asyncio future whose completion by the selector's
    callback runs the waiting task's wake-up at once, in the same turn of the loop. A plain
    Future schedules it for the next turn instead: an `epoll_wait` and a turn of the loop more
    for every request a client sends one at a time. A Task awaiting a Future subclass adds its
    wake-up with `add_done_callback` (asyncio's `_asyncio_future_blocking` protocol), which keeps
    it here; a cancellation (a cancel scope, the connection's end) wakes it at the next turn, as
    for any Future."""

    _wakeup: tuple[Callable[[Any], Any], contextvars.Context | None] | None = None

    def add_done_callback(self, fn: Callable[[Any], Any], *, context: contextvars.Context | None = None) -> None:
        if self._wakeup is None and not self.done():
            self._wakeup = (fn, context)
        else:
            super().add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Callable[[Any], Any]) -> int:
        if self._wakeup is not None and self._wakeup[0] == fn:
            self._wakeup = None
            return 1 + super().remove_done_callback(fn)
        return super().remove_done_callback(fn)

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self._handoff(later=True)
        return True

    def complete(self, value: Any) -> None:
        """Done with `value`: the waiting task runs now, until it waits again."""
        if self.done():
            return
        self.set_result(value)
        self._handoff(later=False)

    def fail(self, error: BaseException) -> None:
        """Done with `error`, which the waiting task raises: it runs now, as for `complete`."""
        if self.done():
            return
        self.set_exception(error)
        self._handoff(later=False)

    def _handoff(self, later: bool) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is None:
            return
        fn, context = wakeup
        loop = self.get_loop()
        if later or asyncio.current_task(loop) is not None:  # a task runs: the wake-up must wait its turn
            loop.call_soon(fn, self, context=context)
        elif context is None:
            fn(self)
        else:
            context.run(fn, self)


class ReadWaiter:
    """wait_ready(sock) for a connection's reader, registered with the selector once instead of
    per wait (two epoll_ctl calls and asyncio's bookkeeping per request). The selector is level-
    triggered, so a report it made before the reader drained the socket can arrive once the reader
    waits again: a read tells it from new bytes. With `read` (the reader's own read, into its
    buffer) that read is the reader's, and `wait` returns what it returned; without, a peek tells
    and `wait` returns None. The waiting task then runs in the selector's callback (Readable).
    Nobody waiting (the reader handles a request, or waits for room or a quota): registration
    ends, else the loop would be called back every turn; the next wait registers again.
    Plaintext only."""

    __slots__ = ("loop", "sock", "fd", "future", "armed", "read")

    def __init__(self, sock: socket.socket, read: Callable[[], Any] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.fd = sock.fileno()
        self.future: Readable | None = None
        self.armed = False
        self.read = read

    def _ready(self) -> None:
        future = self.future
        if future is None:
            self.loop.remove_reader(self.fd)
            self.armed = False
            return
        if future.done():  # cancelled: the task is being woken already
            return
        value = None
        try:
            if self.read is None:
                self.sock.recv(1, socket.MSG_PEEK)  # b"" at the end of the stream: the reader's recv sees it
            else:
                value = self.read()
        except BlockingIOError:
            return  # reported before the reader's last read: nothing new
        except OSError:
            pass  # a reset: the reader's own recv then sees the error or the end of the stream
        except Exception as e:  # the reader's read failed: the reader raises it, as if it had read itself
            self.future = None
            future.fail(e)
            return
        self.future = None
        future.complete(value)

    async def wait(self) -> Any:
        self.future = future = Readable(loop=self.loop)
        if not self.armed:
            self.loop.add_reader(self.fd, self._ready)
            self.armed = True
        try:
            return await future
        finally:
            if self.future is future:
                self.future = None

    def close(self) -> None:
        if self.armed:
            self.loop.remove_reader(self.fd)
            self.armed = False


IOV_MAX = 512  # buffers per sendmsg call, under the kernel's 1024


def send_now(sock: socket.socket, chunks: list) -> list[memoryview] | None:
    """Write buffers to a non-blocking socket in order, scatter-gather, until they are all sent
    (None) or the socket is full: then what is left, for a caller that waits for writability."""
    views = [memoryview(c) for c in chunks if len(c)]
    i = 0
    while i < len(views):
        try:
            sent = sock.sendmsg(views[i:i + IOV_MAX])
        except BlockingIOError:
            return views[i:]
        while sent and i < len(views):
            n = len(views[i])
            if sent >= n:
                sent -= n
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0
    return None


async def send_buffers(sock: socket.socket, chunks: list) -> None:
    """Send the buffers in order, waiting only when the socket is full."""
    rest = send_now(sock, chunks)
    while rest is not None:
        await wait_ready(sock, writable=True)
        rest = send_now(sock, rest)


LISTEN_BACKLOG = 128


def open_listener(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket: the server's, and the supervisor's check that a broker's port is free."""
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
