"""ShareAcknowledge (KIP-932): a share group member settles records it acquired, without fetching.

- Whole-request errors: INVALID_REQUEST for a missing group or member id,
  GROUP_AUTHORIZATION_FAILED without READ on the group; epoch 0 is INVALID_SHARE_SESSION_EPOCH
  (only ShareFetch opens a session), an unknown session SHARE_SESSION_NOT_FOUND, a wrong epoch
  INVALID_SHARE_SESSION_EPOCH; a good one advances the session's epoch. Epoch -1 acknowledges,
  then closes the session and releases the records the member still holds.
- Per partition, all of its batches or none: types 0 gap, 1 accept, 2 release, 3 reject, 4 renew
  (a fresh acquisition lock; v2's is_renew_ack); one type for a batch or one per offset, else
  INVALID_REQUEST; a record not ACQUIRED by this member INVALID_RECORD_STATE; UNKNOWN_TOPIC_ID,
  NOT_LEADER_OR_FOLLOWER (with the current leader), TOPIC_AUTHORIZATION_FAILED.
- The answer waits until the new state is COMMITTED in `__share_group_state` (through the share
  coordinator); a write that fails leaves the records as they were and answers its error.
- acquisition_lock_timeout_ms (v2) is the group's share.record.lock.duration.ms.
"""
from __future__ import annotations

import uuid

from construct import Container

from kshim.coordinator.share_partitions.sessions import FINAL_EPOCH, INITIAL_EPOCH
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.share_common import TopicPartition, ack_batches, check_request, denied, leader_of, node_endpoints
from wire.errors import ErrorCode

API_KEY = 79
VERSIONS = (1, 2)


def _error(code: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout_ms": 0,
            "responses": [], "node_endpoints": []}


async def handle(ctx: RequestContext, req: Container) -> Response:
    code, message = check_request(ctx, req)
    if code:
        return _error(code, message)
    if req.share_session_epoch == INITIAL_EPOCH:
        return _error(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    return _serve(ctx, req)


async def _serve(ctx: RequestContext, req: Container) -> dict:
    share = ctx.share
    group, member, epoch = req.group_id, req.member_id, req.share_session_epoch
    code, _session = share.sessions.use((group, member), epoch, share.clock.monotonic_ms())
    if code:
        return _error(code)
    acks = {(t.topic_id, p.partition_index): ack_batches(p.acknowledgement_batches)
            for t in req.topics for p in t.partitions}
    refused = denied(ctx, [tp[0] for tp in acks])
    codes: dict[TopicPartition, ErrorCode] = {}
    for tp, batches in acks.items():
        codes[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in refused else \
            await share.acknowledge(group, member, tp[0], tp[1], batches)
    if epoch == FINAL_EPOCH:
        closed = share.sessions.close((group, member))
        if closed is not None:
            await share.release_member(group, member, closed.partitions)
    topics: dict[uuid.UUID, list[dict]] = {}
    leaders: list[int] = []
    for tp, ack in codes.items():
        leader = leader_of(ctx, *tp) if ack == ErrorCode.NOT_LEADER_OR_FOLLOWER else {"leader_id": -1, "leader_epoch": -1}
        if leader["leader_id"] >= 0:
            leaders.append(leader["leader_id"])
        entry = {"partition_index": tp[1], "error_code": ack, "error_message": None, "current_leader": leader}
        topics.setdefault(tp[0], []).append(entry)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": share.lock_duration_ms(group),
            "responses": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
            "node_endpoints": node_endpoints(ctx, leaders)}
