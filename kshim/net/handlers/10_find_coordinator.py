"""FindCoordinator: where a consumer group's or a transactional id's coordinator is.

- Key type 0 (group): the leader of `__consumer_offsets` partition abs(java_string_hashcode(key))
  % N (Kafka's placement); key type 1 (transaction): the same over `__transaction_state`. The
  first request creates the topic through the controller (N = `offsets_topic_partitions` or
  `transaction_state_partitions`, 10 by default; the replication factor
  `offsets_topic_replication_factor` / `transaction_state_replication_factor`, 3 by default, as
  kshim.coordinator.runtime.internal_replication_factor grants it). COORDINATOR_NOT_AVAILABLE
  while the topic waits for enough live brokers or the partition has no live leader; clients
  retry. Key type 2 (share, v6+): a share partition's key "group:topic id:partition" over
  `__share_group_state` (brokers ask it; CLUSTER_ACTION). Other key types are INVALID_REQUEST.
- v4+ batches keys in `coordinator_keys`, one answer per key.
- ACLs (docs/security.md): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or on the
  transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
- Without an authorizer, an answer that found every coordinator depends only on the metadata image
  and the listener: it is kept, encoded, until the image changes (kshim.net.handlers.image_answers).
"""
from __future__ import annotations

from construct import Container

from kshim.cluster.image import BrokerInfo
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.endpoints import endpoint
from kshim.net.handlers.image_answers import ImageAnswers
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 10
VERSIONS = (0, 6)

_ANSWERS = ImageAnswers(API_KEY, 1024)  # (version, key type, keys, listener) per image: group and transactional ids


async def _find(ctx: RequestContext, key: str, key_type: int) -> dict:
    try:
        if key_type not in (0, 1, 2) or key_type == 2 and ctx.version < 6:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}")
        node: BrokerInfo
        if key_type == 2:
            authz.check_cluster(ctx, AclOperation.CLUSTER_ACTION)
            node = await ctx.node.share_coordinator.runtime.find(key)
        else:
            if key_type == 0:
                authz.check_group(ctx, AclOperation.DESCRIBE, key)
            else:
                authz.check_txn(ctx, AclOperation.DESCRIBE, key)
            node = await (ctx.groups if key_type == 0 else ctx.transactions).find(key)
    except BrokerError as e:
        return {"error_code": e.code, "error_message": e.message, "node_id": -1, "host": "", "port": -1}
    host, port = endpoint(ctx, node)  # on the listener this request came in on
    return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": node.node_id,
            "host": host, "port": port}


async def handle(ctx: RequestContext, req: Container) -> Response:
    key_type = req.get("key_type", 0) if ctx.version >= 1 else 0
    if key_type not in (0, 1) or authz.enabled(ctx):  # the answer depends on the principal
        return await _answer(ctx, req, key_type)
    keys = tuple(req.coordinator_keys) if ctx.version >= 4 else req.key
    shape = (ctx.version, key_type, keys, ctx.security.listener if ctx.security is not None else None)
    return await _ANSWERS.answer(ctx, shape, lambda: _answer(ctx, req, key_type), _found)


def _found(body: dict) -> bool:
    """Every coordinator asked for was found (a refusal is transient: the client asks again)."""
    return all(not c["error_code"] for c in body["coordinators"]) if "coordinators" in body else not body["error_code"]


async def _answer(ctx: RequestContext, req: Container, key_type: int) -> dict:
    if ctx.version >= 4:
        answers = []
        for key in req.coordinator_keys:
            answer = await _find(ctx, key, key_type)
            answers.append({"key": key, **answer})
        return {"throttle_time_ms": 0, "coordinators": answers}
    answer = await _find(ctx, req.key, key_type)
    if ctx.version == 0:
        answer.pop("error_message")
    return {"throttle_time_ms": 0, **answer}
