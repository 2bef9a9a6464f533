"""What ShareFetch and ShareAcknowledge share (not a handler module: no NN_ prefix): request
checks, the session step, acknowledgement batches, and a partition's current leader for
NOT_LEADER_OR_FOLLOWER answers with the endpoints of those leaders."""
from __future__ import annotations

import uuid
from typing import Iterable

from construct import Container

from kshim.coordinator.share_partitions.state import AckBatch
from kshim.net.handlers import RequestContext
from kshim.net.handlers.endpoints import endpoint
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

TopicPartition = tuple[uuid.UUID, int]


def check_request(ctx: RequestContext, req: Container) -> tuple[ErrorCode, str | None]:
    """The whole request's error: a group or member id missing, or no READ on the group."""
    if not req.group_id:
        return ErrorCode.INVALID_REQUEST, "the group id is missing"
    if not req.member_id:
        return ErrorCode.INVALID_REQUEST, "the member id is missing"
    if not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    return ErrorCode.NONE, None


def denied(ctx: RequestContext, topic_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The topic ids this principal may not READ (unknown ids are left to UNKNOWN_TOPIC_ID)."""
    if not authz.enabled(ctx):
        return set()
    names = {tid: t.name for tid in set(topic_ids) if (t := ctx.broker.topics_by_id.get(tid)) is not None}
    refused = authz.denied_topics(ctx, AclOperation.READ, set(names.values()))
    return {tid for tid, name in names.items() if name in refused}


def ack_batches(batches: Iterable[Container]) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]


def leader_of(ctx: RequestContext, topic_id: uuid.UUID, index: int) -> dict:
    topic = ctx.broker.topics_by_id.get(topic_id)
    if topic is None or not 0 <= index < len(topic.partitions):
        return {"leader_id": -1, "leader_epoch": -1}
    info = topic.partitions[index]
    return {"leader_id": info.leader, "leader_epoch": info.leader_epoch}


def node_endpoints(ctx: RequestContext, leaders: Iterable[int]) -> list[dict]:
    out = []
    for node_id in sorted(set(leaders)):
        node = ctx.broker.image.brokers.get(node_id)
        if node is not None:
            host, port = endpoint(ctx, node)
            out.append({"node_id": node_id, "host": host, "port": port, "rack": None})
    return out
