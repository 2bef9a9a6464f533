"""Helpers shared by the group handlers (not a handler module: no NN_ prefix)."""
from __future__ import annotations

from construct import Container

from kshim.clock import SYSTEM
from kshim.coordinator.groups.offsets_format import OffsetEntry
from kshim.net.handlers import RequestContext
from wire.errors import ErrorCode


def client_host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def instance_id(req: Container, version: int, since: int) -> str | None:
    return req.get("group_instance_id") if version >= since else None


def commit_response(req: Container, codes: dict) -> dict:
    """OffsetCommit / TxnOffsetCommit answer: an error code per requested partition."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, p.partition_index)]}
                                        for p in t.partitions]} for t in req.topics]}


def commit_entries(req: Container, code: ErrorCode, metadata_limit: int, epoch_since: int, version: int) -> tuple[dict, list]:
    """OffsetCommit / TxnOffsetCommit requests: (error code per partition, [(partition, entry)] to
    write). `code` is the group's answer; a partition whose metadata is too long is refused alone.
    The committed leader epoch is read from `epoch_since` on."""
    codes: dict = {}
    updates = []
    now = SYSTEM.wall_ms()
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if code:
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
