"""Helpers shared by the group handlers (not a handler module: no NN_ prefix)."""
from __future__ import annotations

import uuid
from typing import Mapping

from construct import Container

from kshim.cluster.image import TopicInfo

from kshim.clock import SYSTEM
from kshim.coordinator.groups.consumer_group import HeartbeatResult
from kshim.coordinator.groups.offsets_format import OffsetEntry
from kshim.net.handlers import RequestContext
from wire.errors import ErrorCode


def heartbeat_answer(result: HeartbeatResult) -> dict:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat answer: the two share these fields."""
    assignment = None if result.assignment is None else {"topic_partitions": [
        {"topic_id": t, "partitions": ps} for t, ps in result.assignment.items()]}
    return {"throttle_time_ms": 0, "error_code": result.error_code, "error_message": result.error_message,
            "member_id": result.member_id, "member_epoch": result.member_epoch,
            "heartbeat_interval_ms": result.heartbeat_interval_ms, "assignment": assignment}


def client_host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def instance_id(req: Container, version: int, since: int) -> str | None:
    return req.get("group_instance_id") if version >= since else None


def topic_key(t: Container, by_id: Mapping[uuid.UUID, TopicInfo] | None) -> str | uuid.UUID:
    """A requested topic's name; with `by_id` (requests naming topics by id, OffsetCommit and
    OffsetFetch v10) the name of its id, or the id itself when no topic has it."""
    if by_id is None:
        return t.name
    info = by_id.get(t.topic_id)
    return info.name if info is not None else t.topic_id


def topic_fields(t: Container) -> dict:
    """The topic's name or id, as the request gave it, for its answer."""
    return {"topic_id": t.topic_id} if "topic_id" in t else {"name": t.name}


def commit_response(req: Container, codes: dict, by_id: Mapping[uuid.UUID, TopicInfo] | None = None) -> dict:
    """OffsetCommit / TxnOffsetCommit answer: an error code per requested partition."""
    return {"throttle_time_ms": 0, "topics": [
        {**topic_fields(t), "partitions": [{"partition_index": p.partition_index,
                                            "error_code": codes[(topic_key(t, by_id), p.partition_index)]}
                                           for p in t.partitions]} for t in req.topics]}


def commit_entries(req: Container, code: ErrorCode, metadata_limit: int, epoch_since: int, version: int,
                   by_id: Mapping[uuid.UUID, TopicInfo] | None = None) -> tuple[dict, list]:
    """OffsetCommit / TxnOffsetCommit requests: (error code per partition, [(partition, entry)] to
    write). `code` is the group's answer; a partition whose metadata is too long is refused alone.
    The committed leader epoch is read from `epoch_since` on. With `by_id` topics are named by id:
    an id no topic has is UNKNOWN_TOPIC_ID for its partitions, before any group error (Kafka
    resolves ids before asking the coordinator)."""
    codes: dict = {}
    updates = []
    now = SYSTEM.wall_ms()
    for t in req.topics:
        key = topic_key(t, by_id)
        for p in t.partitions:
            tp = (key, p.partition_index)
            metadata = p.committed_metadata or ""
            if isinstance(key, uuid.UUID):
                codes[tp] = ErrorCode.UNKNOWN_TOPIC_ID
            elif code:
                codes[tp] = code
            elif len(metadata.encode()) > metadata_limit:
                codes[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                codes[tp] = ErrorCode.NONE
                epoch = p.get("committed_leader_epoch", -1) if version >= epoch_since else -1
                updates.append((tp, OffsetEntry(p.committed_offset, epoch, metadata, now)))
    return codes, updates


def refuse_topics(codes: dict, updates: list, denied: set[str]) -> list:
    """TOPIC_AUTHORIZATION_FAILED for the partitions of `denied` topics, which are not written;
    the updates left to write."""
    for tp in codes:
        if tp[0] in denied:
            codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return [(tp, entry) for tp, entry in updates if tp[0] not in denied]
