"""Followers replicate by fetching from their leader, as Kafka followers do.

One fetcher task per leader broker this broker follows any partition of. Each round it:
1. validates partitions whose leader or leader epoch changed since it last fetched them:
   OffsetForLeaderEpoch (API 23) asks the leader where our latest epoch ends in its log, and the
   follower truncates any divergent suffix beyond that point (KIP-101/KIP-279) before fetching;
2. sends a Fetch with this broker's replica id, long-polling (max_wait_ms), from each
   partition's log end offset; the leader learns from the fetch offset what the follower has;
3. appends what came back with the leader's offsets, and takes the leader's high watermark and
   log start offset.
Errors that mean the metadata moved on (NOT_LEADER_OR_FOLLOWER, fenced epochs) park the partition
until the next metadata image, or for a short while (the leader may be the one behind: not yet
applied the image that made it leader): 5 ms, doubling up to PARK_RETRY_S, the long-poll on the
other partitions never outlasting it; a dead leader costs a reconnect with backoff. An isolated
broker (`kshim ctl isolate`) neither fetches nor is fetched from.
"""
from __future__ import annotations

import logging

import anyio

from kshim.clock import SYSTEM
from kshim.log.log import LogClosed
from kshim.log.writer import Fenced
from kshim.observability.faults import replica_client_id
from kshim.replica.partition import Partition
from kshim.replication.client import CONNECTION_LOST, BrokerConnection
from kshim.replication.host import ReplicaHost
from wire.errors import ErrorCode


log = logging.getLogger("kshim.replication.fetcher")

FETCH_VERSION = 12  # topic names, flexible; current_leader_epoch and log_start_offset included
EPOCH_VERSION = 4
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 32 * 1024 * 1024
PARTITION_MAX_BYTES = 8 * 1024 * 1024
BACKOFF_S = 0.2
# A partition parked on an error is tried again after this long even if no new image came. Needed
# because images reach brokers at different times: a follower that learns of a new leader before
# the leader does gets NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH, and waiting for the next
# image could mean waiting until the leader drops the follower from the ISR (replica lag time).
# The first retry comes soon (the leader is usually a few ms behind: a new topic's first acks=all
# records waited the whole 100 ms), each further one of the same partition twice as late.
PARK_RETRY_FIRST_S = 0.005
PARK_RETRY_S = 0.1

_REFRESH = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}


def _keys(partitions: list[Partition]) -> set[tuple[str, int]]:
    return {(p.topic, p.index) for p in partitions}


