"""AddPartitionsToTxn: a transactional producer names the partitions it is about to write to.

- v0-3 (clients): one transaction; the coordinator records the partitions durably (the
  transaction becomes Ongoing) before answering, so markers reach every partition written to.
  Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED;
  a producer id the coordinator does not know for the id is INVALID_PRODUCER_ID_MAPPING, an old
  epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2), a transaction being ended
  CONCURRENT_TRANSACTIONS. That last answer waits up to 100 ms for the end (its markers and
  Complete record) to finish, and answers as a retry then would: a producer's next transaction
  usually begins before the last one's markers are written, and the error costs it a 20 ms
  backoff (Kafka answers at once; the outcome is the same, only sooner).
- v4-5 (between brokers, KIP-890): several transactions per request, sent by partition leaders
  verifying a transactional write (kshim/coordinator/transactions/verification.py). `verify_only`
  asks whether the partitions already belong to the open transaction without adding them: if not,
  TRANSACTION_ABORTABLE (v5) or INVALID_TXN_STATE (v4); a transaction being ended is
  CONCURRENT_TRANSACTIONS. Without `verify_only` (a transactions v2 write) the partitions are added
  as a client's v0-3 request adds them, and the transaction counts as a v2 one.
- ACLs (docs/security.md): v0-3 (producers) need WRITE on the transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, and WRITE on each topic, else
  TOPIC_AUTHORIZATION_FAILED for its partitions and OPERATION_NOT_ATTEMPTED for the others;
  v4+ (broker to broker) needs CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.txn_common import for_version
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 24
VERSIONS = (0, 5)


def _results(topics: list, codes: dict) -> list[dict]:
    return [{"name": t.name, "results_by_partition": [
        {"partition_index": p, "partition_error_code": codes[(t.name, p)]} for p in t.partitions]}
        for t in topics]


async def _one(ctx: RequestContext, tid: str, producer_id: int, epoch: int, topics: list, verify_only: bool) -> dict:
    coordinator = ctx.transactions
    wanted = {(t.name, p) for t in topics for p in t.partitions}
    if not authz.txn_allowed(ctx, AclOperation.WRITE, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = authz.denied_topics(ctx, AclOperation.WRITE, (t.name for t in topics))
    if denied:
        return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted}
    unknown = coordinator.unknown_partitions(wanted)
    if unknown:
        codes = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                 for tp in wanted}
        return codes
    if verify_only:
        code = coordinator.is_in_transaction(tid, producer_id, epoch, wanted)
        if code == ErrorCode.INVALID_TXN_STATE and ctx.version >= 5:
            code = ErrorCode.TRANSACTION_ABORTABLE
    else:
        # a client's request (v0-3) waits briefly for the previous transaction's end to finish;
        # a leader's (v4+) must not (see add_partitions)
        code = await coordinator.add_partitions(tid, producer_id, epoch, wanted, implicit=ctx.version >= 4,
                                                wait=ctx.version <= 3)
    code = for_version(code, ctx.version, 2)
    return dict.fromkeys(wanted, code)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    if ctx.version <= 3:
        codes = await _one(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                           req.v3_and_below_producer_epoch, req.v3_and_below_topics, False)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(req.v3_and_below_topics, codes)}
    if not authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results_by_transaction": []}
    results = []
    for txn in req.transactions:
        codes = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                           txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _results(txn.topics, codes)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)  # answered later: the connection goes on reading meanwhile
