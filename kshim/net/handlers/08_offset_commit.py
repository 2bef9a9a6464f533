"""OffsetCommit (classic groups and simple consumers): committed offsets, durable.

- A member commits with its generation and member id: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (while the group waits for the leader's assignment;
  commits are accepted while it prepares a rebalance). Generation -1 with an Empty (or unknown)
  group is a simple consumer committing without membership.
- Each partition becomes a record of the group's `__consumer_offsets` partition (kshim's own
  format); the answer waits until the records are COMMITTED (acks=all), so an acknowledged commit
  survives a broker restart. The wait is an awaitable (the connection goes on reading); with no
  followers the records are COMMITTED as they are appended and the answer is immediate.
- Metadata over 4096 bytes: OFFSET_METADATA_TOO_LARGE for that partition. Retention times
  (v2-4) are ignored: offsets of Empty groups expire after offsets.retention.minutes (7 days).
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE when this broker
  cannot answer for the group (clients find the coordinator again and retry).
- v10 names topics by id (KIP-848): an id this broker's metadata does not know (never created, or
  deleted since) is UNKNOWN_TOPIC_ID for its partitions, before any group error; offsets are
  stored by topic name, so OffsetFetch below v10 sees them too. The answer echoes the ids.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED for every
  partition; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""
from __future__ import annotations

import uuid
from typing import Awaitable, Mapping

from construct import Container

from kshim.cluster.image import TopicInfo
from kshim.coordinator.groups import GroupCoordinator
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import commit_entries, commit_response, refuse_topics, topic_key
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 8
VERSIONS = (2, 10)
BY_ID = 10  # topics named by id from this version


def _answer(req: Container, updates: list, codes: dict, code: ErrorCode,
            by_id: Mapping[uuid.UUID, TopicInfo] | None) -> dict:
    for tp, _ in updates:
        codes[tp] = code
    return commit_response(req, codes, by_id)


async def _written(written: Awaitable[ErrorCode], req: Container, updates: list, codes: dict,
                   by_id: Mapping[uuid.UUID, TopicInfo] | None) -> dict:
    return _answer(req, updates, codes, await written, by_id)


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
    by_id = ctx.broker.topics_by_id if v >= BY_ID else None  # this image's ids, kept for the answer
    codes, updates = commit_entries(req, code, coordinator.config.offset_metadata_max_bytes, 6, v, by_id)
    if not code and authz.enabled(ctx):  # the group's refusal (authorization included) answers every partition
        names = {key for t in req.topics if isinstance(key := topic_key(t, by_id), str)}
        updates = refuse_topics(codes, updates, authz.denied_topics(ctx, AclOperation.READ, names))
    if not updates:
        return commit_response(req, codes, by_id)
    # answered at once when the offsets are COMMITTED as appended (no followers to wait for)
    written = coordinator.write_started(req.group_id, updates)
    if isinstance(written, ErrorCode):
        return _answer(req, updates, codes, written, by_id)
    return _written(written, req, updates, codes, by_id)
