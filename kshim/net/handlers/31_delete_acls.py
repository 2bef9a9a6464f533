"""DeleteAcls: delete the ACL bindings each filter matches (the filters are DescribeAcls'); the
answer lists, per filter, the bindings it deleted. The controller deletes them all at once; every
broker stops enforcing them once it applied the image (this broker before it answers).

- A filter with an UNKNOWN code: INVALID_REQUEST for it, and it deletes nothing.
- Without --authorizer: SECURITY_DISABLED. The principal needs ALTER on the cluster, else
  CLUSTER_AUTHORIZATION_FAILED for every filter.
"""
from __future__ import annotations

from typing import Iterator

from construct import Container

from kshim.controller.messages import DeleteAcls, DeletedAcls
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.acl_common import acl_fields, check_acl_access, request_filter
from kshim.security.acls import AclFilter, AclOperation, InvalidAcl, validate_filter
from wire.errors import ErrorCode

API_KEY = 31
VERSIONS = (1, 3)


def _failed(code: ErrorCode, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "matching_acls": []}


async def handle(ctx: RequestContext, req: Container) -> Response:
    asked = list(req.filters)
    try:
        check_acl_access(ctx, AclOperation.ALTER)
    except BrokerError as e:
        return {"throttle_time_ms": 0, "filter_results": [_failed(e.code, e.message) for _ in asked]}
    results: list[dict | None] = []
    valid: list[AclFilter] = []
    for f in asked:
        acl_filter = request_filter(f)
        try:
            validate_filter(acl_filter)
        except InvalidAcl as e:
            results.append(_failed(ErrorCode.INVALID_REQUEST, str(e)))
            continue
        valid.append(acl_filter)
        results.append(None)  # filled from the controller's answer
    deleted: Iterator[DeletedAcls] = iter(())
    error: BrokerError | None = None
    if valid:
        try:
            answer: tuple[DeletedAcls, ...] = await ctx.broker.controller.call(DeleteAcls(tuple(valid)))
            deleted = iter(answer)
        except BrokerError as e:
            error = e
    out = []
    for r in results:
        if r is not None:
            out.append(r)
        elif error is not None:
            out.append(_failed(error.code, error.message))
        else:
            out.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
                {"error_code": ErrorCode.NONE, "error_message": None, **acl_fields(a)} for a in next(deleted).acls]})
    return {"throttle_time_ms": 0, "filter_results": out}
