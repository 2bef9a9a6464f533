"""DescribeUserScramCredentials: which SCRAM mechanisms (and iterations) users have credentials for.

- Served from this broker's metadata image: the credentials stored by the controller
  (AlterUserScramCredentials). Users given on the command line (--sasl-users) are not listed, as
  Kafka does not list users of its JAAS file.
- users null or empty: every user with a credential. A named user with none: RESOURCE_NOT_FOUND;
  a user named twice: DUPLICATE_RESOURCE for it. Salts and keys never leave the broker.
- Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top and for
  every asked user (Kafka's KafkaApis).
"""
from __future__ import annotations

from collections import Counter

from construct import Container

from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from kshim.security.sasl import SCRAM_TYPES
from wire.errors import ErrorCode

API_KEY = 50
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Response:
    if not authz.cluster_allowed(ctx, AclOperation.DESCRIBE):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{ctx.principal} may not DESCRIBE the cluster"
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": [
            {"user": u.name, "error_code": code, "error_message": message, "credential_infos": []}
            for u in req.users or ()]}
    by_user: dict[str, list[dict]] = {}
    for entry in ctx.broker.image.scram:
        by_user.setdefault(entry.user, []).append(
            {"mechanism": SCRAM_TYPES[entry.mechanism], "iterations": entry.iterations})
    asked = [u.name for u in req.users] if req.users else sorted(by_user)
    counts = Counter(asked)
    results: list[dict] = []
    for user in dict.fromkeys(asked):
        if counts[user] > 1:
            results.append({"user": user, "error_code": ErrorCode.DUPLICATE_RESOURCE, "credential_infos": [],
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             "single request"})
        elif user not in by_user:
            results.append({"user": user, "error_code": ErrorCode.RESOURCE_NOT_FOUND, "credential_infos": [],
                            "error_message": "Attempt to describe a user credential that does not exist"})
        else:
            results.append({"user": user, "error_code": ErrorCode.NONE, "error_message": None,
                            "credential_infos": by_user[user]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}
