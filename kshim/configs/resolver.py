"""Effective configs: a topic's override, else this broker's dynamic setting, else the cluster-wide
dynamic default, else the command line's setting, else the default (Kafka's order); typed, with
the source DescribeConfigs reports. The controller, the partitions and the config handlers all
read configs through here, so they agree on every value.

Broker settings are keyed by their broker names (log.retention.ms, min.insync.replicas, ...): the
`synonym` of each topic config. One equal to the default counts as the default: cluster brokers
are always started with --min-insync-replicas and --uncommitted-read-limit, and DescribeConfigs
must not report a setting nobody changed as the broker's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any, Callable, Mapping

from kshim.configs.definitions import (BROKER_CONFIGS, LONG_MAX, TOPIC_CONFIGS, TYPES, STRING, ConfigDef,
                                       InvalidConfig, broker_definition, topic_definition)
from kshim.configs.broker import BrokerConfig
from kshim.configs.catalog import TABLE
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS
from kshim.configs.groups import GroupSettings, group_definitions
from kshim.log.log import LogConfig
from kshim.security.acls import STANDARD_AUTHORIZER



class Source(IntEnum):
    """Where a value comes from, by DescribeConfigs' config_source codes."""
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2  # set with AlterConfigs on one broker
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3  # set with AlterConfigs on the cluster-wide default (resource name "")
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8  # a group's override (the GROUP resource)


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: Source


