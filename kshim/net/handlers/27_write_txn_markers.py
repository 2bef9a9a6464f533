"""WriteTxnMarkers: a transaction coordinator on another broker ends a transaction on partitions
this broker leads. Each partition gets a COMMIT or ABORT control batch with the producer's id
and epoch, answered once COMMITTED (as Kafka writes markers with acks=all).

- NOT_LEADER_OR_FOLLOWER where this broker does not lead; UNKNOWN_TOPIC_OR_PARTITION for a
  partition that does not exist; INVALID_PRODUCER_EPOCH when the partition already saw a newer
  producer epoch, TRANSACTION_COORDINATOR_FENCED when it saw markers from a newer coordinator.
- A marker on a `__consumer_offsets` partition makes that transaction's offset commits visible
  (COMMIT) or drops them (ABORT).
- v2 names the marker's transaction version (KIP-1228): 0 and 1 (and v1 requests) as above; 2
  means the coordinator bumped the producer epoch for this marker, so a marker whose epoch is not
  newer than the partition's (a late retry) is INVALID_PRODUCER_EPOCH. kshim's own coordinators
  write version 1 markers (v1 requests).
- Admins send it too: Kafka's Admin.abortTransaction (`kafka-transactions.sh abort`) ends a hanging
  transaction by writing an ABORT marker with the producer id and epoch and coordinator epoch that
  DescribeProducers shows for the partition.
- ACLs (docs/security.md): ALTER on the cluster (an admin) or CLUSTER_ACTION (brokers), as Kafka
  checks, else CLUSTER_AUTHORIZATION_FAILED for every partition.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.transactions.markers import REQUEST_TIMEOUT_S, write_here
from kshim.net.handlers import RequestContext, Response
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 27
VERSIONS = (1, 2)  # Kafka 4 removed v0 (KIP-896)


async def _answer(ctx: RequestContext, req: Container) -> dict:
    out = []
    refused = not (authz.cluster_allowed(ctx, AclOperation.ALTER) or authz.cluster_allowed(ctx, AclOperation.CLUSTER_ACTION))
    for marker in req.markers:
        tps = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        codes = dict.fromkeys(tps, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) if refused else await write_here(
            ctx.broker.replica_manager, marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch, tps, REQUEST_TIMEOUT_S,
            marker.get("transaction_version", 1) if ctx.version >= 2 else 1)
        out.append({"producer_id": marker.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": codes[(t.name, p)]}
                                            for p in t.partition_indexes]} for t in marker.topics]})
    return {"markers": out}


async def handle(ctx: RequestContext, req: Container) -> Response:
    return _answer(ctx, req)
