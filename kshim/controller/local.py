"""The controller in the broker's own process: a single-broker kshim calls it directly.

The broker is registered as a listener, so every image the controller publishes is applied
before the call that caused it returns.
"""
from __future__ import annotations

import uuid

from kshim.cluster.image import PartitionInfo, TopicInfo
from kshim.controller.controller import Controller


class LocalControllerClient:
    def __init__(self, controller: Controller, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self.broker_epoch = 0

    def register(self, host: str, port: int, pid: int) -> None:
        self.broker_epoch = self.controller.register_broker(self.node_id, host, port, pid)

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str | None], validate_only: bool) -> TopicInfo | None:
        return self.controller.create_topic(name, partitions, replication_factor, configs, validate_only=validate_only)

    async def delete_topic(self, name: str) -> uuid.UUID:
        return self.controller.delete_topic(name)

    async def create_partitions(self, name: str, total: int, validate_only: bool) -> None:
        self.controller.create_partitions(name, total, validate_only=validate_only)

    async def set_topic_configs(self, name: str, configs: dict[str, str | None], validate_only: bool) -> None:
        self.controller.set_topic_configs(name, configs, validate_only=validate_only)

    async def allocate_producer_ids(self, count: int) -> int:
        return self.controller.allocate_producer_ids(count)

    async def alter_partition(self, topic: str, index: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionInfo:
        return self.controller.alter_partition(self.node_id, self.broker_epoch, topic, index, leader_epoch,
                                               partition_epoch, new_isr)
