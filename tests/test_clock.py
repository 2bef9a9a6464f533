"""The test clock: time moves only when told, and sleepers wake only when it has moved far enough."""
from __future__ import annotations

import anyio
import pytest

from kshim.clock import SYSTEM, ManualClock


def test_advance_moves_wall_and_monotonic_time_together():
    clock = ManualClock(wall_ms=5_000, monotonic=2.0)
    clock.advance(1.5)
    clock.advance(ms=250)
    assert (clock.wall_ms(), clock.monotonic(), clock.monotonic_ms()) == (6_750, 3.75, 3_750)
    with pytest.raises(ValueError):
        clock.advance(-0.001)


@pytest.mark.anyio
async def test_sleep_returns_once_time_has_advanced_past_its_deadline():
    clock = ManualClock()
    woke: list[int] = []

    async def sleeper() -> None:
        await clock.sleep(1.0)
        woke.append(clock.monotonic_ms())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper)
            await anyio.wait_all_tasks_blocked()
            clock.advance(ms=999)
            await anyio.wait_all_tasks_blocked()
            assert woke == []  # 1 ms short
            clock.advance(ms=1)
    assert woke == [1_000]


def test_system_clock_agrees_with_itself():
    before = SYSTEM.monotonic_ms()
    assert SYSTEM.wall_ms() > 1_600_000_000_000 and SYSTEM.monotonic_ms() >= before
