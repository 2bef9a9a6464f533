"""DeleteTopics: delete topics and their data, each one independently of the others.

- v1-5 name topics in `topic_names`; v6 lists `topics`, each with a name or a topic id.
- An unknown name is UNKNOWN_TOPIC_OR_PARTITION; an unknown id is UNKNOWN_TOPIC_ID (answered with a
  null name). Giving both a name and a non-zero id for one entry is INVALID_REQUEST.
- A topic named twice is deleted once; the later entries answer UNKNOWN_TOPIC_OR_PARTITION (or
  UNKNOWN_TOPIC_ID), as they would if sent after the first.
- Deletion is immediate: the partition directories are removed before the response, and waiting
  fetches are woken. timeout_ms is ignored.
- delete.topic.enable=false (a broker config) refuses every topic after its ACL check:
  TOPIC_DELETION_DISABLED, INVALID_REQUEST before v3 (as Kafka's controller answers).
- v6 answers carry the topic id of each deleted topic (and of each topic found by name).
- ACLs (docs/security.md): DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED (also a topic
  asked for by an id the principal may not DESCRIBE, as Kafka does).
- controller_mutation_rate (client quotas): a topic's partitions count; from v5 a client past its
  quota gets THROTTLING_QUOTA_EXCEEDED for the topic, and throttle_time_ms says how long to wait.
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Mapping

from construct import Container

from kshim.cluster.image import refuse_internal
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext
from kshim.net.handlers.throttling import MutationQuota
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode
from wire.primitives import ZERO_UUID

log = logging.getLogger("kshim.handlers.delete_topics")

API_KEY = 20
VERSIONS = (1, 6)


async def _delete(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
                  quota: MutationQuota) -> dict[str, Any]:
    broker = ctx.broker
    topic_id = topic_id or ZERO_UUID
    if name is not None and topic_id != ZERO_UUID:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "give either a topic name or a topic id, not both")
    if name is None:
        topic = broker.topics_by_id.get(topic_id)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {topic_id} does not exist")
        name = topic.name
        if not authz.topic_allowed(ctx, AclOperation.DESCRIBE, name):
            raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not DESCRIBE topic id {topic_id}")
    else:
        if not authz.topic_allowed(ctx, AclOperation.DELETE, name):
            raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not DELETE topic {name!r}")
        topic = broker.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    if not authz.topic_allowed(ctx, AclOperation.DELETE, name):
        raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.principal} may not DELETE topic {name!r}")
    refuse_internal(name, "delete")
    if not broker.config.delete_topic_enable:
        raise BrokerError(ErrorCode.TOPIC_DELETION_DISABLED if ctx.version >= 3 else ErrorCode.INVALID_REQUEST,
                          "topic deletion is disabled (delete.topic.enable=false)")
    found_id = topic.topic_id
    quota.record(len(topic.partitions))
    await broker.delete_topic(name)
    return {"name": name, "topic_id": found_id, "error_code": ErrorCode.NONE, "error_message": None}


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics or ()]
    else:
        wanted = [(name, ZERO_UUID) for name in req.topic_names or ()]
    responses: list[dict[str, Any]] = []
    quota = MutationQuota(ctx, strict_since=5)
    for name, topic_id in wanted:
        try:
            responses.append(await _delete(ctx, name, topic_id, quota))
        except BrokerError as e:
            responses.append({"name": name, "topic_id": topic_id or ZERO_UUID,
                              "error_code": e.code, "error_message": e.message})
        except OSError as e:
            log.exception("deleting topic %r failed", name)
            responses.append({"name": name, "topic_id": topic_id or ZERO_UUID,
                              "error_code": ErrorCode.KAFKA_STORAGE_ERROR,
                              "error_message": f"deleting the topic failed: {e}"})
    return {"throttle_time_ms": quota.finish(), "responses": responses}
