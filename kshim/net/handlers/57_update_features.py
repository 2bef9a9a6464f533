"""UpdateFeatures: finalize cluster-wide feature levels (KIP-584; kafka-features.sh,
Admin.updateFeatures). The supported and finalized levels show in ApiVersions v3+.

- Features kshim knows: metadata.version (only kshim's own level, 30 = 4.3-IV0: kshim has no KRaft
  records a level would change, so there is nothing to upgrade or downgrade to) and group.version
  0-1 (1: the consumer rebalance protocol of KIP-848; 0: ConsumerGroupHeartbeat answers
  UNSUPPORTED_VERSION, as Kafka with the protocol disabled) and transaction.version 0-2 (2, the
  default: clients use transactions v2 of KIP-890; 0 or 1: they keep v1; the broker verifies
  transactional writes at every level). Every other feature may only be "set" to 0 (it is absent).
- Checked as Kafka's controller does, every error INVALID_UPDATE_VERSION with the reason: a level
  below 0, an unknown feature, a level outside the supported range, a lower level without a
  downgrade type, a higher level with one, an unknown upgrade type (v1+: 1 upgrade, 2 safe
  downgrade, 3 unsafe downgrade; v0: allow_downgrade means safe downgrade).
- All or nothing: the first invalid update is the answer and nothing changes. validate_only (v1+)
  checks and changes nothing. The levels are stored by the controller and survive restarts; the
  finalized features epoch is the metadata image version that set them.
- The answer: the top-level error, repeated for every feature in v0-1 (as Kafka's response).
  timeout_ms is not needed (the answer comes once this broker applied the change).
- Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level, and for each
  feature before v2); nothing changes.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.controller.messages import FeatureUpdate, FeatureUpgrade
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 57
VERSIONS = (0, 2)

UPGRADE_TYPES = {1: FeatureUpgrade.UPGRADE, 2: FeatureUpgrade.SAFE_DOWNGRADE, 3: FeatureUpgrade.UNSAFE_DOWNGRADE}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    names = [f.feature for f in req.feature_updates]
    code, message = ErrorCode.NONE, None
    try:
        authz.check_cluster(ctx, AclOperation.ALTER)
        updates = []
        for f in req.feature_updates:
            if ctx.version == 0:
                upgrade = FeatureUpgrade.SAFE_DOWNGRADE if f.allow_downgrade else FeatureUpgrade.UPGRADE
            else:
                found = UPGRADE_TYPES.get(f.upgrade_type)
                if found is None:
                    raise BrokerError(ErrorCode.INVALID_UPDATE_VERSION,
                                      f"invalid update version {f.max_version_level} for feature {f.feature}: "
                                      f"unknown upgrade type {f.upgrade_type}")
                upgrade = found
            updates.append(FeatureUpdate(f.feature, f.max_version_level, upgrade))
        await ctx.broker.update_features(updates, validate_only=bool(req.get("validate_only", False)))
    except BrokerError as e:
        code, message = e.code, e.message
    response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": code, "error_message": message}
    if ctx.version < 2:
        response["results"] = [{"feature": name, "error_code": code, "error_message": message} for name in names]
    return response
