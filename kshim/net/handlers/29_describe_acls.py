"""DescribeAcls: the ACL bindings one filter matches, grouped by resource pattern.

- Answered from the ACLs of the image this broker last applied (every broker has them all).
- The filter: ANY resource type, operation or permission matches every value; a null name,
  principal or host matches any; pattern type ANY matches both kinds with the exact name, MATCH
  the bindings that apply to the named resource (its literal name, the literal "*", its
  prefixes), LITERAL and PREFIXED only their kind. An UNKNOWN code: INVALID_REQUEST.
- Without --authorizer: SECURITY_DISABLED. The principal needs DESCRIBE on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.acl_common import check_acl_access, request_filter
from kshim.security import authz
from kshim.security.acls import AclBinding, AclOperation, InvalidAcl, validate_filter
from wire.errors import ErrorCode

API_KEY = 29
VERSIONS = (1, 3)


async def handle(ctx: RequestContext, req: Container) -> Response:
    try:
        check_acl_access(ctx, AclOperation.DESCRIBE)
        f = request_filter(req)
        validate_filter(f)
    except BrokerError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "resources": []}
    except InvalidAcl as e:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e),
                "resources": []}
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in authz.authorizer(ctx).index.find(f):
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": [
        {"resource_type": rtype, "resource_name": name, "pattern_type": pattern,
         "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                   "permission_type": a.permission} for a in acls]}
        for (rtype, name, pattern), acls in by_pattern.items()]}
