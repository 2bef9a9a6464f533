"""Waiting on and writing to non-blocking sockets from asyncio, cheaply: what the server's
connections and the broker-to-broker client (kshim.replication.client) share. anyio's wait_readable and streams ask for
the running backend on every call and checkpoint on every receive: a loop turn, and several us, a
request (docs/benchmarks.md, "Where the broker's time goes")."""
from __future__ import annotations

import asyncio
import socket


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


class ReadWaiter:
    """wait_ready(sock) for a connection's reader, registered with the selector once instead of
    per wait (two epoll_ctl calls and asyncio's bookkeeping per request). The selector is level-
    triggered, so a report it made before the reader drained the socket can arrive once the reader
    waits again: a peek tells it from new bytes, which saves the reader a loop turn. Nobody
    waiting (the reader handles a request, or waits for room or a quota): registration ends, else
    the loop would be called back every turn; the next wait registers again. Plaintext only."""

    __slots__ = ("loop", "sock", "fd", "future", "armed")

    def __init__(self, sock: socket.socket) -> None:
        self.loop = asyncio.get_running_loop()
        self.sock = sock
        self.fd = sock.fileno()
        self.future: asyncio.Future | None = None
        self.armed = False

    def _ready(self) -> None:
        future = self.future
        if future is None:
            self.loop.remove_reader(self.fd)
            self.armed = False
            return
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # b"" at the end of the stream: the reader's recv sees it
        except BlockingIOError:
            return  # reported before the reader's last read: nothing new
        except OSError:
            pass  # a reset: the peek took the error, the reader's recv then sees the end of the stream
        self.future = None
        wake(future)

    async def wait(self) -> None:
        self.future = future = self.loop.create_future()
        if not self.armed:
            self.loop.add_reader(self.fd, self._ready)
            self.armed = True
        try:
            await future
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
