"""The transaction coordinator of one broker: the transactional ids whose `__transaction_state`
partition it leads (Kafka's placement, see `kshim.coordinator.runtime`).

- Every state change of a transactional id is a record of that partition (`log_format`), appended
  as the leader and applied in memory only once COMMITTED; while it is being written the id is
  `pending` and other requests for it get CONCURRENT_TRANSACTIONS (clients retry), except a
  client's AddPartitionsToTxn / AddOffsetsToTxn, which first waits up to CONCURRENT_WAIT_S for the
  write (or the previous transaction's markers) to finish. A new leader
  loads the partition (latest record per id wins) before answering, and finishes the
  transactions it finds in PrepareCommit/PrepareAbort: the decision is durable before any marker.
- InitProducerId: a new id gets a producer id and epoch 0; a known one gets its epoch bumped
  (fencing the previous instance: its requests now get PRODUCER_FENCED / INVALID_PRODUCER_EPOCH);
  if a transaction is open it is aborted first with a bumped epoch and the answer is
  CONCURRENT_TRANSACTIONS until that is done. At epoch 32766 a new producer id is handed out.
- AddPartitionsToTxn / AddOffsetsToTxn move the transaction to Ongoing with those partitions;
  so does a partition leader's verification of a Produce v12+ / TxnOffsetCommit v5 (transactions
  v2, KIP-890: `implicit`), while older versions only ask whether the partition is in the open
  transaction (`is_in_transaction`, see `verification`).
- EndTxn writes PrepareCommit/PrepareAbort, answers, then writes the markers to every partition
  of the transaction (`markers`) and finally CompleteCommit/CompleteAbort. EndTxn v5+ (transactions
  v2) bumps the epoch in the Prepare record, writes the markers with it and answers it; a retry
  naming the epoch before the bump is answered as the end it repeats. When the bump exhausts the
  epoch, the Complete record switches to a new producer id with epoch 0.
- A transaction left Ongoing longer than its transaction.timeout.ms is aborted with a bumped
  epoch, so the producer that left it is fenced. The abort is timed for the transaction's exact
  deadline, never later (Kafka looks every transaction.abort.timed.out.transaction.cleanup.interval.ms,
  10 s: it aborts up to that much later).
- A transactional id idle (no transaction open or ending) longer than
  transactional.id.expiration.ms is removed: a tombstone in its partition, then gone from memory
  (looked for every transaction.remove.expired.transaction.cleanup.interval.ms).
"""
from __future__ import annotations

import asyncio
import logging
import math
from typing import Iterable

import anyio
from anyio.abc import TaskGroup

from kshim.broadcast import Signal
from kshim.clock import SYSTEM, Clock
from kshim.cluster.image import BrokerInfo
from kshim.coordinator import TRANSACTION_TOPIC
from kshim.coordinator.runtime import CoordinatorHost, CoordinatorRuntime, internal_topic_configs
from kshim.coordinator.transactions import log_format
from kshim.coordinator.transactions.markers import MarkerWriter
from kshim.coordinator.transactions.state import MAX_EPOCH, TxnMetadata, TxnState
from kshim.coordinator.transactions.verification import Verifier
from kshim.replica import PartitionAppend
from kshim.replica.partition import Partition
from wire import records
from wire.errors import ErrorCode

log = logging.getLogger("kshim.transactions")

WRITE_TIMEOUT_S = 30.0
COMPLETION_RETRY_S = 0.5
# AddPartitionsToTxn / AddOffsetsToTxn arriving while the id's previous transaction is still being
# completed (markers, the Complete record) wait this long for it before answering
# CONCURRENT_TRANSACTIONS: clients would only ask again after a backoff (librdkafka and Java: 20 ms)
CONCURRENT_WAIT_S = 0.1
# the timer task looks for expired transactions at least this often (the coordinator runtime's
# idle wake, kshim.coordinator.runtime.IDLE_WAKE_S, is as long)
IDLE_CHECK_MS = 60_000

TopicPartition = tuple[str, int]


