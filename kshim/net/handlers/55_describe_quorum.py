"""DescribeQuorum: the metadata quorum (kafka-metadata-quorum.sh, Admin.describeMetadataQuorum).

kshim has no KRaft log: its controller decides alone and publishes numbered metadata images. It
answers as a quorum of one voter, with real numbers:
- topic __cluster_metadata partition 0 only (as Kafka: anything else, or more than one topic or
  partition, is UNKNOWN_TOPIC_OR_PARTITION for each asked partition);
- leader_id: the controller's node id; leader_epoch: how many times the controller has started
  (a restart is a new election); high_watermark: its current image version;
- current_voters: the controller, its log end offset the image version, fetched and caught up now;
- observers: the live brokers, each with the image version it last reported having applied
  (heartbeats), the time of that heartbeat, and the last time it had the latest image (-1: never).
- v2: replica_directory_id is the zero UUID (no directories); nodes is empty: the controller has no
  Kafka listener (brokers forward to it).
- The controller unreachable: its error (NOT_CONTROLLER, REQUEST_TIMED_OUT) at the top level.
- Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level).
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.controller.messages import QuorumReplica
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode
from wire.primitives import ZERO_UUID

API_KEY = 55
VERSIONS = (0, 2)

METADATA_TOPIC = "__cluster_metadata"


def _replica(r: QuorumReplica) -> dict[str, Any]:
    return {"replica_id": r.node_id, "replica_directory_id": ZERO_UUID, "log_end_offset": r.log_end_offset,
            "last_fetch_timestamp": r.last_fetch_ms, "last_caught_up_timestamp": r.last_caught_up_ms}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    if not authz.cluster_allowed(ctx, AclOperation.DESCRIBE):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": f"{ctx.principal} may not DESCRIBE the cluster", "nodes": [], "topics": []}
    topics = list(req.topics)
    if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1 \
            or topics[0].partitions[0].partition_index != 0:
        return {"error_code": ErrorCode.NONE, "error_message": None, "nodes": [], "topics": [
            {"topic_name": t.topic_name, "partitions": [
                {"partition_index": p.partition_index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                 "error_message": None, "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                 "current_voters": [], "observers": []} for p in t.partitions]} for t in topics]}
    try:
        q = await ctx.broker.describe_quorum()
    except BrokerError as e:
        return {"error_code": e.code, "error_message": e.message, "nodes": [], "topics": []}
    return {"error_code": ErrorCode.NONE, "error_message": None, "nodes": [], "topics": [
        {"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "leader_id": q.leader_id, "leader_epoch": q.leader_epoch, "high_watermark": q.high_watermark,
            "current_voters": [_replica(r) for r in q.voters], "observers": [_replica(r) for r in q.observers]}]}]}
