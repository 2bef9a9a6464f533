"""The server's per-connection plumbing: the outbox between a connection's reader and writer, and
the reader's wait for a readable socket (registered once, stale reports ignored, the reader run
in the selector's callback)."""
from __future__ import annotations

import asyncio
import socket
from typing import Any

import anyio
import pytest

from kshim.net.outbox import Outbox
from kshim.sockets import Readable, ReadWaiter, send_now


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.anyio
async def test_outbox_keeps_order_and_hands_everything_queued_before_the_end():
    box = Outbox(limit=8)
    taken: list = []

    async def writer():
        while True:
            try:
                taken.append(await box.take())
            except anyio.EndOfStream:
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        await turns()
        assert box.idle  # the writer waits, nothing queued
        assert box.put_nowait(1)
        assert not box.idle  # a put wakes it: nothing may overtake what is queued
        for item in (2, 3):
            await box.put(item)
        box.close()
    assert taken == [1, 2, 3]


@pytest.mark.anyio
async def test_outbox_put_waits_for_room():
    box = Outbox(limit=2)
    await box.put("a")
    await box.put("b")
    assert not box.put_nowait("c")
    done = anyio.Event()

    async def reader():
        await box.put("c")  # waits: the box is full
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await turns()
        assert not done.is_set()
        assert await box.take() == "a"
        with anyio.fail_after(5):
            await done.wait()
    assert list(box.items) == ["b", "c"]


@pytest.mark.anyio
async def test_outbox_take_after_close_drains_then_ends():
    box = Outbox(limit=4)
    await box.put("x")
    box.close()
    assert await box.take() == "x"
    with pytest.raises(anyio.EndOfStream):
        await box.take()
    with pytest.raises(anyio.ClosedResourceError):
        full = Outbox(limit=1)
        await full.put(1)
        full.close()
        await full.put(2)


def test_send_now_returns_what_the_socket_did_not_take():
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        assert send_now(a, [b"head", b"", b"tail"]) is None
        assert b.recv(16) == b"headtail"
        big = [b"x" * 65536 for _ in range(64)]  # 4 MiB: more than the socket holds
        rest = send_now(a, big)
        assert rest is not None
        left = sum(len(v) for v in rest)
        assert 0 < left < 64 * 65536
        received = 0
        b.settimeout(5)
        while received < 64 * 65536 - left:
            received += len(b.recv(1 << 20))
        assert received == 64 * 65536 - left  # what was taken, exactly once; the rest is returned
    finally:
        a.close()
        b.close()


@pytest.mark.anyio
async def test_read_waiter_wakes_on_bytes_and_ignores_a_stale_report():
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        waiter = ReadWaiter(a)
        woke = anyio.Event()

        async def wait():
            await waiter.wait()
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await turns()
            waiter._ready()  # a report from before the last read: nothing to read
            await turns()
            assert not woke.is_set()
            b.send(b"request")
            with anyio.fail_after(5):
                await woke.wait()
        assert a.recv(16) == b"request"
        waiter.close()
        assert not waiter.armed
    finally:
        a.close()
        b.close()


@pytest.mark.anyio
async def test_read_waiter_stops_watching_while_nobody_waits():
    """Bytes pending and the reader busy elsewhere: the level-triggered selector must not call
    back every loop turn, so the registration ends until the next wait."""
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        class Counted(ReadWaiter):
            __slots__ = ("calls",)

            def _ready(self) -> None:
                self.calls += 1
                super()._ready()

        waiter = Counted(a)
        waiter.calls = 0
        b.send(b"x")
        with anyio.fail_after(5):
            await waiter.wait()
        await turns(20)  # the bytes stay unread: nobody waits
        assert not waiter.armed
        assert waiter.calls <= 2
        with anyio.fail_after(5):
            await waiter.wait()  # registers again, and the bytes are still there
        waiter.close()
    finally:
        a.close()
        b.close()


@pytest.mark.anyio
async def test_read_waiter_with_a_read_of_its_own_hands_the_reader_what_it_read():
    """The server's waiter reads into the connection's buffer itself when the selector reports
    bytes: the reader gets the read's result (count, room) and makes no recv of its own; a stale
    report (nothing to read) wakes nobody."""
    a, b = socket.socketpair()
    a.setblocking(False)
    buf = bytearray(16)
    try:
        def read() -> tuple[int, int]:
            return a.recv_into(buf), len(buf)

        waiter = ReadWaiter(a, read)
        got: list = []

        async def wait():
            got.append(await waiter.wait())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await turns()
                waiter._ready()  # nothing to read: the read fails with EWOULDBLOCK, the reader sleeps on
                await turns()
                assert got == []
                b.send(b"request")
        assert got == [(7, 16)] and bytes(buf[:7]) == b"request"
        waiter.close()
    finally:
        a.close()
        b.close()


@pytest.mark.anyio
async def test_a_readable_completed_by_a_loop_callback_runs_its_task_there_and_then():
    """Readable: the selector's callback that completes it runs the waiting task at once (a loop
    turn saved per request read one at a time); completed from inside a task, or cancelled, it
    wakes the waiting task at the next turn, as an asyncio.Future does."""
    loop = asyncio.get_running_loop()

    async def waiting(future: Readable) -> Any:
        return await future

    future = Readable(loop=loop)
    task = loop.create_task(waiting(future))
    await turns()
    seen: list[bool] = []
    loop.call_soon(lambda: (future.complete("bytes"), seen.append(task.done())))
    await turns()
    assert seen == [True] and task.result() == "bytes"

    future = Readable(loop=loop)
    task = loop.create_task(waiting(future))
    await turns()
    future.complete("from a task")  # this test is a task: the waiting one runs at its own turn
    assert not task.done()
    await turns()
    assert task.result() == "from a task"

    future = Readable(loop=loop)
    task = loop.create_task(waiting(future))
    await turns()
    task.cancel()
    await turns()
    assert task.cancelled() and future.cancelled()


@pytest.mark.anyio
async def test_a_read_that_fails_in_the_waiter_is_raised_by_the_reader():
    """The waiter reads for the reader: a read that fails for another reason than the socket's
    (a bug, say) must end up in the reader, which then closes its connection, never leave it
    waiting for bytes that were already taken."""
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        def read() -> tuple[int, int]:
            raise ValueError("no room")

        waiter = ReadWaiter(a, read)
        raised: list[BaseException] = []

        async def wait():
            try:
                await waiter.wait()
            except ValueError as e:
                raised.append(e)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await turns()
                b.send(b"request")
        assert [str(e) for e in raised] == ["no room"]
        waiter.close()
    finally:
        a.close()
        b.close()
