"""Helpers shared by the group handlers (not a handler module: no NN_ prefix)."""
from __future__ import annotations


def client_host(ctx) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def instance_id(req, version: int, since: int):
    return req.get("group_instance_id") if version >= since else None
