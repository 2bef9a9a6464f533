"""`run_replication(broker, ...)`: follower fetchers and ISR upkeep for one broker, until cancelled
(the package's docstring says what replication does)."""
from __future__ import annotations

import logging

import anyio

from kshim.replication.fetcher import Fetcher
from kshim.replication.isr import IsrChanges, maintain_isr
from kshim.replication.host import ReplicaHost


log = logging.getLogger("kshim.replication")


async def run_replication(broker: ReplicaHost, *, replica_lag_time_max_ms: int = 30000,
                          isr_changes: IsrChanges | None = None) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(maintain_isr, broker, replica_lag_time_max_ms, isr_changes)
        fetchers: dict[int, tuple[Fetcher, anyio.CancelScope]] = {}
        while True:
            leaders = {p.leader_id for p in broker.replicas() if not p.is_leader and p.leader_id >= 0}
            for leader_id in leaders - fetchers.keys():
                fetcher = Fetcher(broker, leader_id)
                fetchers[leader_id] = (fetcher, await tg.start(_run_fetcher, fetcher))
            for leader_id in fetchers.keys() - leaders:
                fetchers.pop(leader_id)[1].cancel()
            for fetcher, _ in fetchers.values():
                fetcher.on_image()
            await broker.image_changed()


async def _run_fetcher(fetcher: Fetcher, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.CancelScope() as scope:
        task_status.started(scope)
        log.info("broker %d: fetching from broker %d", fetcher.broker.node_id, fetcher.leader_id)
        await fetcher.run()
