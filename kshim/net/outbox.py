"""A connection's responses on their way from its reader task to its writer task, in request order.

An anyio memory object stream did this before; its receive() begins with a checkpoint, a loop
turn of its own each time the writer waits, and it sets up an anyio Event per wait: two of the
four event-loop turns a small request took (docs/benchmarks.md, "Where the broker's time goes").
This is a deque and at most one waiting future per side, on asyncio directly.

`idle` tells the reader that the writer waits with nothing queued and nothing being sent: the
reader may then write a ready response to the socket itself (Server._reader), a loop turn sooner
and without waking the writer, and order is kept because nothing is ahead of it.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Callable

import anyio

from kshim.sockets import send_now, wake


class Outbox:
    __slots__ = ("items", "limit", "closed", "_taker", "_putter")

    def __init__(self, limit: int) -> None:
        self.items: deque[Any] = deque()
        self.limit = limit  # items queued before put() waits (back pressure on the reader)
        self.closed = False
        self._taker: asyncio.Future | None = None  # the writer, waiting for an item
        self._putter: asyncio.Future | None = None  # the reader, waiting for room

    @property
    def idle(self) -> bool:
        """The writer waits for an item and none is queued (a put clears this at once)."""
        return self._taker is not None

    def put_nowait(self, item: Any) -> bool:
        if len(self.items) >= self.limit:
            return False
        self.items.append(item)
        wake(self._taker)
        self._taker = None
        return True

    async def put(self, item: Any) -> None:
        while not self.put_nowait(item):
            if self.closed:
                raise anyio.ClosedResourceError
            await self._park("_putter")

    async def take(self) -> Any:
        """The next item; anyio.EndOfStream once closed and empty."""
        while not self.items:
            if self.closed:
                raise anyio.EndOfStream
            await self._park("_taker")
        return self.take_nowait()

    def take_nowait(self) -> Any:
        """The next item queued; IndexError if none."""
        item = self.items.popleft()
        wake(self._putter)
        self._putter = None
        return item

    async def _park(self, slot: str) -> None:
        """Wait on a new future kept in `slot` (_taker or _putter) until the other side wakes it."""
        future = asyncio.get_running_loop().create_future()
        setattr(self, slot, future)
        try:
            await future
        finally:
            if getattr(self, slot) is future:
                setattr(self, slot, None)

    def close(self) -> None:
        """No more items: the writer takes what is queued, then gets EndOfStream."""
        self.closed = True
        wake(self._taker)
        wake(self._putter)
        self._taker = self._putter = None



class DirectSends:
    """Answers the reader writes to the socket itself (the outbox idle: nothing ahead of them),
    gathered while it answers the requests of one read and sent with one `sendmsg`: a read brings
    ~60 pipelined requests, and a `sendmsg` per answer was a tenth of their CPU.

    Order: the reader flushes before it queues anything in the outbox, and at the end of the
    requests it read. A handler that waits (the reader then yields to the loop) must not hold the
    answers before it: a request handled while answers are gathered schedules a flush for the
    loop's next turn (`guard`), which finds nothing to do when the reader flushed first. What the socket does not take goes to the
    outbox, which is empty then (nothing was queued since the first answer was gathered)."""

    __slots__ = ("sock", "outbox", "state", "chunks", "answers", "settled", "_settle", "_scheduled", "_loop")

    def __init__(self, sock: Any, outbox: Outbox, state: Any, settle: Callable[[list], None]) -> None:
        self.sock = sock
        self.outbox = outbox
        self.state = state  # the connection's: `outstanding` and `last_sent` are kept up to date
        self.chunks: list = []
        self.answers = 0
        # what is recorded of answers (metrics, request log) once they are sent, by `settle`: a
        # client waiting for its answer (one request at a time) does not wait for it too
        self.settled: list = []
        self._settle = settle
        self._scheduled = False
        self._loop = asyncio.get_running_loop()

    def add(self, response: list) -> None:
        self.chunks += response
        self.answers += 1

    def guard(self) -> None:
        """Before a request is handled with answers gathered: should its handler wait, they go
        out at the loop's next turn. (With none gathered, as for a client that sends one request
        at a time, no callback is scheduled: a turn of the loop saved per request.)"""
        if self.answers and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        if self.answers:
            self._send()
        if self.settled:  # after the send; also for answers that went through the outbox
            settled, self.settled = self.settled, []
            self._settle(settled)

    def _send(self) -> None:
        chunks, answers = self.chunks, self.answers
        self.chunks, self.answers = [], 0
        try:
            rest = send_now(self.sock, chunks)
        except OSError:
            # the peer is gone: the reader finds out on its next read; these answers go nowhere
            self.state.outstanding -= answers
            return
        if rest is None:
            self.state.outstanding -= answers
            self.state.last_sent = time.monotonic()
        else:  # the socket is full: the writer sends the rest (one item for all of them)
            self.state.outstanding -= answers - 1
            if not self.outbox.put_nowait(rest):
                raise RuntimeError("the outbox had answers queued ahead of direct sends")
