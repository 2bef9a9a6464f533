"""What the inter-broker share-state APIs (83-86) share (not a handler module): CLUSTER_ACTION
(brokers only, as Kafka asks), else CLUSTER_AUTHORIZATION_FAILED for every partition; one answer
per partition in the request's order."""
from __future__ import annotations

from typing import Awaitable, Callable

from construct import Container

from kshim.coordinator.share_partitions.coordinator import StateKey
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode


async def per_partition(ctx: RequestContext, req: Container,
                        serve: Callable[[StateKey, Container], Awaitable[dict]]) -> dict:
    refused = not authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if refused:
                parts.append({"partition": p.partition, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
            else:
                parts.append({"partition": p.partition, **await serve((req.group_id, t.topic_id, p.partition), p)})
        results.append({"topic_id": t.topic_id, "partitions": parts})
    return {"results": results}
