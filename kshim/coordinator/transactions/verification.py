"""Transaction verification (KIP-890): a partition leader asks the transaction coordinator before
it appends a producer's first transactional batch of a transaction, so a write that belongs to no
open transaction (a late retry after an abort, say) is refused instead of opening a transaction
that nobody will end (a "hanging" one, holding the last stable offset back forever).

- Asked only when the partition has no open transaction of that producer at that epoch; the rest
  of the transaction's batches go straight to the log, as in Kafka.
- Transactions v1 (Produce up to v11, TxnOffsetCommit up to v4): the coordinator only says whether
  the partition is in the open transaction (AddPartitionsToTxn v5 verify_only). Transactions v2
  (Produce v12+, TxnOffsetCommit v5): the coordinator adds the partition to the transaction,
  starting it if need be; that is the implicit AddPartitionsToTxn of the v2 protocol.
- The coordinator is this broker (asked in process) or the leader of the id's `__transaction_state`
  partition, sent AddPartitionsToTxn v5 (one request in flight per broker connection).
- The coordinator's answer becomes what a producer understands, as Kafka's ReplicaManager maps it:
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE is INVALID_TXN_STATE for a
  client older than Produce v11 / TxnOffsetCommit v5; errors a client would not retry (no
  coordinator yet, a transaction being ended, the connection lost) are NOT_ENOUGH_REPLICAS, which
  every producer retries without refreshing its metadata.
- CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written, which is
  common right after a v2 commit) is asked again here after 20 ms, doubling, for up to 100 ms in
  all, before the producer hears of it (Kafka's add.partitions.to.txn.retry.backoff.ms and
  .max.ms defaults): a producer's own retry would wait its retry.backoff.ms (100 ms) or more.
  When the coordinator is this broker it is asked again the moment its state changes (the
  markers done), within the same 100 ms, instead of after the 20 ms backoff.
- A marker for the producer appended while the question that got the answer was out makes the
  answer stale: the batch is refused with INVALID_TXN_STATE (Kafka's verification guard). The
  guard is taken before each question, so markers written during the CONCURRENT_TRANSACTIONS
  retries above (the previous transaction's) do not count; nor does a change that leaves the
  producer's transaction open on the partition at this epoch: another request's batch of the same
  transaction, verified alongside (a producer keeps up to 5 requests in flight), was appended
  meanwhile, and this batch joins that transaction (Kafka skips the guard when the transaction is
  ongoing). Counting that append as stale refused a sound batch and aborted the transaction.
"""
from __future__ import annotations

import logging
import time
from typing import Protocol

import anyio

from kshim.broadcast import Signal
from kshim.cluster.image import NO_LEADER
from kshim.coordinator.runtime import CoordinatorHost, CoordinatorRuntime
from kshim.replication.client import CONNECTION_LOST, BrokerConnections
from wire.errors import ErrorCode

log = logging.getLogger("kshim.transactions")

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 5
REQUEST_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 0.02      # add.partitions.to.txn.retry.backoff.ms
RETRY_BACKOFF_MAX_S = 0.1   # add.partitions.to.txn.retry.backoff.max.ms: CONCURRENT_TRANSACTIONS retried this long

TopicPartition = tuple[str, int]

# coordinator answers a producer would not retry: it gets one it does (Kafka picks this one because
# it does not make the client refresh its metadata)
_RETRIABLE = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT}


