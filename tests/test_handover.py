"""A leader that a reassignment removes hands over (Partition.hand_over, kshim.replication.isr):
from the moment it decides to propose the completing ISR change it takes no appends, and it
proposes only once every target replica has fetched its whole log. In-process, the target's
fetches recorded by hand."""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio
import pytest

from kshim.clock import SYSTEM
from kshim.cluster.image import completes_reassignment
from kshim.replica.partition import FollowerState, Partition
from tests.test_transactions import data, standalone_topic
from wire.errors import ErrorCode

TARGET = 99


@asynccontextmanager
async def moving_away(tmp_path, records: int = 1) -> AsyncIterator[Partition]:
    """A one-broker partition with `records` records, whose replicas as a reassignment from this
    broker to TARGET leaves them: the target first, in sync (it joins with the change) and
    fetching, the leader being removed."""
    broker, p = await standalone_topic(tmp_path)
    try:
        for seq in range(records):
            assert not p.append(data(1, seq, b"v", transactional=False)).error
        p.replicas, p.adding, p.removing = (TARGET, p.node_id), (TARGET,), (p.node_id,)
        p.followers = {TARGET: FollowerState(log_end_offset=0, last_fetch_ms=SYSTEM.wall_ms())}
        yield p
    finally:
        broker.close()


def test_the_change_completes_a_reassignment_once_it_holds_every_target():
    assert completes_reassignment((2, 0), (2,), (0,), (0, 2))
    assert not completes_reassignment((1, 2, 0), (2,), (0,), (0, 1))  # 2, a target, not in it yet
    assert not completes_reassignment((0, 1), (), (), (0, 1))  # no reassignment under way


@pytest.mark.anyio
async def test_a_leader_handing_over_refuses_appends_until_the_target_holds_its_log(tmp_path):
    async with moving_away(tmp_path, records=3) as p:
        end = p.log_end_offset
        result: list[bool] = []
        async with anyio.create_task_group() as tg:
            async def hand_over() -> None:
                result.append(await p.hand_over([TARGET, p.node_id], timeout_s=30))
            tg.start_soon(hand_over)
            await anyio.sleep(0)  # it started: appends are refused from now on
            refused = p.append(data(1, 3, b"late", transactional=False))
            assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.log_end_offset == end
            assert p.append_marker(1, 0, True, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
            p.record_follower_fetch(TARGET, end - 1, 0)  # one record short: still waiting
            await anyio.sleep(0.05)
            assert result == []
            p.record_follower_fetch(TARGET, end, 0)  # the target has the whole log
        assert result == [True] and p.log_end_offset == end


@pytest.mark.anyio
async def test_a_handover_the_target_does_not_catch_up_with_gives_up_at_its_timeout(tmp_path):
    async with moving_away(tmp_path) as p:
        assert await p.hand_over([TARGET], timeout_s=0.05) is False


@pytest.mark.anyio
async def test_no_handover_starts_for_a_target_that_stopped_fetching(tmp_path):
    async with moving_away(tmp_path) as p:
        p.followers[TARGET].last_fetch_ms = SYSTEM.wall_ms() - 5_000  # paused, still in the ISR
        assert await p.hand_over([TARGET], timeout_s=1.0) is False
        assert not p.handing_over and not p.append(data(1, 1, b"w", transactional=False)).error
