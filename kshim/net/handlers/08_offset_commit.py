"""OffsetCommit (classic groups and simple consumers): committed offsets, durable.

- A member commits with its generation and member id: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (while the group waits for the leader's assignment;
  commits are accepted while it prepares a rebalance). Generation -1 with an Empty (or unknown)
  group is a simple consumer committing without membership.
- Each partition becomes a record of the group's `__consumer_offsets` partition (kshim's own
  format); the answer waits until the records are COMMITTED (acks=all), so an acknowledged commit
  survives a broker restart. The wait is an awaitable: the connection goes on reading.
- Metadata over 4096 bytes: OFFSET_METADATA_TOO_LARGE for that partition. Retention times
  (v2-4) are ignored: offsets of Empty groups expire after offsets.retention.minutes (7 days).
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE when this broker
  cannot answer for the group (clients find the coordinator again and retry).
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED for every
  partition; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

from construct import Container

from kshim.coordinator.groups import GroupCoordinator
from kshim.acls import AclOperation
from kshim.net.handlers import RequestContext, Response, authz
from kshim.net.handlers.group_common import commit_entries, commit_response, refuse_topics
from wire.errors import ErrorCode

API_KEY = 8
VERSIONS = (2, 9)


async def _write(coordinator: GroupCoordinator, req: Container, updates: list, codes: dict) -> dict:
    code = await coordinator.write(req.group_id, updates)
    for tp, _ in updates:
        codes[tp] = code
    return commit_response(req, codes)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    v = ctx.version
    if not req.group_id:
        code = ErrorCode.INVALID_GROUP_ID
    elif not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        code = coordinator.validate_commit(req.group_id, req.generation_id_or_member_epoch, req.member_id,
                                           req.get("group_instance_id") if v >= 7 else None)
    codes, updates = commit_entries(req, code, coordinator.config.offset_metadata_max_bytes, 6, v)
    if not code:  # the group's refusal (authorization included) answers every partition
        updates = refuse_topics(codes, updates, authz.denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics)))
    if not updates:
        return commit_response(req, codes)
    return _write(coordinator, req, updates, codes)
