"""Waiting in async unit tests: on a condition, with a deadline, never for a fixed time."""
from __future__ import annotations

from typing import Callable, TypeVar

import anyio

T = TypeVar("T")
POLL_S = 0.005
DEFAULT_TIMEOUT_S = 10.0


async def wait_until(predicate: Callable[[], T], timeout_s: float = DEFAULT_TIMEOUT_S,
                     message: str = "condition") -> T:
    """The first truthy value of `predicate()`, polled while other tasks run; AssertionError at the deadline."""
    with anyio.move_on_after(timeout_s):
        while not (value := predicate()):
            await anyio.sleep(POLL_S)
        return value
    raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
