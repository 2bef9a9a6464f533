"""DescribeCluster: the cluster id, the controller and the brokers, as the admin client's describeCluster shows.

- The live brokers (node id, advertised host, port, no rack). controller_id is this broker, which
  forwards to the controller, or -1 while the controller is unreachable (as Metadata).
- v1 `endpoint_type`: 1 (brokers) is answered; 2 (controllers) is UNSUPPORTED_ENDPOINT_TYPE, as a
  broker that is not a controller endpoint answers; any other value is INVALID_REQUEST.
- v2 `include_fenced_brokers` (KIP-1073): also the registered brokers the controller fenced
  (down or not heartbeating), with is_fenced true; without it only the live ones.
- cluster_authorized_operations is always "not requested" (INT32_MIN): kshim has no ACLs.
- cluster_authorized_operations: the bits of what the principal may do on the cluster, when
  asked for (every operation without an authorizer); otherwise INT32_MIN.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from kshim.net.handlers.endpoints import endpoint
from kshim.security import authz
from kshim.security.acls import ResourceType
from wire.errors import ErrorCode

API_KEY = 60
VERSIONS = (0, 2)

BROKERS = 1
CONTROLLERS = 2


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    broker = ctx.broker
    response: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": BROKERS,
        "cluster_id": broker.cluster_id,
        # a live broker that forwards to the controller, -1 while it cannot reach it (see Metadata)
        "controller_id": broker.node_id if broker.controller.connected else -1,
        "brokers": [{"broker_id": b.node_id, "host": host, "port": port, "rack": None, "is_fenced": not b.alive}
                    for b in sorted(broker.image.brokers.values(), key=lambda b: b.node_id)
                    if b.alive or req.get("include_fenced_brokers", False) for host, port in [endpoint(ctx, b)]],
        "cluster_authorized_operations": authz.operations(
            ctx, ResourceType.CLUSTER, "kafka-cluster", bool(req.get("include_cluster_authorized_operations", False))),
    }
    endpoint_type = req.get("endpoint_type", BROKERS)
    if endpoint_type != BROKERS:
        if endpoint_type == CONTROLLERS:
            code, message = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "this broker does not serve controller endpoints"
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"unknown endpoint type {endpoint_type}"
        response.update(error_code=code, error_message=message, endpoint_type=endpoint_type,
                        controller_id=-1, brokers=[])
    return response
