"""ListTransactions: the transactional ids this broker coordinates (admin clients ask every
broker and merge), filtered by state names, producer ids, (v1) a minimum running time in ms and
(v2, KIP-1152) a transactional id pattern: a regular expression the whole id must match (Python
`re`; Kafka uses java.util.regex, ordinary patterns behave the same), null or empty for all; one
that does not compile is INVALID_REGULAR_EXPRESSION.
State names kshim does not know come back in unknown_state_filters. While a partition of
`__transaction_state` is still loading the answer is COORDINATOR_LOAD_IN_PROGRESS, as a partial
list would silently miss ids.
- ACLs (docs/security.md): only the transactional ids the principal may DESCRIBE are listed.
"""
from __future__ import annotations

import re

from construct import Container

from kshim.coordinator.transactions import TxnState
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 66
VERSIONS = (0, 2)

_NAMES = {s.value for s in TxnState}


async def handle(ctx: RequestContext, req: Container) -> Response:
    if ctx.transactions.runtime.loading:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                "unknown_state_filters": [], "transaction_states": []}
    pattern = req.get("transactional_id_pattern") if ctx.version >= 2 else None
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REGULAR_EXPRESSION,
                "unknown_state_filters": [], "transaction_states": []}
    states = set(req.state_filters)
    found = ctx.transactions.list(states & _NAMES, set(req.producer_id_filters),
                                         req.get("duration_filter", -1) if ctx.version >= 1 else -1)
    if matcher is not None:
        found = [m for m in found if matcher.fullmatch(m.transactional_id)]
    if states and not states & _NAMES:
        found = []  # only unknown states asked for: none match
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": sorted(states - _NAMES),
            "transaction_states": [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                    "transaction_state": m.state.value} for m in found
                                   if authz.txn_allowed(ctx, AclOperation.DESCRIBE, m.transactional_id)]}
