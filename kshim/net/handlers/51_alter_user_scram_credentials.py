"""AlterUserScramCredentials: set or delete users' SCRAM credentials, stored by the controller.

- Upsertions carry a salt and a salted password (the client ran PBKDF2; the password never
  travels); the broker keeps StoredKey and ServerKey from them (RFC 5802), as Kafka does, and every
  broker authenticates with them once it has the new metadata image.
- Per user, one result: DUPLICATE_RESOURCE if named more than once in the request;
  UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2);
  UNACCEPTABLE_CREDENTIAL for an empty name, salt or salted password, or iterations outside
  4096..16384; RESOURCE_NOT_FOUND for deleting a credential that does not exist. Other users'
  alterations still apply.
- While the controller is unreachable every user gets its error (NOT_CONTROLLER, retriable).
- Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user named
  (Kafka's ControllerApis); nothing is stored.
"""
from __future__ import annotations

import base64
from collections import Counter

from construct import Container

from kshim.cluster.image import ScramEntry
from kshim.controller.messages import ScramDeletion
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from kshim.security.sasl import HASHES, MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_NAMES, scram_from_salted
from wire.errors import ErrorCode

API_KEY = 51
VERSIONS = (0, 0)


def _problem(name: str, mechanism: int, upsert: Container | None = None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in SCRAM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism}"
    if upsert is not None:
        if upsert.iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (at least {MIN_ITERATIONS})"
        if upsert.iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (at most {MAX_ITERATIONS})"
        if not upsert.salt or not upsert.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


def _entry(u: Container) -> ScramEntry:
    mech = SCRAM_NAMES[u.mechanism]
    cred = scram_from_salted(mech, bytes(u.salted_password), bytes(u.salt), u.iterations)
    b64 = base64.b64encode
    return ScramEntry(u.name, mech, b64(cred.salt).decode(), b64(cred.stored_key).decode(),
                      b64(cred.server_key).decode(), u.iterations)


async def handle(ctx: RequestContext, req: Container) -> Response:
    assert set(SCRAM_NAMES.values()) == set(HASHES)
    names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    if not authz.cluster_allowed(ctx, AclOperation.ALTER):
        why = f"{ctx.principal} may not ALTER the cluster"
        return {"throttle_time_ms": 0, "results": [
            {"user": name, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": why}
            for name in dict.fromkeys(names)]}
    counts = Counter(names)
    failed: dict[str, tuple[ErrorCode, str]] = {
        name: (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        for name, n in counts.items() if n > 1}
    for d in req.deletions:
        if d.name not in failed and (problem := _problem(d.name, d.mechanism)):
            failed[d.name] = problem
    for u in req.upsertions:
        if u.name not in failed and (problem := _problem(u.name, u.mechanism, u)):
            failed[u.name] = problem
    deletions = tuple(ScramDeletion(d.name, SCRAM_NAMES[d.mechanism]) for d in req.deletions if d.name not in failed)
    upsertions = tuple(_entry(u) for u in req.upsertions if u.name not in failed)
    done: dict[str, tuple[ErrorCode, str | None]] = {}
    if deletions or upsertions:
        try:
            for result in await ctx.broker.alter_scram_credentials(deletions, upsertions):
                done[result.user] = (ErrorCode(result.error_code), result.error_message)
        except BrokerError as e:
            done = {name: (e.code, e.message) for name in counts if name not in failed}
    results = []
    for name in dict.fromkeys(names):
        code, message = failed.get(name) or done[name]
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
