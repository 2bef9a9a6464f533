"""ListConfigResources (KIP-1142; v0 was ListClientMetricsResources): the resources that have
configs, for Admin.listConfigResources and kafka-configs.sh --describe without a name.

- v1: resource_types lists the types wanted; empty means every type kshim has: TOPIC (2), every
  topic, internal ones included; BROKER (4), every live broker by id; CLIENT_METRICS (16), every
  client-metrics subscription (KIP-714); GROUP (32), every group with config overrides (as Kafka
  lists the groups that have configs). A type kshim has no configs for (BROKER_LOGGER) or an
  unknown one: UNSUPPORTED_VERSION for the whole request, as Kafka answers a type it does not
  support.
- v0 (ListClientMetricsResources) lists the client-metrics subscriptions.
- DESCRIBE_CONFIGS on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED), as Kafka checks.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from kshim.security.acls import AclOperation
from kshim.security.authz import cluster_allowed
from wire.errors import ErrorCode

API_KEY = 74
VERSIONS = (0, 1)

TOPIC = 2
BROKER = 4
CLIENT_METRICS = 16
GROUP = 32
SUPPORTED = (TOPIC, BROKER, CLIENT_METRICS, GROUP)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    if not cluster_allowed(ctx, AclOperation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "config_resources": []}
    subscriptions = sorted(ctx.broker.image.client_metrics)
    if ctx.version == 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "config_resources": [{"resource_name": name} for name in subscriptions]}
    types = list(req.resource_types) or list(SUPPORTED)
    if any(t not in SUPPORTED for t in types):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "config_resources": []}
    resources: list[dict[str, Any]] = []
    if TOPIC in types:
        resources += [{"resource_name": name, "resource_type": TOPIC} for name in sorted(ctx.broker.topics)]
    if BROKER in types:
        resources += [{"resource_name": str(b.node_id), "resource_type": BROKER}
                      for b in ctx.broker.image.alive_brokers()]
    if CLIENT_METRICS in types:
        resources += [{"resource_name": name, "resource_type": CLIENT_METRICS} for name in subscriptions]
    if GROUP in types:
        resources += [{"resource_name": group, "resource_type": GROUP} for group in sorted(ctx.broker.image.group_configs)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "config_resources": resources}
