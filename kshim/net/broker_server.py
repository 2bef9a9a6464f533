"""A broker with its coordinators (Kafka's BrokerServer): what the network layer serves.

The Broker (metadata image, replicas through its ReplicaManager, the controller client) knows
nothing of the coordinators; this wires them to it: they follow each applied image (leadership of
their internal topics' partitions), and the group coordinator hears of every COMMITTED
transaction marker (which settles transactional offset commits on `__consumer_offsets`); the
client quotas of each image go to the QuotaManager the handlers charge.

Each coordinator is built, and its modules imported, when first needed: when a request reads it
(`node.groups`: FindCoordinator, JoinGroup, a transactional Produce, ...) or when an image makes
this broker the leader of a partition of its internal topic, whose state it must then load
(committed offsets, open transactions, share state after a restart). Before that it would hold
nothing: a broker that serves only produce and fetch never loads them (docs/benchmarks.md,
"Start time").
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup

from kshim.broker import Broker
from kshim.configs import group_config
from kshim.coordinator import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_TOPIC
from kshim.net.quota_manager import QuotaManager
from kshim.observability.metrics import BrokerMetrics, CoordinatorCounts, count_states
from kshim.observability.telemetry import TelemetryManager
from kshim.replica import TxnMarker
from kshim.replica.manager import ProducerExpiry
from kshim.replication.isr import IsrChanges

if TYPE_CHECKING:
    from kshim.coordinator.groups import GroupCoordinator
    from kshim.coordinator.share_partitions.coordinator import ShareCoordinator
    from kshim.coordinator.share_partitions.manager import SharePartitionManager
    from kshim.coordinator.transactions import TransactionCoordinator


class _Coordinator(Protocol):
    def on_image(self) -> None: ...

    async def run(self) -> None: ...


C = TypeVar("C", bound=_Coordinator)


class BrokerServer:
    def __init__(self, broker: Broker, isr_changes: IsrChanges | None = None) -> None:
        self.broker = broker
        self._groups: GroupCoordinator | None = None
        self._transactions: TransactionCoordinator | None = None
        # share groups' data half: the share-state coordinator, and the share partitions led here
        self._share_coordinator: ShareCoordinator | None = None
        self._share: SharePartitionManager | None = None
        self._built: list[_Coordinator] = []  # in the order of their image listeners and tasks
        self._tasks: TaskGroup | None = None  # run()'s: a coordinator built while it runs starts its task there
        self.metrics = BrokerMetrics(broker, isr_changes, self.coordinator_counts)
        self.quotas = QuotaManager(broker.config.quota_window_num, broker.config.quota_window_size_seconds)
        self.telemetry = TelemetryManager()  # client telemetry (KIP-714): subscriptions and pushed metrics
        broker.image_listeners.append(self._on_image)
        broker.replica_manager.marker_listeners.append(self._on_marker_committed)
        self._on_image()  # an image applied before this existed

    @property
    def groups(self) -> GroupCoordinator:
        return self._groups if self._groups is not None else self._build_groups()

    @property
    def transactions(self) -> TransactionCoordinator:
        return self._transactions if self._transactions is not None else self._build_transactions()

    @property
    def share_coordinator(self) -> ShareCoordinator:
        return self._share_coordinator if self._share_coordinator is not None else self._build_share_coordinator()

    @property
    def share(self) -> SharePartitionManager:
        return self._share if self._share is not None else self._build_share()

    def _build_groups(self) -> GroupCoordinator:
        from kshim.coordinator.groups import GroupCoordinator
        groups = GroupCoordinator(self.broker)
        # the group half tells the data half of groups DeleteGroups deletes (a deletion reaches the
        # share state wherever it lives); members that leave are not its news: a member's share
        # session ends with its closing request, as in Kafka (share_partitions/manager.py)
        groups.share_group_deleters.append(lambda group: self.share.delete_group_state(group))
        self._groups = self._add(groups)
        return groups

    def _build_transactions(self) -> TransactionCoordinator:
        from kshim.coordinator.transactions import TransactionCoordinator
        self._transactions = self._add(TransactionCoordinator(self.broker))
        return self._transactions

    def _build_share_coordinator(self) -> ShareCoordinator:
        from kshim.coordinator.share_partitions.coordinator import ShareCoordinator
        self._share_coordinator = self._add(ShareCoordinator(self.broker))
        return self._share_coordinator

    def _build_share(self) -> SharePartitionManager:
        from kshim.coordinator.share_partitions.manager import SharePartitionManager
        self._share = self._add(SharePartitionManager(self.broker, self.share_coordinator,
                                                      group_configs=self._share_configs))
        return self._share

    def _add(self, coordinator: C) -> C:
        """A coordinator just built: it follows the images from the current one on, and its
        background task runs with run()'s (started there if run() has not begun yet)."""
        self._built.append(coordinator)
        coordinator.on_image()
        if self._tasks is not None:
            self._tasks.start_soon(coordinator.run)
        return coordinator

    def _leads(self, topic: str) -> bool:
        """Whether this broker leads a partition of `topic`."""
        info = self.broker.topics.get(topic)
        if info is None:
            return False
        for p in info.partitions:
            replica = self.broker.partition(topic, p.index)
            if replica is not None and replica.is_leader:
                return True
        return False

    def _on_marker_committed(self, topic: str, index: int, marker: TxnMarker, offset: int) -> None:
        # a pending transactional offset commit exists only in a group coordinator already built
        if self._groups is not None:
            self._groups.on_marker_committed(topic, index, marker, offset)

    def share_in_flight(self, group: str) -> list[dict]:
        """The group's in-flight records on the share partitions led here (`kshim ctl groups`)."""
        return self._share.in_flight_list(group) if self._share is not None else []

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
        for coordinator in list(self._built):
            coordinator.on_image()
        # a coordinator not built yet is built, and starts loading, once it leads a partition of its topic
        if self._groups is None and self._leads(OFFSETS_TOPIC):
            self._build_groups()
        if self._transactions is None and self._leads(TRANSACTION_TOPIC):
            self._build_transactions()
        if self._share_coordinator is None and self._leads(SHARE_STATE_TOPIC):
            self._build_share_coordinator()
        self.quotas.update(self.broker.image.client_quotas)
        self.telemetry.update(self.broker.image.client_metrics)

    def coordinator_counts(self) -> CoordinatorCounts:
        """The groups and transactional ids this broker coordinates, by state (for its metrics)."""
        groups = self._groups.groups.values() if self._groups is not None else ()
        txns = self._transactions.txns.values() if self._transactions is not None else ()
        return CoordinatorCounts(count_states(g.state for g in groups), count_states(t.state.value for t in txns))

    async def run(self) -> None:
        """The background work: replica housekeeping and the coordinators' loading and timers."""
        self.broker.replica_manager.start_writers()  # appends leave the event loop (kshim.log.writer)
        try:
            async with anyio.create_task_group() as tg:
                config = self.broker.config
                tg.start_soon(self.broker.replica_manager.housekeeping, ProducerExpiry(
                    config.producer_id_expiration_ms, config.producer_id_expiration_check_interval_ms))
                tg.start_soon(self.broker.recover_deferred)
                tg.start_soon(self.broker.replica_manager.run_moves)
                tg.start_soon(self.broker.replica_manager.cleaner.run, self.broker.replica_manager)
                for coordinator in self._built:
                    tg.start_soon(coordinator.run)
                self._tasks = tg
        finally:
            self._tasks = None