class TransactionCoordinator:
    def __init__(self, broker: CoordinatorHost, clock: Clock = SYSTEM) -> None:
        self.broker = broker
        self.clock = clock.wall_ms  # transaction start and update times are stored
        c = broker.config
        self.runtime = CoordinatorRuntime(broker, TRANSACTION_TOPIC, c.transaction_state_partitions, self, self.clock,
                                          c.transaction_state_replication_factor,
                                          internal_topic_configs(c.transaction_state_segment_bytes,
                                                                 c.transaction_state_min_isr))
        self.max_timeout_ms = c.transaction_max_timeout_ms
        # ids idle (no transaction) this long are removed, looked for every interval (wall ms)
        self.id_expiration_ms = c.transactional_id_expiration_ms
        self.id_expiration_interval_ms = c.transaction_remove_expired_interval_ms
        self._next_id_expiry_check = self.clock() + self.id_expiration_interval_ms
        self.txns: dict[str, TxnMetadata] = {}
        self.markers = MarkerWriter(broker)
        self.verifier = Verifier(self)  # the partition leaders' side of KIP-890 (produce verification)
        self._completing: set[str] = set()  # ids whose markers are being written
        # fired whenever an id's state changes or its markers are done: a verification answered
        # CONCURRENT_TRANSACTIONS here asks again at that moment, not after a fixed backoff
        self.state_changed = Signal()
        self._to_complete: list[str] = []   # found in Prepare* by a load: the task finishes them
        self._task_group: TaskGroup | None = None
        # the completion (markers, then Complete*) of each ended transaction runs as a plain
        # asyncio task on the loop the timer hook runs on, not the runtime's task group: anyio's
        # start_soon cost ~20 us per transaction, a twentieth of a 1-record transaction's CPU on
        # transactions v2 (Java client). run() cancels what is left when it ends
        self._loop: asyncio.AbstractEventLoop | None = None
        self._completions: set[asyncio.Task] = set()
        # the earliest expiry the timer task knows of (wall ms): a state write wakes the task only
        # when it opens a transaction expiring sooner (waking it at every write cost a tenth of
        # the broker's CPU in 1-record transactions)
        self._next_expiry = math.inf

    # ------------------------------------------------------------------ placement and loading
    def check(self, transactional_id: str) -> ErrorCode:
        return self.runtime.status(transactional_id)

    async def find(self, transactional_id: str) -> BrokerInfo:
        return await self.runtime.find(transactional_id)

    def coordinator_epoch(self, transactional_id: str) -> int:
        replica = self.runtime.leader_replica(self.runtime.partition_of(transactional_id))
        return replica.leader_epoch if replica is not None else -1

    def on_image(self) -> None:
        self.runtime.on_image()

    def unload(self, index: int) -> None:
        for tid in [t for t in self.txns if self.runtime.partition_of(t) == index]:
            del self.txns[tid]
        log.info("dropped the transactional ids of %s-%d", TRANSACTION_TOPIC, index)

    def load(self, index: int, replica: Partition) -> None:
        found: dict[str, TxnMetadata | None] = {}
        for header, batch in self.runtime.stored_batches(replica):
            if header.is_control:
                continue
            for rec in self.runtime.batch_records(index, header, batch):
                parsed = log_format.decode(bytes(rec.key), None if rec.value is None else bytes(rec.value)) \
                    if rec.key is not None else None
                if parsed is not None:
                    found[parsed[0]] = parsed[1]
        for tid, meta in found.items():
            if meta is not None:
                self.txns[tid] = meta
                if meta.state.preparing:
                    self._to_complete.append(tid)
        log.info("loaded %s-%d: %d transactional ids", TRANSACTION_TOPIC, index, len(found))

    # ------------------------------------------------------------------ durable changes
    def _validate(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata | ErrorCode:
        """The id's state if this producer may change it now, else why not."""
        code = self.check(transactional_id)
        if code:
            return code
        meta = self.txns.get(transactional_id)
        if meta is not None and meta.next_producer_id >= 0 and producer_id == meta.next_producer_id:
            return ErrorCode.CONCURRENT_TRANSACTIONS  # the id an exhausted epoch moves to, once Complete
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.pending or transactional_id in self._completing and meta.state.preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return meta

    async def _persist(self, new: TxnMetadata) -> ErrorCode:
        """Write `new` as the id's state and apply it once COMMITTED. The caller checked that no
        other change is pending."""
        tid = new.transactional_id
        index = self.runtime.partition_of(tid)
        current = self.txns.get(tid)
        if current is not None:
            current.pending = True
        try:
            if index not in self.runtime.loaded:
                return ErrorCode.NOT_COORDINATOR
            new.update_ms = self.clock()
            # answered at once when COMMITTED as appended (no follower in the ISR): no coroutine
            # to await then, three times per transaction
            result = self.runtime.write_started(index, log_format.encode_batch(new), WRITE_TIMEOUT_S)
            if not isinstance(result, PartitionAppend):
                result = await result
            if result.error:
                if result.not_led_here:
                    return ErrorCode.NOT_COORDINATOR
                if not result.appended:
                    log.warning("transaction state write for %s failed: %s", tid, result.error.name)
                elif index in self.runtime.loaded:  # not COMMITTED in time, but it may still be:
                    self.runtime.reload(index)  # memory must follow the log
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            if current is not None:
                current.pending = False
                self.state_changed.fire()  # no longer pending: waiters look again
        if index not in self.runtime.loaded:
            return ErrorCode.NOT_COORDINATOR
        self.txns[tid] = new
        if new.state == TxnState.ONGOING and new.start_ms + new.timeout_ms < self._next_expiry:
            self._next_expiry = new.start_ms + new.timeout_ms
            self.runtime.wake.fire()
        self.state_changed.fire()
        return ErrorCode.NONE

    # ------------------------------------------------------------------ requests
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        code = self.check(transactional_id)
        if code:
            return code, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            new = TxnMetadata(transactional_id, await self.broker.allocate_producer_id(), 0, timeout_ms)
            if transactional_id in self.txns:  # another request created it while we waited for an id
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            self.txns[transactional_id] = new  # placeholder, pending until written
            new.pending = True
            code = await self._persist(new.but())
            if code and self.txns.get(transactional_id) is new:
                del self.txns[transactional_id]
            return (code, -1, -1) if code else (ErrorCode.NONE, new.producer_id, 0)
        if meta.pending or meta.state.preparing or transactional_id in self._completing:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
            # KIP-360: the instance that holds the id names its producer id and epoch; the epoch
            # from just before the last bump is still its own (a fencing abort bumped it, or the
            # answer to its own bump was lost)
            if (producer_id, producer_epoch) != (meta.last_producer_id, meta.last_epoch):
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if meta.state == TxnState.EMPTY:
                return ErrorCode.NONE, meta.producer_id, meta.producer_epoch  # a retry whose answer was lost
        if meta.state == TxnState.ONGOING:
            # a previous instance left a transaction open: abort it (fenced), the client retries
            await self._begin_end(meta, committed=False, bump=True)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        last = {"last_producer_id": meta.producer_id, "last_epoch": meta.producer_epoch}
        if meta.producer_epoch >= MAX_EPOCH:
            meta.pending = True  # no other change while a new producer id is allocated
            try:
                new = meta.but(producer_id=await self.broker.allocate_producer_id(), producer_epoch=0, **last)
            finally:
                meta.pending = False
        else:
            new = meta.but(producer_epoch=meta.producer_epoch + 1, **last)
        new = new.but(timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1)
        code = await self._persist(new)
        return (code, -1, -1) if code else (ErrorCode.NONE, new.producer_id, new.producer_epoch)

    def unknown_partitions(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        out = set()
        for topic, index in partitions:
            info = self.broker.topics.get(topic)
            if info is None or not 0 <= index < len(info.partitions):
                out.add((topic, index))
        return out

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[TopicPartition], implicit: bool = False,
                             wait: bool = False) -> ErrorCode:
        """AddPartitionsToTxn, or (`implicit`) a leader verifying a transactions v2 write. While the
        id's previous transaction is being completed (or another change of it is being written),
        a request that may `wait` waits up to CONCURRENT_WAIT_S for that to finish, then gets what
        its retry would have got; otherwise, or after that, CONCURRENT_TRANSACTIONS. Clients' requests
        wait: a producer's next transaction usually begins while the last one's markers are still
        being written, and the error costs it a backoff. A leader's verification must not: a
        marker written on its partition while the question is out makes the answer stale."""
        deadline = -math.inf
        while True:
            meta = self._validate(transactional_id, producer_id, producer_epoch)
            if isinstance(meta, ErrorCode) and meta != ErrorCode.CONCURRENT_TRANSACTIONS:
                return meta
            if not isinstance(meta, ErrorCode) and not meta.state.preparing:
                break
            if not wait:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            now = anyio.current_time()
            if deadline == -math.inf:
                deadline = now + CONCURRENT_WAIT_S
            if now >= deadline:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            with anyio.move_on_after(deadline - now):
                await self.state_changed.wait()
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return ErrorCode.NONE
        if meta.state not in (TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return ErrorCode.INVALID_TXN_STATE
        ongoing = meta.state == TxnState.ONGOING
        start = meta.start_ms if ongoing else self.clock()
        return await self._persist(meta.but(state=TxnState.ONGOING, partitions=meta.partitions | partitions,
                                            start_ms=start, tv2=(meta.tv2 and ongoing) or implicit))

    def is_in_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn verify_only (KIP-890): are these partitions part of the open transaction?"""
        meta = self._validate(transactional_id, producer_id, producer_epoch)
        if meta == ErrorCode.CONCURRENT_TRANSACTIONS:  # a state write in flight: the current state answers
            meta = self.txns.get(transactional_id) or ErrorCode.CONCURRENT_TRANSACTIONS
        if isinstance(meta, ErrorCode):
            return meta
        if meta.state.preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS  # the previous transaction's markers are being written
        if meta.state != TxnState.ONGOING or not partitions <= meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      committed: bool, tv2: bool = False) -> tuple[ErrorCode, int, int]:
        """EndTxn: the error and the producer id and epoch the client goes on with (v5). `tv2`:
        the client speaks transactions v2 (EndTxn v5+), so the epoch is bumped."""
        code = self.check(transactional_id)
        if code:
            return code, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        # transactions v2: the epoch the client sent may be the one just before this end's bump
        # (a retry whose answer was lost), or the last one of a producer id an exhausted epoch replaced
        retry_bump = meta.tv2 and meta.producer_id == producer_id and meta.producer_epoch == producer_epoch + 1
        retry_overflow = meta.tv2 and meta.last_producer_id == producer_id and producer_epoch == meta.last_epoch \
            and meta.producer_epoch == 0 and meta.state.completed
        if meta.producer_id != producer_id and not retry_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        state = meta.state
        if meta.tv2 and state.preparing:
            valid = retry_bump
        elif meta.tv2 and state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry_bump or retry_overflow or producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch == meta.producer_epoch
        if not valid:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if meta.pending:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if state == TxnState.ONGOING:
            code, new = await self._begin_end(meta, committed, bump=tv2, tv2=tv2)
            return (code, -1, -1) if code else (ErrorCode.NONE, *new.client_ids)
        retried = producer_epoch != meta.producer_epoch or producer_id != meta.producer_id or not meta.tv2
        if retried and state == (TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT):
            return ErrorCode.NONE, *meta.client_ids  # a retry of what already happened
        if state == (TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if tv2 and not committed and state.completed:
            # v2 clients may abort a transaction none of whose writes reached the coordinator (their
            # verification failed): nothing to mark, but the epoch is bumped all the same
            return await self._abort_empty(meta)
        return ErrorCode.INVALID_TXN_STATE, -1, -1

    async def _next_ids(self, meta: TxnMetadata) -> dict:
        """The fields of a transactions v2 epoch bump (a new producer id waits in next_producer_id
        when the epoch is exhausted)."""
        bump = {"producer_epoch": meta.producer_epoch + 1, "last_producer_id": meta.producer_id,
                "last_epoch": meta.producer_epoch, "tv2": True, "next_producer_id": -1}
        if meta.producer_epoch >= MAX_EPOCH:
            meta.pending = True  # no other change while a new producer id is allocated
            try:
                bump["next_producer_id"] = await self.broker.allocate_producer_id()
            finally:
                meta.pending = False
        return bump

    async def _abort_empty(self, meta: TxnMetadata) -> tuple[ErrorCode, int, int]:
        bump = await self._next_ids(meta)
        new = meta.but(state=TxnState.COMPLETE_ABORT, partitions=frozenset(), start_ms=-1, **bump)
        if new.next_producer_id >= 0:
            new = new.but(producer_id=new.next_producer_id, producer_epoch=0, next_producer_id=-1,
                          last_epoch=meta.producer_epoch)
        code = await self._persist(new)
        return (code, -1, -1) if code else (ErrorCode.NONE, new.producer_id, new.producer_epoch)

    async def _begin_end(self, meta: TxnMetadata, committed: bool, bump: bool,
                         tv2: bool = False) -> tuple[ErrorCode, TxnMetadata]:
        """Ongoing -> PrepareCommit/PrepareAbort (durable), then markers in the background."""
        new = meta.but(state=TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT)
        if tv2:
            new = new.but(**await self._next_ids(meta))
        elif bump and meta.producer_epoch < MAX_EPOCH:  # fencing: the old epoch stays known as the last one
            new = new.but(producer_epoch=meta.producer_epoch + 1, last_producer_id=meta.producer_id,
                          last_epoch=meta.producer_epoch)
        code = await self._persist(new)
        if not code:
            self._start_completion(new.transactional_id)
        return code, new

    def _start_completion(self, transactional_id: str) -> None:
        if transactional_id in self._completing:
            return
        self._completing.add(transactional_id)
        if self._task_group is not None and self._loop is not None:
            task = self._loop.create_task(self._complete(transactional_id))
            self._completions.add(task)
            task.add_done_callback(self._completions.discard)
        else:
            self._to_complete.append(transactional_id)
            self._completing.discard(transactional_id)

    async def _complete(self, transactional_id: str) -> None:
        """Markers to every partition, then CompleteCommit/CompleteAbort. Starts over (after a
        pause) while the id is still prepared here: a reload replaced its state, this broker lost
        and regained the partition, or the Complete write failed; ends when it is done or another
        broker coordinates the id."""
        try:
            while True:
                try:  # all of it: a plain task (_start_completion) has no one to hand an error to
                    meta = self.txns.get(transactional_id)
                    index = self.runtime.partition_of(transactional_id)
                    if meta is None or not meta.state.preparing or index not in self.runtime.loaded:
                        return
                    committed = meta.state == TxnState.PREPARE_COMMIT
                    coordinator_epoch = self.coordinator_epoch(transactional_id)

                    def still_coordinator() -> bool:
                        return (index in self.runtime.loaded
                                and self.coordinator_epoch(transactional_id) == coordinator_epoch)

                    if await self.markers.write(meta.producer_id, meta.producer_epoch, committed, coordinator_epoch,
                                                meta.partitions, still_coordinator, meta.marker_version) and \
                            self.txns.get(transactional_id) is meta:
                        done = meta.but(state=TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT,
                                        partitions=frozenset(), start_ms=-1)
                        if meta.next_producer_id >= 0:  # the bump exhausted the epoch: the new id takes over
                            done = done.but(producer_id=meta.next_producer_id, producer_epoch=0, next_producer_id=-1,
                                            last_producer_id=meta.producer_id, last_epoch=meta.last_epoch)
                        code = await self._persist(done)
                        if code in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                            return
                except Exception:  # a broker must outlive one transaction's trouble: log it, try again
                    log.exception("ending transaction %s failed", transactional_id)
                await anyio.sleep(COMPLETION_RETRY_S)
        finally:
            self._completing.discard(transactional_id)
            self.state_changed.fire()

    # ------------------------------------------------------------------ tooling
    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        """The id's state (DescribeTransactions), or why there is none: NOT_COORDINATOR and the
        like, TRANSACTIONAL_ID_NOT_FOUND for an id never initialised."""
        code = self.check(transactional_id)
        if code:
            return code
        return self.txns.get(transactional_id) or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def list(self, states: set[str], producer_ids: set[int], min_duration_ms: int) -> list[TxnMetadata]:
        now = self.clock()
        out = []
        for meta in self.txns.values():
            if states and meta.state.value not in states or producer_ids and meta.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= min_duration_ms):
                continue  # Kafka lists only those running strictly longer
            out.append(meta)
        return sorted(out, key=lambda m: m.transactional_id)

    # ------------------------------------------------------------------ the timer task
    async def _abort_expired(self, tg: TaskGroup) -> float:
        """Abort (and fence) transactions open past their timeout; returns the next deadline (ms)."""
        now = self.clock()
        # never later than IDLE_CHECK_MS from now: a transaction opened before then that expires
        # after it needs no wake of its own (with the usual 60 s timeouts, none does; a wake for
        # each transaction opened while none was open cost ~7% of a 1-record one's CPU)
        deadline = now + IDLE_CHECK_MS
        for meta in list(self.txns.values()):
            if meta.state != TxnState.ONGOING or meta.pending:
                continue
            expires = meta.start_ms + meta.timeout_ms
            if expires <= now:
                log.info("aborting transaction %s: open longer than %d ms", meta.transactional_id, meta.timeout_ms)
                meta.pending = True  # until the abort is written: no second abort, no racing request
                tg.start_soon(self._begin_end, meta, False, True)
            else:
                deadline = min(deadline, expires)
        self._next_expiry = deadline
        return deadline

    def _expire_ids(self, tg: TaskGroup) -> None:
        """Remove the transactional ids idle longer than transactional.id.expiration.ms (Kafka's
        TransactionStateManager.removeExpiredTransactionalIds): no transaction open or ending, last
        changed that long ago. Each gets a tombstone in __transaction_state and leaves memory once
        it is COMMITTED; a new InitProducerId for it then starts afresh (a new producer id)."""
        now = self.clock()
        for meta in list(self.txns.values()):
            if (meta.state.completed and not meta.pending and meta.transactional_id not in self._completing
                    and 0 <= meta.update_ms <= now - self.id_expiration_ms):
                meta.pending = True  # other requests get CONCURRENT_TRANSACTIONS until it is gone
                tg.start_soon(self._remove_id, meta)

    async def _remove_id(self, meta: TxnMetadata) -> None:
        tid = meta.transactional_id
        index = self.runtime.partition_of(tid)
        try:
            if index not in self.runtime.loaded:
                return
            key, _ = log_format.encode(meta)
            result = await self.runtime.write(index, records.encode_batch([(key, None)]), WRITE_TIMEOUT_S)
            if result.error:
                if result.appended and index in self.runtime.loaded:
                    self.runtime.reload(index)  # not COMMITTED in time, but it may still be: memory follows the log
                log.info("removing expired transactional id %s failed: %s", tid, result.error.name)
                return
            if self.txns.get(tid) is meta and index in self.runtime.loaded:
                del self.txns[tid]
                log.info("removed transactional id %s: idle longer than %d ms", tid, self.id_expiration_ms)
        finally:
            meta.pending = False
            self.state_changed.fire()

    async def timers(self, tg: TaskGroup) -> float:
        """The runtime's timer hook: finish transactions a load found half-ended, abort expired ones,
        and every transaction.remove.expired.transaction.cleanup.interval.ms remove idle ids."""
        self._task_group = tg
        self._loop = asyncio.get_running_loop()
        pending, self._to_complete = self._to_complete, []
        for tid in pending:
            self._start_completion(tid)
        if self.clock() >= self._next_id_expiry_check:
            self._next_id_expiry_check = self.clock() + self.id_expiration_interval_ms
            self._expire_ids(tg)
        return min(await self._abort_expired(tg), self._next_id_expiry_check)

    async def run(self) -> None:
        """Loads `__transaction_state` partitions, finishes transactions found half-ended and aborts
        timed-out ones (the runtime's loop)."""
        try:
            await self.runtime.run()
        finally:
            self._task_group = None
            with anyio.CancelScope(shield=True):
                left = list(self._completions)
                for task in left:
                    task.cancel()
                if left:
                    await asyncio.gather(*left, return_exceptions=True)
                await self.markers.aclose()
                await self.verifier.aclose()
