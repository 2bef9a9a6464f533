"""DescribeClientQuotas: the client quotas of the entities a filter matches, from this broker's
metadata image (the controller's AlterClientQuotas travel in it), as a KRaft broker answers.

- Each filter component names an entity type (user, client-id, ip) and a match type: 0 EXACT
  (that name; a null match is INVALID_REQUEST), 1 DEFAULT (the type's default entity), 2 SPECIFIED
  (any entity with that type, the default included); DEFAULT and SPECIFIED with a match string are
  INVALID_REQUEST, as are an unknown match type, an empty type, a type given twice and ip combined
  with user or client-id. An unknown entity type is UNSUPPORTED_VERSION, as Kafka answers.
- strict: only entities with exactly the filtered types; otherwise entities may have more types.
  No components and strict=false lists every entity.
- A failed filter answers the error with its message and null entries.
- Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED (Kafka's
  KafkaApis), with no entries.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.configs import quotas
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 48
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    throttle = 0  # request_percentage: the server raises it (handlers/throttling.py)
    if not authz.cluster_allowed(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": throttle, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"{ctx.principal} may not DESCRIBE_CONFIGS the cluster", "entries": None}
    try:
        flt = quotas.parse_filter(((c.entity_type, c.match_type, c.match) for c in req.components), req.strict)
    except BrokerError as e:
        return {"throttle_time_ms": throttle, "error_code": e.code, "error_message": e.message, "entries": None}
    found = quotas.describe(ctx.broker.image.client_quotas, flt)
    return {"throttle_time_ms": throttle, "error_code": ErrorCode.NONE, "error_message": None, "entries": [
        {"entity": [{"entity_type": p.type, "entity_name": p.name} for p in q.entity],
         "values": [{"key": k, "value": v} for k, v in sorted(q.values.items())]}
        for q in found]}
