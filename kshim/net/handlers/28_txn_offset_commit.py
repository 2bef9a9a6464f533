"""TxnOffsetCommit: a transactional producer commits a consumer group's offsets inside its
transaction (after AddOffsetsToTxn), sent to the group's coordinator.

- The offsets become records of the group's `__consumer_offsets` partition carrying the
  producer's id and epoch (a transactional batch), answered once COMMITTED. They stay invisible
  to OffsetFetch until the transaction's COMMIT marker reaches that partition, and are dropped at
  an ABORT; meanwhile OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them.
- v3+ carries the consumer's generation and member id (KIP-447): they are checked as OffsetCommit
  checks them (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), except that a rebalance
  in progress is no error; generation -1 with no member id (a producer given only the group id)
  skips the check, as Kafka does.
- An older producer epoch than the partition has seen: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
  below v3). NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as for OffsetCommit; metadata over
  4096 bytes: OFFSET_METADATA_TOO_LARGE.
- Transaction verification (KIP-890, as Produce): when the group's `__consumer_offsets` partition
  has no open transaction of the producer at its epoch, the transaction coordinator is asked first:
  v0-4 only whether the partition is in the open transaction (AddOffsetsToTxn came first), v5
  (transactions v2, no AddOffsetsToTxn) adds it. Refused: INVALID_TXN_STATE (TRANSACTION_ABORTABLE
  at v5), PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING;
  COORDINATOR_LOAD_IN_PROGRESS (retried) while the coordinator cannot answer yet.
- ACLs (docs/security.md): WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
  and READ on the group (else GROUP_AUTHORIZATION_FAILED) for every partition; READ on each topic,
  else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import OFFSETS_TOPIC
from kshim.coordinator.transactions.verification import for_client
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import commit_entries, commit_response, refuse_topics
from kshim.net.handlers.txn_common import for_version
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 28
VERSIONS = (0, 5)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    coordinator = ctx.groups
    v = ctx.version
    if not authz.txn_allowed(ctx, AclOperation.WRITE, req.transactional_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not req.group_id:
        code = ErrorCode.INVALID_GROUP_ID
    elif not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif v >= 3:
        code = coordinator.validate_commit(req.group_id, req.generation_id, req.member_id, req.group_instance_id,
                                           transactional=True)
    else:
        code = coordinator.check(req.group_id)
    codes, updates = commit_entries(req, code, coordinator.config.offset_metadata_max_bytes, 2, v)
    if not code:  # the group's refusal (authorization included) answers every partition
        updates = refuse_topics(codes, updates, authz.denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics)))
    if updates:
        refused = await _verify(ctx, req)
        if refused:
            for tp, _ in updates:
                codes[tp] = refused
            updates = []
    if updates:
        written = await coordinator.write(req.group_id, updates, producer=(req.producer_id, req.producer_epoch))
        for tp, _ in updates:
            codes[tp] = for_version(written, v, 3)
    return commit_response(req, codes)


async def _verify(ctx: RequestContext, req: Container) -> ErrorCode:
    """The transaction coordinator's refusal of this commit (NONE: go on), see the notes."""
    verifier = ctx.transactions.verifier
    tp = (OFFSETS_TOPIC, ctx.groups.partition_of(req.group_id))
    if not verifier.needs(*tp, req.producer_id, req.producer_epoch):
        return ErrorCode.NONE
    codes, stale = await verifier.verify(req.transactional_id, req.producer_id, req.producer_epoch, {tp},
                                         add=ctx.version >= 5)
    answer = codes.get(tp, ErrorCode.NETWORK_EXCEPTION)
    code = for_client(answer, abortable_known=ctx.version >= 5)
    if code == ErrorCode.NOT_ENOUGH_REPLICAS:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # what producers retry here without looking anew
    if code == ErrorCode.INVALID_PRODUCER_EPOCH:
        return for_version(ErrorCode.PRODUCER_FENCED, ctx.version, 3)
    if not code and tp in stale:
        return ErrorCode.INVALID_TXN_STATE
    return code


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)  # answered once COMMITTED: the connection goes on reading meanwhile
