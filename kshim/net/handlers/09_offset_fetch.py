"""OffsetFetch: a group's committed offsets, from the coordinator's memory (loaded from
`__consumer_offsets` when it became the coordinator).

- topics null (v2+) means every partition the group has committed; a partition without a
  committed offset answers offset -1, empty metadata.
- v8+ asks for several groups at once, each with its own error.
- require_stable (v7+): a partition whose commit is still waiting to be COMMITTED, or belongs to
  a transaction not yet ended (TxnOffsetCommit), answers UNSTABLE_OFFSET_COMMIT; the client retries.
- v9 member_id / member_epoch of a consumer group (KIP-848) member: UNKNOWN_MEMBER_ID,
  STALE_MEMBER_EPOCH (older epoch), FENCED_MEMBER_EPOCH (newer); no member id and epoch -1 (admin
  clients) are always served. Classic groups do not check them.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE: v1 reports them
  per partition, v2+ in the group's error code.
- v10 names topics by id (KIP-848): an id this broker's metadata does not know is UNKNOWN_TOPIC_ID
  for its partitions; asked for every topic, the group's offsets of topics that no longer exist
  are left out (they have no id to be named by).
- ACLs (docs/security.md): DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; partitions of
  topics the principal may not DESCRIBE answer TOPIC_AUTHORIZATION_FAILED when asked for, and are
  left out of "all topics".
"""
from __future__ import annotations

import uuid

from construct import Container

from kshim.coordinator.groups.offsets_format import OffsetEntry
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import topic_key
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 9
VERSIONS = (1, 10)
BY_ID = 10  # topics named by id from this version


def _partition(index: int, entry: OffsetEntry | None, error: ErrorCode, v: int) -> dict:
    return {"partition_index": index, "committed_offset": entry.offset if entry else -1,
            "committed_leader_epoch": entry.leader_epoch if entry else -1,
            "metadata": entry.metadata if entry else "", "error_code": error}


def _group(ctx: RequestContext, group_id: str, topics: list | None, require_stable: bool, v: int,
           member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, list]:
    coordinator = ctx.groups
    by_id = ctx.broker.topics_by_id if v >= BY_ID else None
    unknown: list[tuple[uuid.UUID, int]] = []
    wanted: list[tuple[str, int]] | None = None
    if topics is not None:
        wanted = []
        for t in topics:
            key = topic_key(t, by_id)
            if isinstance(key, uuid.UUID):
                unknown.extend((key, i) for i in t.partition_indexes)
            else:
                wanted.extend((key, i) for i in t.partition_indexes)
    if not authz.group_allowed(ctx, AclOperation.DESCRIBE, group_id):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        if v == 1 and wanted is not None:
            return ErrorCode.NONE, [{"name": t.name, "partitions": [_partition(i, None, code, v) for i in t.partition_indexes]}
                                    for t in topics or ()]
        return code, []
    code, rows = coordinator.fetch(group_id, wanted, require_stable, member_id, member_epoch)
    denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, {tp[0] for tp, _, _ in rows})
    if denied:
        if wanted is None:  # all topics: leave out those the principal may not see
            rows = [row for row in rows if row[0][0] not in denied]
        else:
            rows = [(tp, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) if tp[0] in denied else (tp, entry, error)
                    for tp, entry, error in rows]
    if code:
        if v == 1 and wanted is not None:
            rows = [(tp, None, code) for tp in wanted]
        else:
            return code, []
    by_topic: dict[str | uuid.UUID, list] = {}
    for (topic, index), entry, error in rows:
        by_topic.setdefault(topic, []).append(_partition(index, entry, error, v))
    for topic_id, index in unknown:
        by_topic.setdefault(topic_id, []).append(_partition(index, None, ErrorCode.UNKNOWN_TOPIC_ID, v))
    if by_id is None:
        return ErrorCode.NONE, [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    names = ctx.broker.topics
    out = []
    for key, parts in by_topic.items():
        if isinstance(key, uuid.UUID):
            out.append({"topic_id": key, "partitions": parts})
        elif key in names:  # a topic deleted since its offsets were committed has no id: left out
            out.append({"topic_id": names[key].topic_id, "partitions": parts})
    return ErrorCode.NONE, out


async def handle(ctx: RequestContext, req: Container) -> Response:
    v = ctx.version
    stable = bool(req.get("require_stable", False)) if v >= 7 else False
    if v < 8:
        code, topics = _group(ctx, req.group_id, req.topics, stable, v)
        return {"throttle_time_ms": 0, "topics": topics, "error_code": code}
    groups = []
    for g in req.groups:
        member = (g.get("member_id"), g.get("member_epoch", -1)) if v >= 9 else (None, -1)
        code, topics = _group(ctx, g.group_id, g.topics, stable, v, *member)
        groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
    return {"throttle_time_ms": 0, "groups": groups}
