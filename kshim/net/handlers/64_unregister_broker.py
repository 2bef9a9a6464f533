"""UnregisterBroker: forget a broker that is gone for good (Admin.unregisterBroker,
kafka-cluster.sh unregister).

- As Kafka's controller: the broker leaves every ISR it is in (partitions it led elect a new
  leader from the remaining ISR; if it was the last in-sync replica the partition stays offline
  with it as its last ISR member), and its registration is forgotten: it no longer shows in
  Metadata or DescribeCluster, and its replicas show as offline. Replica assignments are not
  changed (CreatePartitions' explicit assignments and new topics no longer pick it).
- A live broker may be unregistered too (Kafka does not refuse it): its next heartbeat finds it
  unknown and it registers again, with a higher broker epoch.
- An id that is not registered: BROKER_ID_NOT_REGISTERED. The controller unreachable: its error.
- Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 64
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    try:
        authz.check_cluster(ctx, AclOperation.ALTER)
        await ctx.broker.unregister_broker(req.broker_id)
    except BrokerError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None}
