"""A broker with its coordinators (Kafka's BrokerServer): what the network layer serves.

The Broker (metadata image, replicas through its ReplicaManager, the controller client) knows
nothing of the coordinators; this wires them to it: they follow each applied image (leadership of
their internal topics' partitions), and the group coordinator hears of every COMMITTED
transaction marker (which settles transactional offset commits on `__consumer_offsets`); the
client quotas of each image go to the QuotaManager the handlers charge.
"""
from __future__ import annotations

import anyio

from kshim.broker import Broker
from kshim.configs import group_config
from kshim.coordinator.groups import GroupCoordinator
from kshim.coordinator.share_partitions.coordinator import ShareCoordinator
from kshim.coordinator.share_partitions.manager import SharePartitionManager
from kshim.coordinator.transactions import TransactionCoordinator
from kshim.net.quota_manager import QuotaManager
from kshim.observability.metrics import BrokerMetrics, CoordinatorCounts, count_states
from kshim.observability.telemetry import TelemetryManager
from kshim.replication.isr import IsrChanges


class BrokerServer:
    def __init__(self, broker: Broker, isr_changes: IsrChanges | None = None) -> None:
        self.broker = broker
        self.groups = GroupCoordinator(broker)
        self.transactions = TransactionCoordinator(broker)
        # share groups' data half: the share-state coordinator, and the share partitions led here
        self.share_coordinator = ShareCoordinator(broker)
        self.share = SharePartitionManager(broker, self.share_coordinator, group_configs=self._share_configs)
        # the group half tells the data half of members that leave and of groups DeleteGroups deletes
        self.groups.share_member_listeners.append(self.share.on_member_left)
        self.groups.share_group_deleters.append(self.share.delete_group_state)
        self.metrics = BrokerMetrics(broker, isr_changes, self.coordinator_counts)
        self.quotas = QuotaManager(broker.config.quota_window_num, broker.config.quota_window_size_seconds)
        self.telemetry = TelemetryManager()  # client telemetry (KIP-714): subscriptions and pushed metrics
        broker.image_listeners += [self.groups.on_image, self.transactions.on_image, self.share_coordinator.on_image,
                                   self.share.on_image, self._on_image]
        broker.replica_manager.marker_listeners.append(self.groups.on_marker_committed)
        self.groups.on_image()  # an image applied before the coordinators existed
        self.transactions.on_image()
        self.share_coordinator.on_image()
        self._on_image()

    def _share_configs(self, group: str) -> dict[str, str]:
        """A share group's effective GROUP configs (kshim.configs.group_config), by the names the
        share partitions read."""
        c = group_config(self.broker.image, group, self.broker.config.group_settings)
        return {"share.record.lock.duration.ms": str(c.share_record_lock_duration_ms),
                "share.auto.offset.reset": c.share_auto_offset_reset,
                "share.isolation.level": c.share_isolation_level,
                "group.share.delivery.count.limit": str(c.share_delivery_count_limit),
                "group.share.partition.max.record.locks": str(c.share_partition_max_record_locks)}

    def _on_image(self) -> None:
        self.quotas.update(self.broker.image.client_quotas)
        self.telemetry.update(self.broker.image.client_metrics)

    def coordinator_counts(self) -> CoordinatorCounts:
        """The groups and transactional ids this broker coordinates, by state (for its metrics)."""
        return CoordinatorCounts(count_states(g.state for g in self.groups.groups.values()),
                                 count_states(t.state.value for t in self.transactions.txns.values()))

    async def run(self) -> None:
        """The background work: replica housekeeping and the coordinators' loading and timers."""
        self.broker.replica_manager.start_writers()  # appends leave the event loop (kshim.log.writer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.broker.replica_manager.housekeeping)
            tg.start_soon(self.broker.recover_deferred)
            tg.start_soon(self.broker.replica_manager.run_moves)
            tg.start_soon(self.broker.replica_manager.cleaner.run, self.broker.replica_manager)
            tg.start_soon(self.groups.run)
            tg.start_soon(self.transactions.run)
            tg.start_soon(self.share_coordinator.run)
            tg.start_soon(self.share.run)