@dataclass(frozen=True)
class Resolved:
    definition: ConfigDef
    value: Any  # typed
    raw: str | None  # as the admin APIs show it
    source: Source
    synonyms: tuple[Synonym, ...]  # every level that gives a value, highest precedence first

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True)
class BrokerLevel:
    """The broker-level settings a topic config falls back to, by broker config name, highest
    precedence first: this broker's dynamic settings, the cluster-wide dynamic defaults (both set
    with AlterConfigs and kept by the controller), then the command line."""
    static: Mapping[str, str] = field(default_factory=dict)
    cluster: Mapping[str, str] = field(default_factory=dict)
    node: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, static: Mapping[str, str], dynamic: Mapping[str, Mapping[str, str]],
           node_id: int | None = None) -> BrokerLevel:
        """From the command line's settings and the image's dynamic ones ("" for the cluster-wide
        default, str(node id) for one broker)."""
        return cls(static, dynamic.get("", {}), dynamic.get(str(node_id), {}) if node_id is not None else {})

    def key(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        return self._key

    @cached_property  # resolve() asks per partition of every image: sorted once per level
    def _key(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        return tuple(tuple(sorted(m.items())) for m in (self.static, self.cluster, self.node))


@dataclass(frozen=True)
class TopicConfig:
    """Every topic config's effective value; `config[name]` is the typed value."""
    entries: Mapping[str, Resolved]

    def __getitem__(self, name: str) -> Any:
        return self.entries[name].value

    def log_config(self) -> LogConfig:
        flush_messages, flush_ms = self["flush.messages"], self["flush.ms"]
        return LogConfig(
            segment_bytes=self["segment.bytes"],
            segment_ms=self["segment.ms"],
            retention_ms=self["retention.ms"],
            retention_bytes=self["retention.bytes"],
            flush_messages=None if flush_messages == LONG_MAX else flush_messages,
            flush_ms=None if flush_ms == LONG_MAX else flush_ms,
            index_interval_bytes=self["index.interval.bytes"],
            segment_index_bytes=self["segment.index.bytes"],
            segment_jitter_ms=self["segment.jitter.ms"],
            compact="compact" in self["cleanup.policy"],
            delete="delete" in self["cleanup.policy"],
            delete_retention_ms=self["delete.retention.ms"],
            min_cleanable_ratio=self["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=self["min.compaction.lag.ms"],
            max_compaction_lag_ms=self["max.compaction.lag.ms"],
        )


def _checked(configs: Mapping[str, str | None], definition_of: Callable[[str], ConfigDef]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in configs.items():
        definition = definition_of(name)
        if value is not None:
            definition.parse(value)
            out[name] = value
    return out


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Topic overrides checked by name and value (InvalidConfig); None values (deletions) dropped."""
    return _checked(configs, topic_definition)


def check_values(config: TopicConfig) -> None:
    """Rules across configs, on the effective values (Kafka's LogConfig.validateValues)."""
    lo, hi = config["min.compaction.lag.ms"], config["max.compaction.lag.ms"]
    if lo > hi:  # Kafka's words
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                            f"max.compaction.lag.ms ({hi})")


def resolve(overrides: Mapping[str, str], broker: Mapping[str, str] | BrokerLevel | None = None) -> TopicConfig:
    """A topic's effective configs from its (validated) overrides and the broker-level settings
    (a BrokerLevel, or a mapping of command-line settings alone)."""
    level = broker if isinstance(broker, BrokerLevel) else BrokerLevel(broker or {})
    return _resolve(tuple(sorted(overrides.items())), level.key())


@lru_cache(maxsize=256)  # every image reconfigures every replica: topics share a handful of configs
def _resolve(overrides: tuple[tuple[str, str], ...],
             broker: tuple[tuple[tuple[str, str], ...], ...]) -> TopicConfig:
    topic_level = dict(overrides)
    static, cluster, node = (dict(layer) for layer in broker)
    entries = {}
    for name, definition in TOPIC_CONFIGS.items():
        chain = []
        if name in topic_level:
            chain.append(Synonym(name, topic_level[name], Source.DYNAMIC_TOPIC_CONFIG))
        synonym = definition.synonym
        if synonym is not None:
            if synonym in node:
                chain.append(Synonym(synonym, node[synonym], Source.DYNAMIC_BROKER_CONFIG))
            if synonym in cluster:
                chain.append(Synonym(synonym, cluster[synonym], Source.DYNAMIC_DEFAULT_BROKER_CONFIG))
            if _changes_default(definition, static.get(synonym)):
                chain.append(Synonym(synonym, static[synonym], Source.STATIC_BROKER_CONFIG))
        chain.append(Synonym(name, definition.default, Source.DEFAULT_CONFIG))
        entries[name] = _resolved(definition, chain[0].value, chain[0].source, tuple(chain))
    return TopicConfig(MappingProxyType(entries))


def validate_broker(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Dynamic broker settings checked by name (known and dynamic) and value (InvalidConfig);
    None values (deletions) dropped."""
    return _checked(configs, broker_definition)


def _changes_default(definition: ConfigDef, raw: str | None) -> bool:
    if raw is None:
        return False
    return definition.default is None or definition.parse(raw) != definition.parse(definition.default)


def _resolved(definition: ConfigDef, raw: str | None, source: Source, chain: tuple[Synonym, ...]) -> Resolved:
    return Resolved(definition, None if raw is None else definition.parse(raw), raw, source, chain)


def _listeners(c: BrokerConfig) -> str:
    # never a password: SASL users are not broker configs here
    return ",".join(listener.url() for listener in c.security.listeners) or f"PLAINTEXT://{c.advertised}:{c.port}"


# broker settings taken from the command line; the others are the broker's topic-config settings
# (message.max.bytes) or their defaults
_FROM_COMMAND_LINE: dict[str, Callable[[BrokerConfig], str | None]] = {
    "broker.id": lambda c: str(c.node_id),
    "node.id": lambda c: str(c.node_id),
    "advertised.listeners": lambda c: _listeners(c),
    "listeners": lambda c: _listeners(c),
    "sasl.enabled.mechanisms": lambda c: ",".join(c.security.sasl_mechanisms),
    "ssl.client.auth": lambda c: c.security.tls_client_auth,
    "connection.failed.authentication.delay.ms": lambda c: str(c.security.failed_auth_delay_ms),
    "connections.max.reauth.ms": lambda c: str(c.security.max_reauth_ms),
    "num.partitions": lambda c: str(c.default_partitions),
    "auto.create.topics.enable": lambda c: str(c.auto_create_topics).lower(),
    "default.replication.factor": lambda c: str(c.default_replication_factor),
    "socket.request.max.bytes": lambda c: str(c.max_request_bytes),
    "log.dirs": lambda c: ",".join(str(d) for d in c.log_dirs) or str(c.data_dir),
    "queued.max.request.bytes": lambda c: str(c.queued_max_request_bytes),
    "max.connections": lambda c: str(c.max_connections),
    "max.connections.per.ip": lambda c: str(c.max_connections_per_ip),
    "connections.max.idle.ms": lambda c: str(c.connections_max_idle_ms),
    "kshim.request.stall.timeout.ms": lambda c: str(c.request_stall_timeout_ms),
    "log.cleaner.io.max.bytes.per.second": lambda c: str(float(c.log_cleaner_io_max_bytes_per_second)),
    "log.cleaner.dedupe.buffer.size": lambda c: str(c.log_cleaner_dedupe_buffer_size),
    "log.cleaner.backoff.ms": lambda c: str(c.log_cleaner_backoff_ms),
    "group.initial.rebalance.delay.ms": lambda c: str(c.group_initial_rebalance_delay_ms),
    "max.incremental.fetch.session.cache.slots": lambda c: str(c.max_incremental_fetch_session_cache_slots),
    "authorizer.class.name": lambda c: STANDARD_AUTHORIZER if c.authorizer.enabled else "",
    "super.users": lambda c: ";".join(sorted(c.authorizer.super_users)) or None,
    "allow.everyone.if.no.acl.found": lambda c: str(c.authorizer.allow_everyone_if_no_acl_found).lower(),
    "quota.window.num": lambda c: str(c.quota_window_num),
    "quota.window.size.seconds": lambda c: str(c.quota_window_size_seconds),
}


def broker_settings(config: BrokerConfig, dynamic: Mapping[str, Mapping[str, str]] | None = None) -> list[Resolved]:
    """The broker settings DescribeConfigs reports: the command line's (read-only), and the
    topic-config defaults with their dynamic values (this broker's, then the cluster-wide one)
    over the command line's over Kafka's default; then every other Kafka broker config, served
    or not, as given (STATIC_BROKER_CONFIG) or by default (kshim.configs.catalog)."""
    level = BrokerLevel.of(config.topic_defaults, dynamic or {}, config.node_id)
    out = []
    for name, definition in BROKER_CONFIGS.items():
        given = _FROM_COMMAND_LINE.get(name)
        if given is not None:
            raw = given(config)
            if raw is None:  # not set (super.users)
                out.append(_resolved(definition, None, Source.DEFAULT_CONFIG, ()))
                continue
            source = Source.STATIC_BROKER_CONFIG if name in config.static_configs or \
                _changes_default(definition, raw) else Source.DEFAULT_CONFIG
            out.append(_resolved(definition, raw, source, (Synonym(name, raw, source),)))
            continue
        chain = []
        if name in level.node:
            chain.append(Synonym(name, level.node[name], Source.DYNAMIC_BROKER_CONFIG))
        if name in level.cluster:
            chain.append(Synonym(name, level.cluster[name], Source.DYNAMIC_DEFAULT_BROKER_CONFIG))
        if _changes_default(definition, level.static.get(name)):
            chain.append(Synonym(name, level.static[name], Source.STATIC_BROKER_CONFIG))
        chain.append(Synonym(name, definition.default, Source.DEFAULT_CONFIG))
        out.append(_resolved(definition, chain[0].value, chain[0].source, tuple(chain)))
    out.extend(_catalogued(config))
    return out


def _catalogued(config: BrokerConfig) -> list[Resolved]:
    """The Kafka broker configs outside BROKER_CONFIGS: the group settings and BrokerConfig fields
    with kshim's values, the others as given or at Kafka's default."""
    groups = config.group_settings.broker_configs()
    out = []
    for name, entry in TABLE.items():
        if name in BROKER_CONFIGS:
            continue
        definition = _catalogue_definition(name)
        if name in groups:
            raw: str | None = groups[name]
        elif entry.route == "field" and entry.target is not None:
            value = getattr(config, entry.target)
            raw = entry.shown(value) if entry.shown else str(value).lower() if isinstance(value, bool) else str(value)
        else:
            raw = config.static_configs.get(name, definition.default)
        source = Source.STATIC_BROKER_CONFIG if name in config.static_configs else Source.DEFAULT_CONFIG
        if definition.sensitive:
            raw = None
        out.append(Resolved(definition, raw, raw, source, (Synonym(name, raw, source),)))
    return out


@lru_cache(maxsize=None)
def _catalogue_definition(name: str) -> ConfigDef:
    kafka, entry = KAFKA_BROKER_CONFIGS.get(name), TABLE[name]
    return ConfigDef(name, TYPES[kafka.type] if kafka else STRING, kafka.default if kafka else None,
                     f"{entry.kind}: {entry.why}", dynamic=False)


def resolve_group(overrides: Mapping[str, str], settings: GroupSettings | None = None) -> list[Resolved]:
    """A group's configs as DescribeConfigs(GROUP) reports them: the override (GROUP_CONFIG), else
    the broker's setting under the group config's name (DEFAULT_CONFIG, as Kafka reports it)."""
    out = []
    for name, definition in group_definitions(settings).items():
        chain = []
        if name in overrides:
            chain.append(Synonym(name, overrides[name], Source.GROUP_CONFIG))
        chain.append(Synonym(name, definition.default, Source.DEFAULT_CONFIG))
        out.append(_resolved(definition, chain[0].value, chain[0].source, tuple(chain)))
    return out
