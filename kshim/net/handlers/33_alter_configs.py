"""AlterConfigs: replace a topic's config overrides, each resource independently of the others.

- TOPIC (2): the given configs become the topic's whole set of overrides; every config left out
  goes back to its default (Kafka's semantics for this API; IncrementalAlterConfigs edits instead).
  Names and values are validated as a whole before anything changes: INVALID_CONFIG with the
  reason. A null value or a name given twice is INVALID_REQUEST. An unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION. The internal topics (__consumer_offsets, __transaction_state) are
  reconfigured like any other, as Kafka's KRaft brokers allow.
- BROKER (4), named "" (the cluster-wide default) or this broker's id: the given configs become
  that resource's whole set of dynamic broker settings (the topic-config defaults: log.retention.ms,
  compression.type, message.max.bytes, ...). A read-only (command-line) or unknown name is
  INVALID_CONFIG; another broker's id is INVALID_REQUEST. The controller stores them (they survive
  a restart) and every broker applies them to topics that do not override them.
- GROUP (32), any group id: the given configs become the group's whole set of overrides
  (kshim.configs.groups: names, types, and bounds against the broker's group settings as Kafka's
  GroupConfig.validate; INVALID_CONFIG otherwise); the controller stores them and the group
  coordinators apply them at the groups' next heartbeats. An empty name is INVALID_REQUEST.
- Other resource types are INVALID_REQUEST.
- A resource named twice in one request is INVALID_REQUEST for each entry.
- validate_only runs every check and changes nothing.
- New values apply at once to the topic's partitions (retention, segment rolling, max.message.bytes,
  timestamp type) and are stored so they survive a restart.
- ACLs (docs/security.md): ALTER_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED), the
  group (else GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster (else
  CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from typing import Any, Mapping

from construct import Container

from kshim.net.handlers import RequestContext
from kshim.security import authz
from kshim.security.acls import AclOperation
from kshim.net.handlers.config_resources import (BROKER, GROUP, alter_each, config_dict, target_broker, target_group,
                                                target_topic)
from wire.errors import ErrorCode

API_KEY = 33
VERSIONS = (0, 2)



async def _alter(ctx: RequestContext, resource: Container, validate_only: bool) -> None:
    authz.check_configs(ctx, resource.resource_type, resource.resource_name, AclOperation.ALTER_CONFIGS)
    configs = config_dict(resource.configs, ErrorCode.INVALID_REQUEST)
    if resource.resource_type == BROKER:
        await ctx.broker.set_broker_configs(target_broker(ctx, resource), configs, validate_only=validate_only)
        return
    if resource.resource_type == GROUP:
        await ctx.broker.set_group_configs(target_group(resource), configs, validate_only=validate_only)
        return
    name = target_topic(ctx, resource).name
    await ctx.broker.set_topic_configs(name, configs, validate_only=validate_only)


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    return await alter_each(req, lambda resource, validate_only: _alter(ctx, resource, validate_only))
