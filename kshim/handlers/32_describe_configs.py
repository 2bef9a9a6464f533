"""DescribeConfigs: report topic configs and a few static broker settings.

- TOPIC (2): every config kshim knows (topic_config.DEFINITIONS) with its effective value; source
  DYNAMIC_TOPIC_CONFIG (1) when the topic overrides it, DEFAULT_CONFIG (5) otherwise. None is
  read-only or sensitive. An invalid name is INVALID_TOPIC_EXCEPTION, an unknown topic
  UNKNOWN_TOPIC_OR_PARTITION.
- BROKER (4) named "" or this broker's node id: a short, honest list of the broker's settings,
  all read-only STATIC_BROKER_CONFIG (4): they come from the command line and cannot be altered.
  Another node id is INVALID_REQUEST.
- Other resource types (BROKER_LOGGER, ...) are INVALID_REQUEST.
- `configuration_keys` filters by name; null or empty means every config. Unknown names are left out.
- include_synonyms (v1+): each topic config lists the override (if any) then the default under
  the same name, in precedence order; each broker setting lists itself.
- v3+: config_type, and documentation when include_documentation (null otherwise).
- v0 is not served (clients since Kafka 1.1 send v1+), so its `is_default` is never written.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from construct import Container

from kshim import topic_config
from kshim.errors import BrokerError, check_topic_name
from kshim.handlers import RequestContext
from wire.errors import ErrorCode

API_KEY = 32
VERSIONS = (1, 4)

TOPIC = 2
BROKER = 4

DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                "class": 8, "password": 9}


def _entry(name: str, value: str | None, source: int, type_: str, doc: str, read_only: bool,
           synonyms: list[dict[str, Any]], include_docs: bool) -> dict[str, Any]:
    return {
        "name": name, "value": value, "read_only": read_only,
        "config_source": source, "is_sensitive": False,
        "synonyms": synonyms, "config_type": CONFIG_TYPES[type_],
        "documentation": doc if include_docs else None,
    }


def _topic_configs(ctx: RequestContext, name: str, keys: set[str] | None, synonyms: bool,
                   docs: bool) -> list[dict[str, Any]]:
    check_topic_name(name)
    topic = ctx.broker.topics.get(name)
    if topic is None:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    out = []
    for definition in topic_config.DEFINITIONS.values():
        if keys is not None and definition.name not in keys:
            continue
        override = topic.configs.get(definition.name)
        chain = []
        if synonyms:
            if override is not None:
                chain.append({"name": definition.name, "value": override, "source": DYNAMIC_TOPIC_CONFIG})
            chain.append({"name": definition.name, "value": definition.default, "source": DEFAULT_CONFIG})
        if override is not None:
            out.append(_entry(definition.name, override, DYNAMIC_TOPIC_CONFIG, definition.type, definition.doc,
                              False, chain, docs))
        else:
            out.append(_entry(definition.name, definition.default, DEFAULT_CONFIG, definition.type,
                              definition.doc, False, chain, docs))
    return out


def _broker_settings(ctx: RequestContext) -> Iterable[tuple[str, str, str, str]]:
    """(name, value, type, documentation) of the broker settings worth reporting."""
    config = ctx.broker.config
    yield ("broker.id", str(config.node_id), "int", "This broker's node id.")
    yield ("node.id", str(config.node_id), "int", "This broker's node id.")
    yield ("advertised.listeners", f"PLAINTEXT://{config.advertised}:{config.port}", "string",
           "The address clients are told to connect to.")
    yield ("num.partitions", str(config.default_partitions), "int",
           "Partitions of a topic created without an explicit count, or auto-created.")
    yield ("auto.create.topics.enable", str(config.auto_create_topics).lower(), "boolean",
           "Whether metadata requests and produces create unknown topics.")
    yield ("default.replication.factor", "1", "int", "Replicas of a new topic: always 1 on a single broker.")
    yield ("message.max.bytes", topic_config.DEFINITIONS["max.message.bytes"].default, "int",
           "The largest record batch accepted, unless a topic sets max.message.bytes.")
    yield ("socket.request.max.bytes", str(config.max_request_bytes), "int",
           "The largest request the broker reads; larger ones close the connection.")
    yield ("log.dirs", str(config.data_dir), "string", "Where partition logs and metadata are stored.")


def _broker_configs(ctx: RequestContext, name: str, keys: set[str] | None, synonyms: bool,
                    docs: bool) -> list[dict[str, Any]]:
    node_id = ctx.broker.config.node_id
    if name not in ("", str(node_id)):
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"broker resource name must be '' or this broker's id {node_id}, got {name!r}")
    out = []
    for key, value, type_, doc in _broker_settings(ctx):
        if keys is not None and key not in keys:
            continue
        chain = [{"name": key, "value": value, "source": STATIC_BROKER_CONFIG}] if synonyms else []
        out.append(_entry(key, value, STATIC_BROKER_CONFIG, type_, doc, True, chain, docs))
    return out


async def handle(ctx: RequestContext, req: Container) -> Mapping[str, Any]:
    synonyms = bool(req.get("include_synonyms", False))
    docs = bool(req.get("include_documentation", False))
    results = []
    for resource in req.resources or ():
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        result: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.NONE, "error_message": None, "configs": []}
        try:
            if resource.resource_type == TOPIC:
                result["configs"] = _topic_configs(ctx, resource.resource_name, keys, synonyms, docs)
            elif resource.resource_type == BROKER:
                result["configs"] = _broker_configs(ctx, resource.resource_name, keys, synonyms, docs)
            else:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"resource type {resource.resource_type} is not supported by kshim")
        except BrokerError as e:
            result["error_code"], result["error_message"] = e.code, e.message
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}
