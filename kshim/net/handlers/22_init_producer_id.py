"""InitProducerId: hands idempotent and transactional producers a producer id and epoch.

- Without a transactional id: a fresh producer id with epoch 0, as Kafka does, from this broker's
  block of ids (kshim.replica.producer_ids: the controller hands out blocks from its persisted counter, so
  an id is never reused, even after a crash, and ids keep coming while the controller restarts);
  a v3+ request naming its old id and epoch (KIP-360) also gets a fresh id. With the block used up
  and the controller unreachable: COORDINATOR_LOAD_IN_PROGRESS (clients retry).
- With a transactional id (sent to its coordinator, see FindCoordinator key type 1): a new id
  gets a producer id and epoch 0, a known one the same producer id with its epoch bumped, which
  fences the previous instance. An open transaction of that id is aborted first and the answer is
  CONCURRENT_TRANSACTIONS until the abort is done (clients retry). transaction_timeout_ms must be
  in (0, transaction.max.timeout.ms] (INVALID_TRANSACTION_TIMEOUT). A v3+ request naming an
  id/epoch that is not the current one is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4).
  An empty transactional id is INVALID_REQUEST. NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
  when this broker does not (yet) coordinate the id.
- v6 (KIP-939, two-phase commit): kshim runs without transaction.two.phase.commit.enable, so a
  transactional request with enable2_pc is TRANSACTIONAL_ID_AUTHORIZATION_FAILED and one with
  keep_prepared_txn UNSUPPORTED_VERSION, as Kafka answers them then; otherwise the ongoing
  transaction's id and epoch are -1 (none kept).
- ACLs (docs/security.md): with a transactional id, WRITE on it (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without, IDEMPOTENT_WRITE on the cluster or WRITE on
  some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.txn_common import for_version
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 22
VERSIONS = (0, 6)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    try:
        return await _init(ctx, req)
    except BrokerError as e:  # no producer id to be had now (the controller is away): retriable
        return {"error_code": for_version(e.code, ctx.version, 4), "producer_id": -1, "producer_epoch": -1}


async def _init(ctx: RequestContext, req: Container) -> dict:
    tid = req.transactional_id
    if tid is not None and not authz.txn_allowed(ctx, AclOperation.WRITE, tid):
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    if tid is None and not _may_write_idempotently(ctx):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    if tid is None:
        return {"error_code": ErrorCode.NONE, "producer_id": await ctx.broker.allocate_producer_id(),
                "producer_epoch": 0}
    if not tid:
        return {"error_code": ErrorCode.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    if req.get("enable2_pc", False):  # 2PC is not enabled on this broker
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    if req.get("keep_prepared_txn", False):  # needs two-phase commit (transaction version 2)
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "producer_id": -1, "producer_epoch": -1}
    code, pid, epoch = await ctx.transactions.init_producer_id(
        tid, req.transaction_timeout_ms, req.get("producer_id", -1), req.get("producer_epoch", -1))
    return {"error_code": for_version(code, ctx.version, 4), "producer_id": pid, "producer_epoch": epoch}


def _may_write_idempotently(ctx: RequestContext) -> bool:
    if authz.cluster_allowed(ctx, AclOperation.IDEMPOTENT_WRITE):
        return True
    return authz.any_topic_allowed(ctx, AclOperation.WRITE)


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)  # answered later: the connection goes on reading meanwhile
