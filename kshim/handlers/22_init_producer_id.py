"""InitProducerId: hands idempotent producers a producer id and epoch.

- Without a transactional id: a fresh producer id from the persisted counter (never reused, even
  after a crash) with epoch 0, as Kafka does; a v3+ request naming its old id and epoch (KIP-360)
  also gets a fresh id.
- With a transactional id: transactions are not served yet (FindCoordinator for transactions is
  not advertised), so this answers INVALID_REQUEST rather than pretending.
"""
from __future__ import annotations

from wire.errors import ErrorCode

API_KEY = 22
VERSIONS = (0, 5)


async def handle(ctx, req):
    if req.transactional_id is not None:
        return {"error_code": ErrorCode.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.NONE, "producer_id": await ctx.broker.allocate_producer_id(), "producer_epoch": 0}
