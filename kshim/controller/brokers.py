"""The brokers' lifecycle as the controller sees it: registration (a broker (re)starts), heartbeats
and the fencing of a broker that misses them, controlled shutdown, unregistering, and what brokers
report (their replicas' log ends, the image version they applied).

Separate from the election rules (kshim.controller.elections) that a broker's coming and going
applies: here is when a broker counts as alive, there who leads because of it.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from kshim.cluster.image import BrokerInfo
from kshim.controller.elections import Elections
from kshim.controller.state import _Broker
from kshim.controller.store import STOPPED_PID, BrokerRow
from kshim.errors import BrokerError
from wire.errors import ErrorCode

log = logging.getLogger("kshim.controller")


class BrokerLifecycle(Elections):
    def register_broker(self, node_id: int, host: str, port: int, pid: int = 0) -> int:
        """A broker (re)starts: returns its new epoch. Unfences it and elects it where that helps."""
        previous = self._brokers.get(node_id)
        if previous is not None and previous.info.alive:
            # a new incarnation while the old one still counted as alive (killed and restarted
            # within the session timeout): fence the old one first, so its leaderships move to
            # in-sync replicas and the new process rejoins as a follower, truncating like any other.
            # One image for both steps (published below): the restarted broker opens its replicas
            # once, as the leader or follower it ends up, in its open threads (an image of the
            # fence alone opened them leaderless, and the next one then wrote a new leader epoch
            # per partition on its event loop: 25 s at 10,000 partitions)
            self.fence(node_id, reason="restarted", publish=False)
        epoch = previous.info.epoch + 1 if previous else self.store.unregistered_epoch(node_id) + 1
        isolated = previous.info.isolated if previous else False
        info = BrokerInfo(node_id, host, port, epoch, True, isolated, pid)
        self._brokers[node_id] = _Broker(info, self.clock.wall_ms())
        self.store.save_broker(BrokerRow(node_id, host, port, epoch, pid))
        log.info("broker %d registered (epoch %d, %s:%d)", node_id, epoch, host, port)
        self._elect_offline()
        self._publish()
        return epoch

    def shutdown_broker(self, node_id: int, broker_epoch: int) -> None:
        """A broker stops cleanly (Kafka's controlled shutdown): it is marked down at once, without a
        warning, and remembered so (a restarted controller does not wait a session for it, nor fences
        it when it returns); it leaves the ISR of every partition where another in-sync replica is
        alive (which leads, if it led), as Kafka's controller removes a broker in controlled shutdown
        from the ISRs: the others commit without it meanwhile, and a stopped replica, missing what
        they wrote, is never elected over them. Where it is the last alive in-sync replica it stays
        leader and in the ISR (offline until it returns, as with leader -1, but its return is no
        election)."""
        if self._stop_broker(node_id, broker_epoch):
            self._publish()

    def shutdown_local_broker(self, node_id: int, broker_epoch: int) -> None:
        """shutdown_broker for a standalone broker's own stop, the controller closing right after:
        the same record kept, no image published (no one is left to read it; building one is
        0.2 ms per partition)."""
        self._stop_broker(node_id, broker_epoch)

    def _stop_broker(self, node_id: int, broker_epoch: int) -> bool:
        """shutdown_broker's changes, unpublished; whether there were any."""
        broker = self._brokers.get(node_id)
        if broker is None or broker.info.epoch != broker_epoch or not broker.info.alive:
            return False  # an old incarnation's, or already down: nothing to do
        broker.info = replace(broker.info, alive=False)
        info = broker.info
        self.store.save_broker(BrokerRow(node_id, info.host, info.port, info.epoch, STOPPED_PID))
        log.info("broker %d stopped (controlled shutdown)", node_id)
        alive = self._alive()
        for topic in self._topics.values():
            changed = []
            for p in topic.partitions:
                if node_id in p.isr and any(r in alive for r in p.isr if r != node_id):
                    p.isr = [r for r in p.isr if r != node_id]
                    if p.leader == node_id:
                        self._elect(topic, p, alive)
                    p.partition_epoch += 1
                    changed.append(p)
            if changed:
                self.store.save_partitions(topic.name, changed)
        return True

    def update_address(self, node_id: int, host: str, port: int) -> None:
        """The same incarnation now listens elsewhere (a standalone broker bound --port 0)."""
        broker = self._brokers[node_id]
        broker.info = replace(broker.info, host=host, port=port)
        self.store.save_broker(BrokerRow(node_id, host, port, broker.info.epoch, broker.info.pid))
        self._publish()

    def heartbeat(self, node_id: int, epoch: int) -> None:
        broker = self._brokers.get(node_id)
        if broker is None or broker.info.epoch != epoch:
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH, f"broker {node_id} epoch {epoch} is not current")
        broker.last_heartbeat_ms = self.clock.wall_ms()
        if not broker.info.alive:
            # a paused broker that resumes in time for nothing: it was fenced; it must re-register
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH, f"broker {node_id} was fenced; register again")

    def fence_expired(self, now: int | None = None) -> list[int]:
        """Fence brokers whose last heartbeat is older than the session timeout."""
        now = self.clock.wall_ms() if now is None else now
        expired = [b.info.node_id for b in self._brokers.values()
                   if b.info.alive and now - b.last_heartbeat_ms > self.config.session_timeout_ms]
        for node_id in expired:
            self.fence(node_id)
        return expired

    def fence(self, node_id: int, reason: str = "", publish: bool = True) -> None:
        broker = self._brokers[node_id]
        if not broker.info.alive:
            return
        broker.info = replace(broker.info, alive=False)
        log.warning("broker %d fenced: %s", node_id,
                    reason or f"no heartbeat for {self.config.session_timeout_ms} ms")
        alive = self._alive()
        for topic in self._topics.values():
            changed = []
            for p in topic.partitions:
                if node_id not in p.replicas:
                    continue
                old = (p.leader, tuple(p.isr))
                if node_id in p.isr and len(p.isr) > 1:
                    p.isr = [r for r in p.isr if r != node_id]
                if p.leader == node_id:
                    self._elect(topic, p, alive)
                if (p.leader, tuple(p.isr)) != old:
                    p.partition_epoch += 1
                    changed.append(p)
            if changed:
                self.store.save_partitions(topic.name, changed)
        if publish:
            self._publish()

    def unregister_broker(self, node_id: int) -> None:
        """Kafka's UnregisterBroker, for a broker that is gone for good: it leaves every ISR it is
        in (partitions it led elect another leader, as when it is fenced) and its registration is
        forgotten; it stays in the replica lists (offline) until they are reassigned. If it comes
        back it registers anew, with a higher epoch."""
        broker = self._brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {node_id} is not currently registered")
        self.fence(node_id, reason="unregistered")  # publishes the leader and ISR changes
        self.store.delete_broker(node_id, broker.info.epoch)
        del self._brokers[node_id]
        for key in [k for k in self.replica_log_ends if k[0] == node_id]:
            del self.replica_log_ends[key]
        gone = self._deletions.pop(node_id, {})
        if gone:  # it will never report having deleted them
            self.store.forget_deletions(list(gone.values()))
        log.warning("broker %d unregistered", node_id)
        self._publish()

    def set_isolated(self, node_id: int, isolated: bool) -> None:
        broker = self._brokers.get(node_id)
        if broker is None:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node_id}")
        broker.info = replace(broker.info, isolated=isolated)
        self._publish()

    def report_log_ends(self, node_id: int, log_ends: dict[tuple[str, int], int]) -> None:
        """What a broker's replicas hold, from its heartbeat (used to elect under majority quorum)."""
        for (topic, index), offset in log_ends.items():
            self.replica_log_ends[(node_id, topic, index)] = offset

    def report_image_version(self, node_id: int, version: int) -> None:
        """The image version a broker has applied (from its heartbeat, or at once in-process)."""
        broker = self._brokers.get(node_id)
        if broker is not None:
            broker.image_version = version
            if version >= self.version:
                broker.caught_up_ms = self.clock.wall_ms()
            pending = self._deletions.get(node_id)
            if pending and broker.info.alive:
                # it applied the image that removed them: its replica manager deleted them
                done = [d for d in pending.values() if d.version <= version]
                if done:
                    self.store.forget_deletions(done)
                    for d in done:
                        del pending[(d.topic_id, d.index)]
                        log.info("broker %d deleted its replica of %s-%d", node_id, d.topic, d.index)

    async def run_session_checks(self) -> None:
        interval = max(0.05, self.config.session_timeout_ms / 4000)
        while True:
            await self.clock.sleep(interval)
            self.fence_expired()
