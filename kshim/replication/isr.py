"""The leader's side of the ISR: shrink it when a follower falls behind, expand it when one has
caught up, through the controller (Kafka's AlterPartition), which persists and publishes it.

- A follower leaves the ISR when it has not been caught up with the leader's log end for
  replica_lag_time_max_ms (Kafka's replica.lag.time.max.ms): paused, crashed, isolated or slow.
- A follower outside the ISR rejoins once its log end reaches the high watermark.
- The leader proposes; the controller decides. A proposal based on a stale partition epoch is
  refused and retried against the next image.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from kshim.clock import SYSTEM
from kshim.errors import BrokerError
from kshim.replication.host import ReplicaHost


log = logging.getLogger("kshim.replication.isr")


@dataclass
class IsrChanges:
    """ISR changes this broker proposed and the controller accepted (Kafka's IsrShrinksPerSec and
    IsrExpandsPerSec), for the broker's metrics."""
    shrinks: int = 0
    expands: int = 0


async def maintain_isr(broker: ReplicaHost, replica_lag_time_max_ms: int, changes: IsrChanges | None = None) -> None:
    changes = changes if changes is not None else IsrChanges()
    interval = min(max(replica_lag_time_max_ms / 4000, 0.05), 0.25)
    while True:
        await anyio.sleep(interval)
        now = SYSTEM.wall_ms()
        for p in broker.replicas():
            if not p.is_leader or len(p.replicas) < 2:
                continue
            lagging = p.lagging_isr_members(now, replica_lag_time_max_ms)
            joining = p.caught_up_outsiders()
            if not lagging and not joining:
                continue
            new_isr = [r for r in p.replicas if (r in p.isr and r not in lagging) or r in joining]
            old_isr = list(p.isr)  # taken before the call: p.isr is already the new ISR when it returns
            # joiners count for the high watermark from now on, while the change is in flight:
            # otherwise it could pass their log end just before they become in-sync (and electable)
            # (the answer comes back once this broker applied the image holding the new ISR)
            p.pending_isr = tuple(joining)
            try:
                await broker.controller.alter_partition(p.topic, p.index, p.leader_epoch, p.partition_epoch, new_isr)
                log.info("%s-%d: ISR %s -> %s", p.topic, p.index, old_isr, new_isr)
                changes.shrinks += bool(lagging)
                changes.expands += bool(joining)
            except BrokerError as e:
                log.debug("%s-%d: ISR change to %s refused: %s", p.topic, p.index, new_isr, e.message)
            except Exception as e:  # the controller is unreachable (or a bug): retry next round
                log.warning("%s-%d: ISR change to %s failed: %r", p.topic, p.index, new_isr, e)
            finally:
                p.pending_isr = ()
