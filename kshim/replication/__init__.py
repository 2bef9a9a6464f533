"""Replication between brokers: followers fetch from leaders; leaders keep the ISR current.

`run_replication(broker, ...)` runs both for one broker until cancelled: it starts a fetcher per
leader broker this broker follows, following metadata images as leadership moves.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from kshim.replication.fetcher import Fetcher
from kshim.replication.isr import maintain_isr

if TYPE_CHECKING:
    from kshim.broker import Broker

log = logging.getLogger("kshim.replication")


async def run_replication(broker: Broker, *, replica_lag_time_max_ms: int = 30000) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(maintain_isr, broker, replica_lag_time_max_ms)
        fetchers: dict[int, anyio.CancelScope] = {}
        while True:
            leaders = {p.leader_id for p in broker.replicas() if not p.is_leader and p.leader_id >= 0}
            for leader_id in leaders - fetchers.keys():
                fetchers[leader_id] = await tg.start(_run_fetcher, broker, leader_id)
            for leader_id in fetchers.keys() - leaders:
                fetchers.pop(leader_id).cancel()
            await broker.image_changed()


async def _run_fetcher(broker: Broker, leader_id: int, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.CancelScope() as scope:
        task_status.started(scope)
        log.info("broker %d: fetching from broker %d", broker.node_id, leader_id)
        await Fetcher(broker, leader_id).run()
