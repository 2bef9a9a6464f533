"""ShareGroupHeartbeat (KIP-932): a share consumer joins, heartbeats and leaves its share group.

- v1 (Kafka 4.1+'s stable version; v0 was early access and is not served): the client generates
  its member id (empty: INVALID_REQUEST). Member epoch 0 joins with SubscribedTopicNames (required
  then), -1 leaves (the answer's epoch is -1); another epoch must be the member's current one,
  else FENCED_MEMBER_EPOCH; an unknown member: UNKNOWN_MEMBER_ID. Request checks as Kafka:
  INVALID_REQUEST with a message.
- The coordinator's `simple` assignor (Kafka's SimpleAssignor) spreads the subscribed topics'
  partitions so that every partition has a member; several members may share one (see
  `kshim.coordinator.groups.share_group`). The assignment (topic ids) is answered when joining and
  whenever it changed; null otherwise.
- Heartbeat interval and session timeout: the group's share.heartbeat.interval.ms and
  share.session.timeout.ms (GROUP configs), else the broker's group.share.* settings (5 s, 45 s);
  a member silent for the session timeout is fenced and its partitions reassigned. A join past
  group.share.max.size (200): GROUP_MAX_SIZE_REACHED.
- A heartbeat that changed the group is answered once the group's record is COMMITTED in
  `__consumer_offsets`; a coordinator that takes over loads the group, so members go on under
  their epochs.
- A group id used by a classic or consumer group: GROUP_ID_NOT_FOUND ("is not a share group"), as
  Kafka. NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE like the other
  group APIs.
- The finalized feature share.version at 0 (UpdateFeatures): UNSUPPORTED_VERSION, as Kafka with
  share groups disabled.
- ACLs (docs/security.md): READ on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on every
  subscribed topic name, else TOPIC_AUTHORIZATION_FAILED.
"""
from __future__ import annotations

from construct import Container

from kshim.cluster.image import SHARE_VERSION
from kshim.coordinator.groups.consumer_group import HeartbeatResult
from kshim.coordinator.groups.share_group import validate_share_heartbeat
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.group_common import client_host, heartbeat_answer
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 76
VERSIONS = (1, 1)


async def handle(ctx: RequestContext, req: Container) -> Response:
    coordinator = ctx.groups
    if ctx.broker.image.feature(SHARE_VERSION) < 1:
        return heartbeat_answer(HeartbeatResult(ErrorCode.UNSUPPORTED_VERSION, "share groups are disabled (share.version 0)"))
    names = None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
    code, message = validate_share_heartbeat(group_id=req.group_id, member_id=req.member_id,
                                             member_epoch=req.member_epoch, rack_id=req.rack_id,
                                             subscribed_topic_names=names)
    if not code and not authz.group_allowed(ctx, AclOperation.READ, req.group_id):
        code, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{ctx.principal} may not READ group {req.group_id!r}"
    if not code and names:
        denied = authz.denied_topics(ctx, AclOperation.DESCRIBE, names)
        if denied:
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to describe topics {sorted(denied)}"
    if not code:
        code = coordinator.check(req.group_id)
    if code:
        return heartbeat_answer(HeartbeatResult(code, message))
    code, group = coordinator.share_group(req.group_id, create=req.member_epoch == 0)
    if code or group is None:
        return heartbeat_answer(HeartbeatResult(code, f"Group {req.group_id} is not a share group."
                                       if req.group_id in coordinator.groups else f"Group {req.group_id} not found."))
    configs = coordinator.group_config(req.group_id)
    result = group.share_heartbeat(
        coordinator.clock(), member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
        subscribed_topic_names=names, client_id=ctx.header.client_id or "", client_host=client_host(ctx),
        topics=coordinator.topics_snapshot(), session_timeout_ms=configs.share_session_timeout_ms,
        heartbeat_interval_ms=configs.share_heartbeat_interval_ms, max_size=coordinator.settings.share_max_size)
    code = await coordinator.store_share_group(group)
    if code and not result.error_code:
        return heartbeat_answer(HeartbeatResult(code, "the group's state could not be stored"))
    return heartbeat_answer(result)
