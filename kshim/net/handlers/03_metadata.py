"""Metadata: brokers, cluster id, controller, and topics with their partitions and leaders.

- Brokers are given at their endpoints on the listener this request came in on.
- Everything comes from the metadata image this broker last applied: live brokers only, and per
  partition its leader, leader epoch, replicas, ISR and the replicas on fenced brokers (offline).
  A partition with no leader reports LEADER_NOT_AVAILABLE, and clients retry.

- topics null (v1+) lists every topic; an empty list lists none (v0 empty list means all).
- Unknown topics are auto-created with the broker defaults when the broker allows it and the
  request does (v4+ allow_auto_topic_creation; always for v0-3); otherwise
  UNKNOWN_TOPIC_OR_PARTITION. Illegal names get INVALID_TOPIC_EXCEPTION.
- v10+ topics may be asked for by topic id (name null): unknown ids get UNKNOWN_TOPIC_ID.
- Authorized-operations fields report "not provided" (INT32_MIN) unless asked for (v8+); asked
  for, the bits of the operations the principal may do on the topic (on the cluster, v8-10).
- ACLs (docs/security.md): a topic the principal may not DESCRIBE is left out of a list of all
  topics, and answered TOPIC_AUTHORIZATION_FAILED when asked for by name (by id: with no name).
  Auto-creation needs CREATE on the cluster or the topic, else TOPIC_AUTHORIZATION_FAILED.
- controller_id is this broker (it forwards admin requests to the controller), or -1 while the
  controller is unreachable: admin requests then answer NOT_CONTROLLER, and clients look for the
  controller again (kafka-python waits while it is -1). Auto-creation meanwhile answers the topic
  NOT_CONTROLLER too (retriable: producers and consumers refresh metadata and retry).
- v13 adds a top-level error code (KIP-1102, for REBOOTSTRAP_REQUIRED): kshim always answers
  NONE there; topic errors stay per topic.
- Without an authorizer, an answer that creates nothing (all topics, or names that all exist) is
  the same until the next metadata image: it is encoded once per image, request shape and
  listener, and sent as those bytes (kshim.net.protocol.Encoded).
"""
from __future__ import annotations

import uuid

from construct import Container

from kshim.cluster.image import TopicInfo
from kshim.errors import BrokerError
from kshim.net.handlers import RequestContext, Response
from kshim.net.handlers.endpoints import endpoint
from kshim.net.handlers.image_answers import ImageAnswers
from kshim.security import authz
from kshim.security.acls import AclOperation, ResourceType
from wire.errors import ErrorCode

API_KEY = 3
VERSIONS = (0, 13)


def broker_list(ctx: RequestContext) -> list[dict]:
    return [{"node_id": b.node_id, "host": host, "port": port, "rack": None}
            for b in ctx.broker.image.alive_brokers() for host, port in [endpoint(ctx, b)]]


def topic_entry(ctx: RequestContext, topic: TopicInfo, operations: bool = False) -> dict:
    alive = {b.node_id for b in ctx.broker.image.alive_brokers()}
    return {
        "error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "topic_authorized_operations": authz.operations(ctx, ResourceType.TOPIC, topic.name, operations),
        "partitions": [{
            "error_code": ErrorCode.NONE if p.leader in alive else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": p.index, "leader_id": p.leader if p.leader in alive else -1,
            "leader_epoch": p.leader_epoch, "replica_nodes": list(p.replicas), "isr_nodes": list(p.isr),
            "offline_replicas": [r for r in p.replicas if r not in alive],
        } for p in topic.partitions],
    }


def _error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": [],
            "topic_authorized_operations": authz.NOT_PROVIDED}


_ANSWERS = ImageAnswers(API_KEY, 256)  # request shapes kept per image (topic lists clients ask for)


def _shape(ctx: RequestContext, req: Container) -> tuple | None:
    """What the answer depends on besides the image, when it can be reused: None with an
    authorizer (it depends on the principal) or when a topic is asked for by id or is missing."""
    if authz.enabled(ctx):
        return None
    v, broker = ctx.version, ctx.broker
    if req.topics is None or (v == 0 and not req.topics):
        names = None
    else:
        names = tuple(asked.get("name") for asked in req.topics)
        if any(name is None or name not in broker.topics for name in names):
            return None
    return (v, names, bool(req.get("include_topic_authorized_operations", False)),
            bool(req.get("include_cluster_authorized_operations", False)),
            ctx.security.listener if ctx.security is not None else None, broker.controller.connected)


async def handle(ctx: RequestContext, req: Container) -> Response:
    shape = _shape(ctx, req)
    if shape is None:
        return await _answer(ctx, req)
    return await _ANSWERS.answer(ctx, shape, lambda: _answer(ctx, req))


async def _answer(ctx: RequestContext, req: Container) -> dict:
    broker = ctx.broker
    v = ctx.version
    ops = bool(req.get("include_topic_authorized_operations", False)) if v >= 8 else False
    if req.topics is None or (v == 0 and not req.topics):
        hidden = authz.denied_topics(ctx, AclOperation.DESCRIBE, broker.topics)
        topics = [topic_entry(ctx, t, ops) for t in broker.topics.values() if t.name not in hidden]
    else:
        allow_create = req.get("allow_auto_topic_creation", True) if v >= 4 else True
        topics = []
        for asked in req.topics:
            name = asked.get("name")
            if name is None:
                topic = broker.topics_by_id.get(asked.get("topic_id"))
                if topic is not None and not authz.topic_allowed(ctx, AclOperation.DESCRIBE, topic.name):
                    topics.append(_error_entry(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, asked.get("topic_id")))
                    continue
                topics.append(topic_entry(ctx, topic, ops) if topic else
                              _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, asked.get("topic_id")))
                continue
            if not authz.topic_allowed(ctx, AclOperation.DESCRIBE, name):
                topics.append(_error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                topic = broker.topics.get(name)
                if topic is None and allow_create:
                    if not authz.may_create_topic(ctx, name):
                        topics.append(_error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                        continue
                    topic = await broker.auto_create(name)
            except BrokerError as e:
                topics.append(_error_entry(name, e.code))
                continue
            topics.append(topic_entry(ctx, topic, ops) if topic else
                          _error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "brokers": broker_list(ctx),
        "cluster_id": broker.cluster_id,
        # clients send admin requests to the controller id they are given; any broker forwards
        # them to the controller, so name this (live) broker, as KRaft brokers do; -1 while the
        # controller is unreachable, so admin clients wait for one instead of failing on NOT_CONTROLLER
        "controller_id": broker.node_id if broker.controller.connected else -1,
        "topics": topics,
        "cluster_authorized_operations": authz.operations(
            ctx, ResourceType.CLUSTER, "kafka-cluster",
            bool(req.get("include_cluster_authorized_operations", False)) if 8 <= v <= 10 else False),
    }
