"""What replication needs of the broker it runs in: the image, the hosted replicas, and the
controller for ISR proposals. A protocol, so that replication and the broker (peers in the
replica-management layer) do not import each other."""
from __future__ import annotations

from typing import Protocol

from kshim.cluster.image import MetadataImage, PartitionInfo
from kshim.replica.partition import Partition


class IsrProposals(Protocol):
    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionInfo: ...


class ReplicaHost(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def controller(self) -> IsrProposals: ...

    def replicas(self) -> list[Partition]: ...

    async def image_changed(self) -> None: ...
