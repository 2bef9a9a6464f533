"""Time for the broker: one `Clock` interface, the system's clock, and a `ManualClock` for tests.

Wall time (epoch milliseconds) is what Kafka puts on the wire and on disk: record timestamps,
transaction start times, offset commit times, metadata versions. Monotonic time never goes back,
so deadlines, session timeouts and intervals use it. Objects that already took a clock take a
`Clock`; elsewhere code reads the module-level `SYSTEM`.
"""
from __future__ import annotations

import time
from typing import Protocol

import anyio
import anyio.lowlevel

_NS_PER_MS = 1_000_000
_NS_PER_S = 1_000_000_000


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary start; never goes back."""

    def monotonic_ms(self) -> int:
        """`monotonic()` in whole milliseconds."""

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` of this clock's monotonic time have passed."""


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // _NS_PER_MS

    def monotonic(self) -> float:
        return time.monotonic()

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // _NS_PER_MS

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


SYSTEM: Clock = SystemClock()


class ManualClock:
    """Time that moves only when a test calls `advance`; wall and monotonic time move together.

    `sleep` returns once `advance` has carried the monotonic time past its deadline.
    """

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 0.0) -> None:
        self._wall_ns = wall_ms * _NS_PER_MS
        self._mono_ns = round(monotonic * _NS_PER_S)
        self._tick: anyio.Event | None = None  # created inside the event loop, by the first sleeper

    def wall_ms(self) -> int:
        return self._wall_ns // _NS_PER_MS

    def monotonic(self) -> float:
        return self._mono_ns / _NS_PER_S

    def monotonic_ms(self) -> int:
        return self._mono_ns // _NS_PER_MS

    def advance(self, seconds: float = 0.0, *, ms: int = 0) -> None:
        step = round(seconds * _NS_PER_S) + ms * _NS_PER_MS
        if step < 0:
            raise ValueError("a clock does not go back")
        self._wall_ns += step
        self._mono_ns += step
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.set()

    async def sleep(self, seconds: float) -> None:
        deadline = self._mono_ns + round(max(seconds, 0) * _NS_PER_S)
        while self._mono_ns < deadline:
            if self._tick is None:
                self._tick = anyio.Event()
            await self._tick.wait()
        await anyio.lowlevel.checkpoint()


__all__ = ["Clock", "ManualClock", "SYSTEM", "SystemClock"]
