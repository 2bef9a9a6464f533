"""What a broker's controller clients share: one generic `call` per operation, in-process
(kshim.controller.local) or over the RPC (kshim.cluster.remote), and the broker's session."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

from kshim.cluster.image import PartitionInfo
from kshim.controller.messages import AlterPartition, Operation

R = TypeVar("R")


class ControllerClient(ABC):
    node_id: int
    broker_epoch: int  # of this broker's current registration

    @property
    def connected(self) -> bool:
        """Whether the controller answers now; the in-process one always does."""
        return True

    @abstractmethod
    async def call(self, request: Operation[R]) -> R:
        """The result of `request`; BrokerError if the controller refuses it. An operation that
        publishes returns once this broker has applied an image that includes its effect."""

    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionInfo:
        """This broker's ISR proposal, under its session: the controller fences a proposal from a
        previous incarnation (the broker epoch) as it fences one from a stale leader."""
        return await self.call(AlterPartition(self.node_id, self.broker_epoch, topic, index, leader_epoch,
                                              partition_epoch, tuple(new_isr)))
