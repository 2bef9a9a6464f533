"""DescribeTransactions: the state of transactional ids this broker coordinates: state name
(Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), timeout, start time
of the open transaction, producer id and epoch, and its partitions. Sent to each id's coordinator
(FindCoordinator key type 1): elsewhere NOT_COORDINATOR; an id never initialised
TRANSACTIONAL_ID_NOT_FOUND.
"""
from __future__ import annotations

API_KEY = 65
VERSIONS = (0, 0)


async def handle(ctx, req):
    coordinator = ctx.transactions
    return {"throttle_time_ms": 0,
            "transaction_states": [coordinator.describe(tid) for tid in req.transactional_ids]}
