"""Helpers shared by the group handlers (not a handler module: no NN_ prefix)."""
from __future__ import annotations


def client_host(ctx) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def instance_id(req, version: int, since: int):
    return req.get("group_instance_id") if version >= since else None


def commit_response(req, codes: dict) -> dict:
    """OffsetCommit / TxnOffsetCommit answer: an error code per requested partition."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": codes[(t.name, p.partition_index)]}
                                        for p in t.partitions]} for t in req.topics]}
