"""DescribeConfigs: report topic configs and a few static broker settings.

- TOPIC (2): every topic config kshim knows (kshim.configs.TOPIC_CONFIGS: Kafka 4's topic configs
  and kshim's own) with its effective value; source DYNAMIC_TOPIC_CONFIG (1) when the topic
  overrides it, DYNAMIC_BROKER_CONFIG (2) / DYNAMIC_DEFAULT_BROKER_CONFIG (3) when this broker's /
  the cluster-wide dynamic setting of its broker synonym gives it, STATIC_BROKER_CONFIG (4) when
  the command line (--min-insync-replicas, ...) gives it a value other than the default,
  DEFAULT_CONFIG (5) otherwise. None is read-only or sensitive. An invalid name is INVALID_TOPIC_EXCEPTION, an unknown topic
  UNKNOWN_TOPIC_OR_PARTITION.
- BROKER (4) named "" or this broker's node id: the command line's settings (read-only,
  STATIC_BROKER_CONFIG), then the broker synonym of every topic config (log.retention.ms,
  compression.type, message.max.bytes, ...) with its source: this broker's dynamic setting (2),
  the cluster-wide dynamic default (3), the command line (4) or Kafka's default (5); those are
  dynamic (not read-only) except kshim's own. Another node id is INVALID_REQUEST.
- CLIENT_METRICS (16): a client-metrics subscription's configs as set (metrics, interval.ms, match),
  source CLIENT_METRICS_CONFIG (7), as Kafka lists them; none for a subscription that does not
  exist; an empty name is INVALID_REQUEST. DESCRIBE_CONFIGS on the cluster.
- GROUP (32) named by any group id (Kafka 4's group configs, kshim.configs.groups): every group
  config with its effective value, source GROUP_CONFIG (8) when the group overrides it, else
  DEFAULT_CONFIG (5) with the broker's group setting (group.share.session.timeout.ms, ...); an
  empty name is INVALID_REQUEST. ACL: DESCRIBE_CONFIGS on the group, else GROUP_AUTHORIZATION_FAILED.
- Other resource types (BROKER_LOGGER, ...) are INVALID_REQUEST.
- `configuration_keys` filters by name; null or empty means every config. Unknown names are left out.
- include_synonyms (v1+): each topic config lists the override (if any), the broker setting under
  its broker name (if any), then the default under the topic config's name, in precedence order;
  each broker setting lists its levels the same way.
- v3+: config_type, and documentation when include_documentation (null otherwise).
- v0 is not served (clients since Kafka 1.1 send v1+), so its `is_default` is never written.
- ACLs (docs/security.md): DESCRIBE_CONFIGS on the topic (else TOPIC_AUTHORIZATION_FAILED) or,
  for a broker, on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from construct import Container

from kshim.configs import client_metrics
from kshim.configs import Resolved, broker_settings, resolve, resolve_group
from kshim.errors import BrokerError, check_topic_name
from kshim.net.handlers import RequestContext
from kshim.net.handlers.config_resources import GROUP, config_entry, target_group
from kshim.security import authz
from kshim.security.acls import AclOperation
from wire.errors import ErrorCode

API_KEY = 32
VERSIONS = (1, 4)

TOPIC = 2
BROKER = 4
CLIENT_METRICS = 16
CLIENT_METRICS_CONFIG = 7  # the config source of a subscription's configs


def _entries(configs: Iterable[Resolved], keys: set[str] | None, synonyms: bool,
             docs: bool) -> list[dict[str, Any]]:
    return [{**config_entry(r),
             "synonyms": [{"name": s.name, "value": s.value, "source": s.source} for s in r.synonyms]
             if synonyms else [],
             "config_type": r.definition.type.code, "documentation": r.definition.doc if docs else None}
            for r in configs if keys is None or r.name in keys]


def _topic_configs(ctx: RequestContext, name: str) -> Iterable[Resolved]:
    check_topic_name(name)
    topic = ctx.broker.topics.get(name)
    if topic is None:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    return resolve(topic.configs, ctx.broker.broker_level()).entries.values()


def _broker_configs(ctx: RequestContext, name: str) -> Iterable[Resolved]:
    node_id = ctx.broker.config.node_id
    if name not in ("", str(node_id)):
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"broker resource name must be '' or this broker's id {node_id}, got {name!r}")
    return broker_settings(ctx.broker.config, ctx.broker.image.broker_configs)


def _client_metrics(ctx: RequestContext, name: str, keys: set[str] | None, docs: bool) -> list[dict[str, Any]]:
    if not name:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "a client-metrics subscription name must not be empty")
    configs = ctx.broker.image.client_metrics.get(name, {})
    return [{"name": k, "value": v, "read_only": False, "config_source": CLIENT_METRICS_CONFIG, "is_sensitive": False,
             "synonyms": [], "config_type": client_metrics.CONFIG_TYPES[k],
             "documentation": client_metrics.DOCS[k] if docs else None}
            for k, v in sorted(configs.items()) if keys is None or k in keys]


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    synonyms = bool(req.get("include_synonyms", False))
    docs = bool(req.get("include_documentation", False))
    results = []
    for resource in req.resources or ():
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        result: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
        try:
            authz.check_configs(ctx, resource.resource_type, resource.resource_name, AclOperation.DESCRIBE_CONFIGS)
            if resource.resource_type == CLIENT_METRICS:
                result["configs"] = _client_metrics(ctx, resource.resource_name, keys, docs)
                results.append(result)
                continue
            if resource.resource_type == TOPIC:
                configs = _topic_configs(ctx, resource.resource_name)
            elif resource.resource_type == BROKER:
                configs = _broker_configs(ctx, resource.resource_name)
            elif resource.resource_type == GROUP:
                group = target_group(resource)
                configs = resolve_group(ctx.broker.image.group_configs.get(group, {}), ctx.broker.config.group_settings)
            else:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"resource type {resource.resource_type} is not supported by kshim")
            result["configs"] = _entries(configs, keys, synonyms, docs)
        except BrokerError as e:
            result["error_code"], result["error_message"] = e.code, e.message
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}
