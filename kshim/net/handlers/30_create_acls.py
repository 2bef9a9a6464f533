"""CreateAcls: add ACL bindings, stored by the controller and enforced by every broker once it
applied the image that carries them (this broker before it answers).

- Each creation is checked on its own (Kafka's rules): a resource type, operation and permission
  that are not ANY or UNKNOWN, pattern LITERAL or PREFIXED, a non-empty name ("kafka-cluster" for
  the CLUSTER), a principal TYPE:NAME and a host ("*" for all): else INVALID_REQUEST for it.
- A binding that already exists is accepted and stays one binding.
- Without --authorizer: SECURITY_DISABLED. The principal needs ALTER on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every creation.
"""
from __future__ import annotations

from construct import Container

from kshim.controller.messages import CreateAcls
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.acl_common import check_acl_access
from kshim.security.acls import AclBinding, AclOperation, InvalidAcl, validate_binding
from wire.errors import ErrorCode

API_KEY = 30
VERSIONS = (1, 3)


def _result(code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message}


async def handle(ctx: RequestContext, req: Container) -> Response:
    creations = list(req.creations)
    try:
        check_acl_access(ctx, AclOperation.ALTER)
    except BrokerError as e:
        return {"throttle_time_ms": 0, "results": [_result(e.code, e.message) for _ in creations]}
    results: list[dict] = []
    valid: list[AclBinding] = []
    for c in creations:
        acl = AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                         c.operation, c.permission_type)
        try:
            validate_binding(acl)
        except InvalidAcl as e:
            results.append(_result(ErrorCode.INVALID_REQUEST, str(e)))
            continue
        valid.append(acl)
        results.append(_result())
    if valid:
        try:
            await ctx.broker.controller.call(CreateAcls(tuple(valid)))
        except BrokerError as e:
            results = [r if r["error_code"] else _result(e.code, e.message) for r in results]
    return {"throttle_time_ms": 0, "results": results}
