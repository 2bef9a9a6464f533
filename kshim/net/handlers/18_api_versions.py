"""ApiVersions: the versions of every API this broker serves, taken from the handler registry.

- A request at a version outside what is served gets UNSUPPORTED_VERSION (35) in a v0 body that
  still lists every supported range, and the connection stays open (the client then retries with
  a version it finds in that list). The connection core marks such requests `unsupported`.
- The response header is always v0, whatever the version (handled in wire.headers).
- v3+: client software name/version are accepted and only logged at debug level.
"""
from __future__ import annotations

from construct import Container

from kshim.net.handlers import RequestContext, Response
from wire.errors import ErrorCode

API_KEY = 18
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: Container) -> Response:
    api_keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in ctx.supported.items()]
    if req is None:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_keys}
    return {"error_code": ErrorCode.NONE, "api_keys": api_keys, "throttle_time_ms": 0}
