"""Producer ids in blocks (KIP-730): a broker serves InitProducerId from the block the controller
gave it, asks for the next one at 90%, keeps serving from its block while the controller is away,
and answers COORDINATOR_LOAD_IN_PROGRESS (retriable) only once the block is used up."""
from __future__ import annotations

import pytest

from kshim.clock import ManualClock
from kshim.controller import messages as m
from kshim.controller import state as controller_state
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.store import MetadataStore
from kshim.errors import BrokerError
from kshim.replica.producer_ids import ProducerIdManager
from wire.errors import ErrorCode


class FakeController:
    """The persisted counter behind AllocateProducerIds, which can be switched off."""

    def __init__(self) -> None:
        self.next = 0
        self.up = True
        self.asked: list[int] = []

    async def allocate(self, count: int) -> int:
        if not self.up:
            raise BrokerError(ErrorCode.NOT_CONTROLLER, "the controller is not reachable")
        self.asked.append(count)
        first, self.next = self.next, self.next + count
        return first


@pytest.mark.anyio
async def test_ids_come_from_blocks_and_the_next_block_is_fetched_at_90_percent():
    c = FakeController()
    ids = ProducerIdManager(c.allocate, block_size=10)
    got = [await ids.generate() for _ in range(9)]
    assert got == list(range(9)) and c.asked == [10]
    got.append(await ids.generate())
    assert c.asked == [10, 10]  # the 10th id is past 90% of the block: the next block is fetched
    got += [await ids.generate() for _ in range(10)]
    assert got == list(range(20)) and len(set(got)) == 20


@pytest.mark.anyio
async def test_the_block_serves_while_the_controller_is_away_then_a_retriable_error():
    c = FakeController()
    ids = ProducerIdManager(c.allocate, block_size=10)
    assert await ids.generate() == 0
    c.up = False
    assert [await ids.generate() for _ in range(9)] == list(range(1, 10))  # prefetch failures are silent
    with pytest.raises(BrokerError) as e:
        await ids.generate()
    assert e.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    c.up = True
    assert await ids.generate() == 10  # the controller is back: the next block


@pytest.mark.anyio
async def test_a_restarted_controller_never_hands_out_an_id_twice(tmp_path):
    def controller() -> Controller:
        return Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), ManualClock())

    c = controller()
    first = await m.invoke({m.Server.CONTROLLER: c}, m.AllocateProducerIds(1000))
    c.close()
    c = controller()
    assert c.allocate_producer_ids(1000) == first + 1000
    with pytest.raises(BrokerError) as e:
        c.allocate_producer_ids(0)
    assert e.value.code == ErrorCode.INVALID_REQUEST
    c.close()


def test_image_versions_keep_increasing_across_controller_restarts_faster_than_the_clock(tmp_path, monkeypatch):
    """A ManualClock that never moves: versions cannot come from the wall clock alone."""
    monkeypatch.setattr(controller_state, "VERSION_RANGE", 3)  # reserved 3 at a time: ranges run out
    clock = ManualClock()

    def controller() -> Controller:
        return Controller(MetadataStore(tmp_path / "metadata.sqlite"), ControllerConfig(), clock)

    c = controller()
    c.register_broker(0, "127.0.0.1", 9092)
    for i in range(5):
        c.create_topic(f"t{i}", 1, 1)
    last = c.version
    c.close()
    c = controller()
    assert c.version > last
    c.close()
