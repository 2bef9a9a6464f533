"""SaslAuthenticate: one SASL token each way (docs/security.md).

- After SaslHandshake v1 on a SASL listener: the mechanism takes the client's token and answers
  its own; once it completes the connection is authenticated as its principal ("User:alice").
  v1+ answers session_lifetime_ms when connections.max.reauth.ms is set (KIP-368).
- Bad credentials: SASL_AUTHENTICATION_FAILED with a message that names neither the password nor
  whether the user exists; then the connection closes, after connection.failed.authentication.delay.ms.
- Before SaslHandshake, or after authentication without a new handshake: ILLEGAL_SASL_STATE,
  then close.
- A bare token after SaslHandshake v0 (`raw`) is answered with the bare server token; a failure
  there just closes the connection, as Kafka does.
- On a listener without SASL: ILLEGAL_SASL_STATE; the connection stays open.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from wire.errors import ErrorCode

API_KEY = 36
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, req: Container) -> Response:
    security = ctx.security
    if security is None:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"",
                "error_message": "SaslAuthenticate on a listener without SASL"}
    answer = security.authenticate(bytes(req.auth_bytes))
    out: dict = {"error_code": answer.error, "error_message": answer.message, "auth_bytes": answer.token}
    if ctx.version >= 1:
        out["session_lifetime_ms"] = answer.session_lifetime_ms
    return out
