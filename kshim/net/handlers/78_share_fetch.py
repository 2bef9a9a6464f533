"""ShareFetch (KIP-932): a share group member acquires records from the partitions this broker
leads, acknowledging earlier ones in the same request. The work is the share partition manager's
(kshim/coordinator/share_partitions: state, sessions, durability); this module maps it.

- Whole-request errors (no partitions answered): INVALID_REQUEST for a missing group or member
  id or acknowledgements with epoch 0; GROUP_AUTHORIZATION_FAILED without READ on the group; the
  session's SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH or SHARE_SESSION_LIMIT_REACHED
  (see sessions.py).
- Epoch 0 opens a session with the named partitions (the member's records held under an older
  session are released); later epochs add the named partitions and drop the forgotten ones, and
  fetch every partition of the session; epoch -1 (any session of the member, whatever its epoch)
  fetches nothing, even from partitions it names: it applies its acknowledgements, answers their
  outcomes, then closes the session and releases what the member still holds.
- Piggy-backed acknowledgements are applied and durably written before the fetch (see
  ShareAcknowledge); their outcome is the partition's acknowledge_error_code.
- Per partition: UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER with the current leader (and its
  endpoint in node_endpoints), TOPIC_AUTHORIZATION_FAILED without READ on the topic.
- Records: whole batches from the log with the acquired ranges and their delivery counts; at most
  max_records records (whole batches may pass it in the batch-optimized mode, never in the
  record-limit mode, share_acquire_mode 1) and about max_bytes. With fewer than min_bytes
  acquired the request waits up to max_wait_ms for new or released records, while the connection
  goes on. An answer to epoch 0 lists every named partition; later ones only those with records,
  an error or an acknowledgement outcome.
- acquisition_lock_timeout_ms is the group's share.record.lock.duration.ms.
"""
from __future__ import annotations

import uuid

from construct import Container

from kshim.coordinator.share_partitions.manager import ShareFetchResult
from kshim.coordinator.share_partitions.sessions import FINAL_EPOCH, INITIAL_EPOCH
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_common import (TopicPartition, ack_batches, check_request, denied, leader_of,
                                             node_endpoints)
from wire.errors import ErrorCode

API_KEY = 78
VERSIONS = (1, 2)
RECORD_LIMIT = 1  # ShareAcquireMode: 0 batch-optimized, 1 record-limit


def _error(code: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout_ms": 0,
            "responses": [], "node_endpoints": []}


async def handle(ctx: RequestContext, req: Container) -> Response:
    code, message = check_request(ctx, req)
    if code:
        return _error(code, message)
    return _serve(ctx, req)


async def _serve(ctx: RequestContext, req: Container) -> dict:
    share = ctx.share
    group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
    named: list[TopicPartition] = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
    acks = {(t.topic_id, p.partition_index): ack_batches(p.acknowledgement_batches)
            for t in req.topics for p in t.partitions if p.acknowledgement_batches}
    forgotten = {(t.topic_id, i) for t in req.forgotten_topics_data for i in t.partitions}
    now = share.clock.monotonic_ms()
    if epoch == INITIAL_EPOCH:
        if acks:
            return _error(ErrorCode.INVALID_REQUEST, "acknowledgements in a request opening a share session")
        code, session, gone = share.sessions.open((group, member), named, now)
        for old in gone:
            await share.release_member(old.key[0], old.key[1], old.partitions)
        if code or session is None:
            return _error(code)
        for tp in named:  # a session opening: see offsets altered while the group was empty
            await share.load(group, *tp, refresh=True)
        fetch = named
    else:
        code, session = share.sessions.use((group, member), epoch, now)
        if code or session is None:
            return _error(code)
        if epoch == FINAL_EPOCH:
            fetch = []  # Kafka's final context: the partitions it names are not fetched, nor is it an error
        else:
            for tp in named:
                session.partitions.setdefault(tp, None)
            for tp in forgotten:
                session.partitions.pop(tp, None)
            fetch = list(session.partitions)
    refused = denied(ctx, [tp[0] for tp in set(fetch) | set(acks)])
    ack_codes: dict[TopicPartition, ErrorCode] = {}
    for tp, batches in acks.items():
        ack_codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in refused else \
            await share.acknowledge(group, member, tp[0], tp[1], batches)
    if epoch == FINAL_EPOCH:
        closed = share.sessions.close((group, member))
        if closed is not None:
            await share.release_member(group, member, closed.partitions)
    allowed = [tp for tp in fetch if tp[0] not in refused]
    results: dict[TopicPartition, ShareFetchResult] = {tp: ShareFetchResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                                       for tp in fetch if tp[0] in refused}
    if allowed:
        wait = 0 if any(ack_codes.values()) else req.max_wait_ms
        got = await share.fetch(group, member, allowed, wait, req.min_bytes, req.max_bytes, req.max_records,
                                strict=req.get("share_acquire_mode", 0) == RECORD_LIMIT)
        results.update(zip(allowed, got))
    full = epoch == INITIAL_EPOCH
    order = list(dict.fromkeys(fetch + list(acks)))
    topics: dict[uuid.UUID, list[dict]] = {}
    leaders: list[int] = []
    for tp in order:
        result = results.get(tp, ShareFetchResult())
        ack = ack_codes.get(tp, ErrorCode.NONE)
        if not full and tp not in acks and not result.acquired and not result.error:
            continue
        moved = ErrorCode.NOT_LEADER_OR_FOLLOWER in (result.error, ack)
        leader = leader_of(ctx, *tp) if moved else {"leader_id": -1, "leader_epoch": -1}
        if leader["leader_id"] >= 0:
            leaders.append(leader["leader_id"])
        entry = {"partition_index": tp[1], "error_code": result.error, "error_message": None,
                 "acknowledge_error_code": ack, "acknowledge_error_message": None,
                 "current_leader": leader, "records": result.records or b"",
                 "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                       "delivery_count": a.delivery_count} for a in result.acquired]}
        topics.setdefault(tp[0], []).append(entry)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": share.lock_duration_ms(group),
            "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
            "node_endpoints": node_endpoints(ctx, leaders)}
