"""SaslHandshake: the client names its SASL mechanism (docs/security.md).

- On a SASL listener before authentication: NONE with the mechanisms enabled on that listener
  (listener.name.<l>.sasl.enabled.mechanisms, else sasl.enabled.mechanisms), and the connection
  then expects the mechanism's tokens (v0: as bare frames; v1: in SaslAuthenticate requests).
- A mechanism not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled ones; the connection
  closes after the answer (delayed as connection.failed.authentication.delay.ms says).
- A second handshake mid-exchange: ILLEGAL_SASL_STATE, then close. After authentication, v1 with
  the same mechanism starts a re-authentication (KIP-368).
- On a listener without SASL: ILLEGAL_SASL_STATE and no mechanisms; the connection stays open.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from wire.errors import ErrorCode

API_KEY = 17
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: Container) -> Response:
    security = ctx.security
    if security is None or not security.listener.sasl:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    code = security.handshake(req.mechanism, ctx.version)
    return {"error_code": code, "mechanisms": list(security.mechanisms)}
