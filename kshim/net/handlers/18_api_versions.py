"""ApiVersions: the versions of every API this broker serves, taken from the handler registry.

- A request at a version outside what is served gets UNSUPPORTED_VERSION (35) in a v0 body that
  still lists every supported range, and the connection stays open (the client then retries with
  a version it finds in that list). The connection core marks such requests `unsupported`.
- The response header is always v0, whatever the version (handled in wire.headers).
- v3+: client software name/version are accepted and only logged at debug level.
- v3+: supported_features (kshim.cluster.image.SUPPORTED_FEATURES; at v3 those whose minimum is 0
  are left out, as Kafka does since KAFKA-17011), the finalized features of the cluster (the
  features at a level above 0) and their epoch, from this broker's metadata image.
  transaction.version is finalized at 2 unless set lower (UpdateFeatures, serve
  --transaction-version): clients then use transactions v2 (KIP-890; docs/transactions.md); at 0
  or 1 (absent from the finalized list at 0) they keep v1. zk_migration_ready is false.
- The answer is the same for every client until the finalized features change: it is encoded once
  per version and feature epoch and sent as those bytes (kshim.net.protocol.Encoded).
"""
from __future__ import annotations

from construct import Container

from kshim.cluster.image import SUPPORTED_FEATURES
from kshim.net.handlers import RequestContext, Response
from kshim.net.protocol import Encoded
from wire.errors import ErrorCode

API_KEY = 18
VERSIONS = (0, 4)


# (version, the supported table's identity, feature epoch, finalized features) -> (the table, kept
# so that its identity is not reused while cached; the answer)
_ANSWERS: dict[tuple, tuple[object, Encoded]] = {}


async def handle(ctx: RequestContext, req: Container) -> Response:
    if req is None:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys(ctx)}
    if ctx.version >= 3:  # client telemetry subscriptions match on these (KIP-714)
        ctx.node.telemetry.note_software(ctx.peer, req.client_software_name, req.client_software_version)
    image = ctx.broker.image
    key = (ctx.version, id(ctx.supported), image.features_epoch, tuple(image.features.items()))
    cached = _ANSWERS.get(key)
    if cached is None:
        if len(_ANSWERS) > 64:  # feature changes and several tables (tests) over a process's life
            _ANSWERS.clear()
        cached = _ANSWERS[key] = (ctx.supported, Encoded(API_KEY, ctx.version, _answer(ctx)))
    return cached[1].copy()


def _api_keys(ctx: RequestContext) -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in ctx.supported.items()]


def _answer(ctx: RequestContext) -> dict:
    response = {"error_code": ErrorCode.NONE, "api_keys": _api_keys(ctx), "throttle_time_ms": 0}
    if ctx.version >= 3:
        image = ctx.broker.image
        response.update(
            supported_features=[{"name": name, "min_version": lo, "max_version": hi}
                                for name, (lo, hi) in SUPPORTED_FEATURES.items() if lo > 0 or ctx.version >= 4],
            finalized_features_epoch=image.features_epoch,
            finalized_features=[{"name": name, "max_version_level": level, "min_version_level": level}
                                for name, level in image.features.items() if level > 0],
            zk_migration_ready=False)
    return response
