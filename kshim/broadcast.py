"""A re-armable broadcast: every task waiting when `fire()` is called wakes up.

The anyio.Event behind it is made on first wait, so objects holding a Signal can be built
outside a running event loop (tests, start-up code).
"""
from __future__ import annotations

import anyio


class Signal:
    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def fire(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
