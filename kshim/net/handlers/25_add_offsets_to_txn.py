"""AddOffsetsToTxn: a transactional producer will commit a group's offsets in its transaction
(send_offsets_to_transaction). The coordinator adds the group's `__consumer_offsets` partition to
the transaction, as AddPartitionsToTxn would, so its markers settle those offsets too. The
producer then sends TxnOffsetCommit to the group coordinator.

Errors as AddPartitionsToTxn: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
below v2), CONCURRENT_TRANSACTIONS (after waiting up to 100 ms for the previous transaction's end,
as AddPartitionsToTxn does), NOT_COORDINATOR; an empty group id is INVALID_GROUP_ID.
- ACLs (docs/security.md): WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
  READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import OFFSETS_TOPIC
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.txn_common import for_version
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 25
VERSIONS = (0, 4)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    if not authz.txn_allowed(ctx, AclOperation.WRITE, req.transactional_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if req.group_id and not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not req.group_id:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    try:
        topic = await ctx.groups.runtime.ensure()
    except BrokerError:
        topic = None
    if topic is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    index = ctx.groups.partition_of(req.group_id)
    code = await ctx.transactions.add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                 {(OFFSETS_TOPIC, index)}, wait=True)
    return {"throttle_time_ms": 0, "error_code": for_version(code, ctx.version, 2)}


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)  # answered later: the connection goes on reading meanwhile