class Fetcher:
    def __init__(self, broker: ReplicaHost, leader_id: int) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self._validated: dict[tuple[str, int], int] = {}  # partition -> leader epoch it was validated for
        # partition -> (image version it failed at, monotonic time to try again regardless, delay)
        self._parked: dict[tuple[str, int], tuple[int, float, float]] = {}
        self._conn: BrokerConnection | None = None
        self._inflight: anyio.CancelScope | None = None
        self._inflight_keys: set[tuple[str, int]] = set()

    def _followed(self) -> list[Partition]:
        version = self.broker.image.version
        now = SYSTEM.monotonic()
        return [p for p in self.broker.replicas()
                if not p.is_leader and p.leader_id == self.leader_id
                and not self._is_parked((p.topic, p.index), version, now)]

    def _is_parked(self, key: tuple[str, int], version: int, now: float) -> bool:
        parked = self._parked.get(key)
        return parked is not None and parked[0] >= version and now < parked[1]

    def on_image(self) -> None:
        """A new image: if this fetcher now follows other partitions (a topic was created, a
        leader moved), end the long-poll in flight, which may wait up to FETCH_MAX_WAIT_MS on
        partitions that get no data while a new one already does."""
        if self._inflight is not None and _keys(self._followed()) != self._inflight_keys:
            self._inflight.cancel()

    def _isolated(self) -> bool:
        brokers = self.broker.image.brokers
        me, leader = brokers.get(self.broker.node_id), brokers.get(self.leader_id)
        return bool((me and me.isolated) or (leader and leader.isolated))

    async def run(self) -> None:
        try:
            while True:
                partitions = self._followed()
                if not partitions or self._isolated():
                    await self._close()
                    # wake for the next image, or when a parked partition is due to be tried again
                    now = SYSTEM.monotonic()
                    wait = min([1.0] + [retry - now for _, retry, _ in self._parked.values() if retry > now])
                    with anyio.move_on_after(wait):
                        await self.broker.image_changed()
                    continue
                try:
                    conn = await self._ensure_connected()
                    with anyio.CancelScope() as scope:
                        self._inflight, self._inflight_keys = scope, _keys(partitions)
                        try:
                            await self._validate(conn, partitions)
                            await self._fetch(conn, [p for p in partitions if self._is_valid(p)])
                        finally:
                            self._inflight = None
                    if scope.cancelled_caught:
                        await self._close()  # a response may still be on its way: start afresh
                except CONNECTION_LOST as e:
                    log.debug("fetching from broker %d failed: %s", self.leader_id, e)
                    await self._close()
                    await anyio.sleep(BACKOFF_S)
                except Exception:
                    # a bug here must not take the broker down: log it, reconnect, go on
                    log.exception("replica fetcher for broker %d failed", self.leader_id)
                    await self._close()
                    await anyio.sleep(BACKOFF_S)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close()

    async def _ensure_connected(self) -> BrokerConnection:
        if self._conn is not None:
            return self._conn
        info = self.broker.image.brokers.get(self.leader_id)
        if info is None:
            raise ConnectionError(f"no address for broker {self.leader_id}")
        conn = BrokerConnection(info.host, info.port, replica_client_id(self.broker.node_id))
        await conn.connect()
        self._conn = conn
        return conn

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.aclose()

    def _is_valid(self, p: Partition) -> bool:
        return self._validated.get((p.topic, p.index)) == p.leader_epoch

    def _max_wait_ms(self) -> int:
        """The long-poll's bound: FETCH_MAX_WAIT_MS, or until the first parked partition is due to
        be tried again. A partition parked because its leader had not yet applied the image that
        made it leader (a new topic) waited out the whole poll on the others: ~500 ms for the first
        acks=all records to a new RF 3 topic (the p99 of bench/replication.py at 2,000 msgs/s)."""
        version, now = self.broker.image.version, SYSTEM.monotonic()
        due = [retry for at, retry, _ in self._parked.values() if at >= version and retry > now]
        if not due:
            return FETCH_MAX_WAIT_MS
        return min(FETCH_MAX_WAIT_MS, int((min(due) - now) * 1000) + 1)

    def _park(self, p: Partition) -> None:
        key = (p.topic, p.index)
        before = self._parked.get(key)
        delay = PARK_RETRY_FIRST_S if before is None else min(before[2] * 2, PARK_RETRY_S)
        self._parked[key] = (self.broker.image.version, SYSTEM.monotonic() + delay, delay)

    # ------------------------------------------------------------------ truncation (KIP-101)
    async def _validate(self, conn: BrokerConnection, partitions: list[Partition]) -> None:
        todo = [p for p in partitions if not self._is_valid(p)]
        if not todo:
            return
        topics: dict[str, list[dict]] = {}
        for p in todo:
            topics.setdefault(p.topic, []).append({
                "partition": p.index, "current_leader_epoch": p.leader_epoch,
                "leader_epoch": p.epochs.latest_epoch})
        response = await conn.request(23, EPOCH_VERSION, {
            "replica_id": self.broker.node_id,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()]})
        answers = {(t.topic, r.partition): r for t in response.topics for r in t.partitions}
        for p in todo:
            answer = answers.get((p.topic, p.index))
            if answer is None or answer.error_code in _REFRESH:
                self._park(p)
                continue
            if answer.error_code:
                log.warning("%s-%d: OffsetForLeaderEpoch failed: %s", p.topic, p.index,
                            ErrorCode(answer.error_code).name)
                self._park(p)
                continue
            self._truncate(p, answer.leader_epoch, answer.end_offset)
            self._validated[(p.topic, p.index)] = p.leader_epoch
            self._parked.pop((p.topic, p.index), None)  # its next failure waits the first delay again

    @staticmethod
    def _truncate(p: Partition, leader_epoch: int, end_offset: int) -> None:
        """Cut our log back to where it agrees with the leader's."""
        ours = p.epochs.latest_epoch
        if ours < 0:
            target = p.high_watermark if p.log_end_offset > p.high_watermark else p.log_end_offset
        elif leader_epoch < 0 or end_offset < 0:
            target = p.high_watermark  # the leader knows none of our epochs: keep only what was committed
        else:
            target = end_offset
            if leader_epoch < ours:
                # the leader's latest epoch at or below ours is older: our log may hold a longer
                # stretch of that epoch than theirs (KIP-279); keep the shorter
                target = min(target, p.epochs.end_offset_for(leader_epoch, p.log_end_offset)[1])
        p.truncate_to(min(target, p.log_end_offset))

    # ------------------------------------------------------------------ fetching
    async def _fetch(self, conn: BrokerConnection, partitions: list[Partition]) -> None:
        if not partitions:
            return
        topics: dict[str, list[dict]] = {}
        for p in partitions:
            topics.setdefault(p.topic, []).append({
                "partition": p.index, "current_leader_epoch": p.leader_epoch, "fetch_offset": p.log_end_offset,
                "last_fetched_epoch": p.epochs.latest_epoch, "log_start_offset": p.log_start_offset,
                "partition_max_bytes": PARTITION_MAX_BYTES})
        response = await conn.request(1, FETCH_VERSION, {
            "replica_id": self.broker.node_id, "max_wait_ms": self._max_wait_ms(), "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""})
        by_key = {(p.topic, p.index): p for p in partitions}
        answered = []
        for t in response.responses:
            for r in t.partitions:
                asked = by_key.get((t.topic, r.partition_index))
                if asked is None or asked.is_leader or asked.leader_id != self.leader_id:
                    continue  # the metadata moved on while the fetch was out
                # every partition's write handed to the log writer first: it coalesces them
                written = (asked.submit_follower_append(r.records)
                           if r.error_code == ErrorCode.NONE and r.records else None)
                answered.append((asked, r, written))
        for asked, r, written in answered:
            if written is not None:
                error = await written
                if isinstance(error, (LogClosed, Fenced)) or asked.is_leader or asked.leader_id != self.leader_id:
                    continue  # the replica went, or its leadership moved, while the write was out
                if isinstance(error, OSError):  # a full disk: logged by the partition; this one waits
                    self._park(asked)
                    continue
                if error is not None:
                    raise error
            self._apply(asked, r, written is not None)

    def _apply(self, p: Partition, r, written: bool = False) -> None:
        """Take in one partition's fetch answer (``written``: its records are already appended
        through the log writer)."""
        code = r.error_code
        if code == ErrorCode.NONE:
            if self._parked:
                self._parked.pop((p.topic, p.index), None)
            records = r.records
            if written:
                p.update_follower_hw(r.high_watermark)
            elif records:
                try:
                    p.append_as_follower(records, r.high_watermark)
                except OSError:  # a full disk: logged by the partition; this one waits, the others go on
                    self._park(p)
                    return
            else:
                p.update_follower_hw(r.high_watermark)
            if r.log_start_offset > p.log_start_offset:
                p.delete_records_before(min(r.log_start_offset, p.log_end_offset))
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if r.log_start_offset > p.log_end_offset:
                p.reset_to(r.log_start_offset)  # we were away while the leader's log start moved past us
            else:
                self._validated.pop((p.topic, p.index), None)  # ahead of the leader: truncate again
        elif code in _REFRESH:
            self._park(p)
        else:
            log.warning("%s-%d: fetch from broker %d failed: %s", p.topic, p.index, self.leader_id,
                        ErrorCode(code).name)
            self._park(p)
