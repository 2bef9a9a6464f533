"""EndTxn: commit or abort the producer's open transaction.

- Ongoing: the coordinator writes PrepareCommit/PrepareAbort durably and answers; markers then go
  to every partition of the transaction in the background, and CompleteCommit/CompleteAbort is
  written once all are COMMITTED. Until then the id answers CONCURRENT_TRANSACTIONS to new work.
- A retry of a finished end (CompleteCommit and commit again) is NONE; the opposite outcome, or
  no open transaction, is INVALID_TXN_STATE; a producer fenced by a newer epoch (re-init or a
  transaction.timeout.ms abort) gets PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2).
- v5+ is transactions v2 (KIP-890; clients send it when the cluster finalizes transaction.version
  2): every commit or abort bumps the producer epoch, the markers carry the bumped epoch, and the
  answer names the producer id and epoch to go on with (a new producer id with epoch 0 once the
  epoch is exhausted). A retry naming the epoch from before the bump gets the same answer again;
  an abort with nothing in the transaction (its writes failed verification) still bumps the epoch.
  Errors answer producer id and epoch -1, as Kafka.
- v0-4 keep the epoch; v5 answers of a v1 transaction name it unchanged.
- ACLs (docs/security.md): WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.txn_common import for_version
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 26
VERSIONS = (0, 5)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    if not authz.txn_allowed(ctx, AclOperation.WRITE, req.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": req.producer_id, "producer_epoch": req.producer_epoch}
    code, producer_id, producer_epoch = await ctx.transactions.end_txn(
        req.transactional_id, req.producer_id, req.producer_epoch, req.committed, tv2=ctx.version >= 5)
    return {"throttle_time_ms": 0, "error_code": for_version(code, ctx.version, 2),
            "producer_id": producer_id, "producer_epoch": producer_epoch}


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)  # answered later: the connection goes on reading meanwhile