def for_client(code: ErrorCode, abortable_known: bool) -> ErrorCode:
    """The coordinator's verdict as the producer's answer (see the module notes)."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE and not abortable_known:
        return ErrorCode.INVALID_TXN_STATE
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


class Coordinator(Protocol):
    """What the verifier uses of the transaction coordinator (which owns it)."""
    broker: CoordinatorHost
    runtime: CoordinatorRuntime
    state_changed: Signal  # fired at every state change of an id and when its markers are done

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: set[TopicPartition], implicit: bool = False) -> ErrorCode: ...

    def is_in_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[TopicPartition]) -> ErrorCode: ...


class Verifier:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.broker = coordinator.broker
        self._connections = BrokerConnections(f"kshim-verify-{self.broker.node_id}")

    def needs(self, topic: str, index: int, producer_id: int, producer_epoch: int) -> bool:
        """True unless the partition (led here) has this producer's transaction open at this epoch."""
        partition = self.broker.partition(topic, index)
        if partition is None or not partition.is_leader:
            return False  # not led here: the append answers for it
        entry = partition.producers.get(producer_id)
        return entry is None or entry.txn_first_offset < 0 or entry.epoch != producer_epoch

    def guard(self, topic: str, index: int, producer_id: int) -> tuple[int, int] | None:
        """What a marker for the producer changes: compared before and after the question."""
        partition = self.broker.partition(topic, index)
        entry = partition.producers.get(producer_id) if partition is not None else None
        return None if entry is None else (entry.epoch, entry.marker_offset)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: set[TopicPartition], add: bool
                     ) -> tuple[dict[TopicPartition, ErrorCode], set[TopicPartition]]:
        """The coordinator's answer for each partition (its own codes, before `for_client`), and
        the partitions whose answer went stale: a marker for the producer was appended there while
        the question that got the answer was out (and no transaction of the producer at this epoch
        is open there now). The guard is taken anew for each question, as
        Kafka's retries do: a marker of the previous transaction written while the coordinator
        answered CONCURRENT_TRANSACTIONS (common right after a v2 commit) is no reason to refuse."""
        if not add and self._is_local(transactional_id):
            # the coordinator is here and only asked: answered at once, nothing awaited (so no
            # marker can land meanwhile and nothing goes stale); only its wait for a previous
            # transaction's end goes the long way below. One per partition and transaction
            code = self._here_verify_only(transactional_id, producer_id, producer_epoch, partitions)
            if code != ErrorCode.CONCURRENT_TRANSACTIONS:
                return dict.fromkeys(partitions, code), set()
        # time.monotonic() is anyio.current_time() on asyncio, without its backend lookup and the
        # getpid system call of asyncio's running-loop check: two per transactional Produce
        deadline = time.monotonic() + RETRY_BACKOFF_MAX_S
        backoff = RETRY_BACKOFF_S
        while True:
            local = self._is_local(transactional_id)
            guards = {tp: self.guard(*tp, producer_id) for tp in partitions}
            codes = await self._verify_once(transactional_id, producer_id, producer_epoch, partitions, add)
            now = time.monotonic()
            if ErrorCode.CONCURRENT_TRANSACTIONS in codes.values() and local and now < deadline:
                # the coordinator is here: ask again as soon as its state changes (the previous
                # transaction's markers done), within the same bound as the backoff below
                with anyio.move_on_after(deadline - now):
                    await self.coordinator.state_changed.wait()
                continue
            if ErrorCode.CONCURRENT_TRANSACTIONS not in codes.values() or local or now + backoff > deadline:
                stale = {tp for tp, code in codes.items() if code == ErrorCode.NONE
                         and self.guard(*tp, producer_id) != guards.get(tp)
                         and self.needs(*tp, producer_id, producer_epoch)}
                return codes, stale
            await anyio.sleep(backoff)
            backoff *= 2

    def _is_local(self, transactional_id: str) -> bool:
        try:
            return self._coordinator_node(transactional_id) == self.broker.node_id
        except LookupError:
            return False

    async def _verify_once(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: set[TopicPartition], add: bool) -> dict[TopicPartition, ErrorCode]:
        try:
            node_id = self._coordinator_node(transactional_id)
        except LookupError:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if node_id == self.broker.node_id:
            return await self._ask_here(transactional_id, producer_id, producer_epoch, partitions, add)
        return await self._ask(node_id, transactional_id, producer_id, producer_epoch, partitions, add)

    def _coordinator_node(self, transactional_id: str) -> int:
        runtime = self.coordinator.runtime
        topic = self.broker.topics.get(runtime.name)
        if topic is None:
            raise LookupError(transactional_id)
        leader = topic.partitions[runtime.partition_of(transactional_id)].leader
        if leader == NO_LEADER:
            raise LookupError(transactional_id)
        return leader

    async def _ask_here(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        partitions: set[TopicPartition], add: bool) -> dict[TopicPartition, ErrorCode]:
        coordinator = self.coordinator
        if add:
            code = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                    implicit=True)
        else:
            code = self._here_verify_only(transactional_id, producer_id, producer_epoch, partitions)
        return dict.fromkeys(partitions, code)

    def _here_verify_only(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[TopicPartition]) -> ErrorCode:
        code = self.coordinator.is_in_transaction(transactional_id, producer_id, producer_epoch, partitions)
        if code == ErrorCode.INVALID_TXN_STATE:
            return ErrorCode.TRANSACTION_ABORTABLE  # what AddPartitionsToTxn v5 answers for it
        return code

    async def _ask(self, node_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: set[TopicPartition], add: bool) -> dict[TopicPartition, ErrorCode]:
        node = self.broker.image.brokers.get(node_id)
        if node is None or not node.alive:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            topics.setdefault(topic, []).append(index)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": not add, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]}
        try:
            response = await self._connections.request(node_id, node.host, node.port, ADD_PARTITIONS_TO_TXN,
                                                       VERIFY_VERSION, body, REQUEST_TIMEOUT_S)
        except CONNECTION_LOST as e:
            log.info("verifying %s with node %d failed: %s", transactional_id, node_id, e)
            return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        if response.error_code:
            code = ErrorCode(response.error_code)  # a broker denied CLUSTER_ACTION answers no transaction
            return dict.fromkeys(partitions, ErrorCode.INVALID_TXN_STATE
                                 if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else code)
        codes = dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)  # anything it left out: ask again
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    if (t.name, p.partition_index) in codes:
                        codes[(t.name, p.partition_index)] = ErrorCode(p.partition_error_code)
        return codes

    async def aclose(self) -> None:
        await self._connections.aclose()
