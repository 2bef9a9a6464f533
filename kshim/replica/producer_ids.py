"""Producer ids for InitProducerId, served from blocks the controller hands out (Kafka's
AllocateProducerIds, KIP-730).

A broker asks the controller for a block of BLOCK_SIZE ids and serves InitProducerId from it
locally; once PREFETCH_FRACTION of the block is used, the next InitProducerId also asks for the
next block (it still gets its id from the current block if the controller does not answer). So a
broker that has produced ids before keeps handing them out while its controller restarts. The
controller's counter is on disk and moves past each block before answering: no id is ever handed
out twice, and ids a broker did not use before it stopped are skipped, as in Kafka.

With no id left and no answer from the controller, InitProducerId gets COORDINATOR_LOAD_IN_PROGRESS
(retriable), as Kafka's RPCProducerIdManager answers while it waits for its next block.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import anyio

from kshim.errors import BrokerError
from wire.errors import ErrorCode

BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
PREFETCH_FRACTION = 0.9  # Kafka's RPCProducerIdManager asks for the next block at 90%
MAX_ATTEMPTS = 3  # concurrent callers may drain a fresh block between our fetch and our turn


class ProducerIdManager:
    def __init__(self, allocate: Callable[[int], Awaitable[int]], block_size: int = BLOCK_SIZE) -> None:
        self._allocate = allocate  # asks the controller for `count` ids, returns the first
        self.block_size = block_size
        self._next = self._end = 0  # the current block: ids _next.._end-1 are free
        self._prefetched: tuple[int, int] | None = None
        self._lock = anyio.Lock()
        self._prefetch_at = block_size - round(block_size * PREFETCH_FRACTION)  # ids left

    @property
    def remaining(self) -> int:
        return self._end - self._next

    async def generate(self) -> int:
        """A producer id never handed out before; BrokerError COORDINATOR_LOAD_IN_PROGRESS when
        the block is used up and the controller does not answer."""
        for _ in range(MAX_ATTEMPTS):
            if self._prefetched is None and self.remaining <= self._prefetch_at:
                await self._fetch(required=self.remaining == 0)
            if self.remaining == 0 and self._prefetched is not None:
                self._next, self._end = self._prefetched
                self._prefetched = None
            if self.remaining > 0:
                pid = self._next
                self._next += 1
                return pid
        raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "producer id block used up; waiting for the next")

    async def _fetch(self, required: bool) -> None:
        async with self._lock:
            if self._prefetched is not None:  # another caller fetched it meanwhile
                return
            try:
                first = await self._allocate(self.block_size)
            except BrokerError as e:
                if required:
                    raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                      f"no producer id left in this broker's block and none from the "
                                      f"controller ({e.code.name}: {e.message}); retry") from None
                return  # the current block still serves; the next call asks again
            self._prefetched = (first, first + self.block_size)
