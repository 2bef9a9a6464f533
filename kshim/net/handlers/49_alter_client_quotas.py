"""AlterClientQuotas: set or remove client quotas; the controller validates and stores them and
every broker enforces them from its metadata image (kshim/net/quota_manager.py).

- An entity is user, client-id, user with client-id, or ip alone; a null name is the type's
  default entity. Keys: producer_byte_rate, consumer_byte_rate (whole bytes per second),
  request_percentage, controller_mutation_rate for user/client-id entities;
  connection_creation_rate (whole) for ip entities.
- Each entity succeeds or fails on its own, with Kafka's answers: INVALID_REQUEST for an empty
  entity, an unknown entity type, a type given twice, an empty name, ip combined with another
  type, an ip that is not an address, a key that is not one of the entity's, a value <= 0, a
  fractional or too large value for a whole key, a key given twice, an entity given twice.
- remove=true drops the key (its value is ignored; removing an absent key succeeds).
- validate_only runs every check and changes nothing.
- Enforced (kshim/net/quota_manager.py, docs/protocol.md "Quotas"): the byte rates,
  request_percentage, connection_creation_rate and controller_mutation_rate.
- Authorization: ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every
  entry (Kafka's ControllerApis); nothing is stored.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import QuotaEntityPart
from kshim.controller.messages import AlterClientQuotas, QuotaAlteration, QuotaAlterationResult
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 49
VERSIONS = (0, 1)


def _alteration(entry: Container) -> QuotaAlteration | QuotaAlterationResult:
    ops: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in ops:
            return QuotaAlterationResult(int(ErrorCode.INVALID_REQUEST),
                                         f"Duplicate quota key {op.key} not updating quota for this entity")
        ops[op.key] = None if op.remove else op.value
    return QuotaAlteration(tuple(QuotaEntityPart(e.entity_type, e.entity_name) for e in entry.entity), ops)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    if not authz.cluster_allowed(ctx, AclOperation.ALTER_CONFIGS):
        refused = QuotaAlterationResult(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                        f"{ctx.principal} may not ALTER_CONFIGS the cluster")
        asked: list[QuotaAlteration | QuotaAlterationResult] = [refused] * len(req.entries)
    else:
        asked = [_alteration(entry) for entry in req.entries]
    valid = [a for a in asked if isinstance(a, QuotaAlteration)]
    answers: list[QuotaAlterationResult] = []
    if valid:
        try:
            done: tuple[QuotaAlterationResult, ...] = await ctx.broker.controller.call(
                AlterClientQuotas(tuple(valid), req.validate_only))
            answers = list(done)
        except BrokerError as e:
            answers = [QuotaAlterationResult(int(e.code), e.message)] * len(valid)
    results = iter(answers)
    entries = []
    for entry, a in zip(req.entries, asked):
        result = next(results) if isinstance(a, QuotaAlteration) else a
        entries.append({"error_code": result.error_code, "error_message": result.message,
                        "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                                   for e in entry.entity]})
    return {"throttle_time_ms": 0, "entries": entries}
