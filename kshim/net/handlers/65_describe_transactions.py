"""DescribeTransactions: the state of transactional ids this broker coordinates: state name
(Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), timeout, start time
of the open transaction, producer id and epoch, and its partitions. Sent to each id's coordinator
(FindCoordinator key type 1): elsewhere NOT_COORDINATOR; an id never initialised
TRANSACTIONAL_ID_NOT_FOUND.
- ACLs (docs/security.md): DESCRIBE on each transactional id, else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it; topics the principal may not DESCRIBE are left
  out of its partitions.
"""
from __future__ import annotations

from typing import Any

from construct import Container

from kshim.coordinator.transactions.state import TxnMetadata
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 65
VERSIONS = (0, 0)


def _state(transactional_id: str, meta: TxnMetadata | ErrorCode) -> dict[str, Any]:
    if isinstance(meta, ErrorCode):
        return {"error_code": meta, "transactional_id": transactional_id, "transaction_state": "",
                "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                "producer_epoch": -1, "topics": []}
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        topics.setdefault(topic, []).append(index)
    return {"error_code": ErrorCode.NONE, "transactional_id": transactional_id,
            "transaction_state": meta.state.value, "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms, "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


def _describe(ctx: RequestContext, tid: str) -> dict[str, Any]:
    if not authz.txn_allowed(ctx, AclOperation.DESCRIBE, tid):
        return _state(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    state = _state(tid, ctx.transactions.describe(tid))
    denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, (t["topic"] for t in state["topics"]))
    state["topics"] = [t for t in state["topics"] if t["topic"] not in denied]
    return state


async def handle(ctx: RequestContext, req: Container) -> Response:
    return {"throttle_time_ms": 0, "transaction_states": [_describe(ctx, tid) for tid in req.transactional_ids]}
