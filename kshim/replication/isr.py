"""The leader's side of the ISR: shrink it when a follower falls behind, expand it when one has
caught up, through the controller (Kafka's AlterPartition), which persists and publishes it.

- A follower leaves the ISR when it has not been caught up with the leader's log end for
  replica_lag_time_max_ms (Kafka's replica.lag.time.max.ms): paused, crashed, isolated or slow.
- A follower outside the ISR rejoins once its log end reaches the high watermark.
- The leader proposes; the controller decides. A proposal based on a stale partition epoch is
  refused and retried against the next image.
- A reassignment completes in the change that puts its last target replica in the ISR, and the
  leader proposes that change (its current ISR, when the targets are already in it). If the
  completion removes the leader itself, the leader first hands over (Partition.hand_over): it takes
  no more appends and waits until the targets hold its whole log, so that leadership moves to a
  replica with every record it acknowledged, acks=1 ones included (Kafka loses those).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio

from kshim.clock import SYSTEM
from kshim.cluster.image import completes_reassignment
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
    # a handover waits a follower's fetch round trip or two; bounded, as the other partitions wait
    handover_s = min(replica_lag_time_max_ms / 1000, 1.0)
    while True:
        await anyio.sleep(interval)
        now = SYSTEM.wall_ms()
        for p in broker.replicas():
            if not p.is_leader or len(p.replicas) < 2:
                continue
            lagging = p.lagging_isr_members(now, replica_lag_time_max_ms)
            joining = p.caught_up_outsiders()
            new_isr = [r for r in p.replicas if (r in p.isr and r not in lagging) or r in joining]
            completes = completes_reassignment(p.replicas, p.adding, p.removing, new_isr)
            if not lagging and not joining and not completes:
                continue
            old_isr = list(p.isr)  # taken before the call: p.isr is already the new ISR when it returns
            # joiners count for the high watermark from now on, while the change is in flight:
            # otherwise it could pass their log end just before they become in-sync (and electable)
            # (the answer comes back once this broker applied the image holding the new ISR)
            p.pending_isr = tuple(joining)
            unknown = False  # whether the controller may have made the change without answering
            try:
                if completes and p.node_id in p.removing and not await p.hand_over(
                        [r for r in p.replicas if r not in p.removing], handover_s):
                    log.debug("%s-%d: the targets did not catch up with the log end within %.1f s: "
                              "the reassignment completes at a later round", p.topic, p.index, handover_s)
                    continue
                await broker.controller.alter_partition(p.topic, p.index, p.leader_epoch, p.partition_epoch, new_isr)
                log.info("%s-%d: ISR %s -> %s", p.topic, p.index, old_isr, new_isr)
                changes.shrinks += bool(lagging)
                changes.expands += bool(joining)
            except BrokerError as e:
                log.debug("%s-%d: ISR change to %s refused: %s", p.topic, p.index, new_isr, e.message)
            except Exception as e:  # the controller is unreachable (or a bug): retry next round
                unknown = True
                log.warning("%s-%d: ISR change to %s failed: %r", p.topic, p.index, new_isr, e)
            finally:
                p.pending_isr = ()
                # answered (led no more, or the move is not complete) or refused: appends go on; a
                # change that may have been made keeps a handing-over leader from taking any until
                # an image says what became of the partition (Partition.apply_partition_state)
                if not unknown:
                    p.handing_over = False

