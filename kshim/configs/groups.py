"""Group configs (Kafka 4's GROUP config resource, type 32): per-group overrides of the broker's
group settings, set with (Incremental)AlterConfigs, kept by the controller in the metadata image
(`MetadataImage.group_configs`), read by the group coordinator and the share-partition side.

- `GroupSettings`: the broker-level settings (Kafka's group.consumer.* / group.share.* broker
  configs and their min/max bounds). Read-only: they are the defaults every group falls back to.
- `GROUP_CONFIGS`: the group configs kshim serves, typed like the topic configs (`ConfigDef`).
  Their default is the broker setting of the same meaning, so DescribeConfigs shows the value a
  group without an override gets.
- `validate_group(overrides, settings)`: Kafka's GroupConfig.validate: known names, typed values,
  each within the broker's min/max bounds, and session timeout > heartbeat interval on the
  merged values; InvalidConfig (INVALID_CONFIG) with Kafka's words otherwise.
- `group_config(image, group_id, settings)`: THE way to read a group's effective configs (typed).

Left out, refused as unknown with a reason: the streams.* configs (kshim has no streams groups)
and the *.assignment.interval.ms ones (kshim computes a new target assignment at the heartbeat
that needs it, never batched).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from kshim.configs.definitions import INT, INT_MAX, STRING, AutoOffsetReset, Choice, ConfigDef, InvalidConfig, Range

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SHARE_PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"


@dataclass(frozen=True)
class GroupSettings:
    """The broker's group settings, by Kafka's broker config names (Kafka's defaults, except the
    consumer heartbeat interval: kshim answers 3 s for snappier KIP-848 rebalances)."""
    consumer_session_timeout_ms: int = 45_000       # group.consumer.session.timeout.ms
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_heartbeat_interval_ms: int = 3000      # group.consumer.heartbeat.interval.ms (Kafka: 5000)
    consumer_min_heartbeat_interval_ms: int = 1000  # Kafka: 5000; kshim's default must be within
    consumer_max_heartbeat_interval_ms: int = 15_000
    share_session_timeout_ms: int = 45_000          # group.share.session.timeout.ms
    share_min_session_timeout_ms: int = 45_000
    share_max_session_timeout_ms: int = 60_000
    share_heartbeat_interval_ms: int = 5000         # group.share.heartbeat.interval.ms
    share_min_heartbeat_interval_ms: int = 5000
    share_max_heartbeat_interval_ms: int = 15_000
    share_max_size: int = 200                       # group.share.max.size
    share_record_lock_duration_ms: int = 30_000     # group.share.record.lock.duration.ms
    share_min_record_lock_duration_ms: int = 15_000
    share_max_record_lock_duration_ms: int = 60_000
    share_delivery_count_limit: int = 5             # group.share.delivery.count.limit
    share_min_delivery_count_limit: int = 2
    share_max_delivery_count_limit: int = 10
    share_partition_max_record_locks: int = 2000    # group.share.partition.max.record.locks
    share_min_partition_max_record_locks: int = 100
    share_max_partition_max_record_locks: int = 10_000

    def broker_configs(self) -> dict[str, str]:
        """These settings under Kafka's broker config names (group.share.session.timeout.ms, ...)."""
        return {_broker_name(name): str(value) for name, value in vars(self).items()}

    @classmethod
    def from_broker_configs(cls, values: Mapping[str, str]) -> "GroupSettings":
        """Settings from Kafka broker config names (`kshim serve --group-setting NAME=VALUE`); each
        default must lie within its min/max (Kafka refuses to start otherwise). InvalidConfig."""
        fields = {_broker_name(name): name for name in vars(cls())}
        given = {}
        for name, raw in values.items():
            if name not in fields:
                raise InvalidConfig(f"unknown group setting {name!r}; known: {', '.join(sorted(fields))}")
            try:
                given[fields[name]] = int(raw)
            except ValueError:
                raise InvalidConfig(f"group setting {name}: {raw!r} is not a number") from None
            if given[fields[name]] < 1:
                raise InvalidConfig(f"group setting {name} must be at least 1")
        settings = cls(**given)
        for config, (lo, hi) in _BOUNDS.items():
            synonym = GROUP_CONFIGS[config].synonym or ""
            value = getattr(settings, synonym[len("group."):].replace(".", "_"))
            if not getattr(settings, lo) <= value <= getattr(settings, hi):
                raise InvalidConfig(f"group setting {synonym} ({value}) must lie within "
                                    f"{_broker_name(lo)} ({getattr(settings, lo)}) and {_broker_name(hi)} "
                                    f"({getattr(settings, hi)})")
        return settings


def _group_defs(s: GroupSettings) -> dict[str, ConfigDef]:
    return {d.name: d for d in [
        ConfigDef(CONSUMER_SESSION_TIMEOUT_MS, INT, str(s.consumer_session_timeout_ms),
                  "The timeout to detect client failures when using the consumer group protocol: a member "
                  "silent this long is fenced and its partitions reassigned.", Range(1, INT_MAX),
                  synonym="group.consumer.session.timeout.ms"),
        ConfigDef(CONSUMER_HEARTBEAT_INTERVAL_MS, INT, str(s.consumer_heartbeat_interval_ms),
                  "The heartbeat interval given to the members of a consumer group.", Range(1, INT_MAX),
                  synonym="group.consumer.heartbeat.interval.ms"),
        ConfigDef(SHARE_SESSION_TIMEOUT_MS, INT, str(s.share_session_timeout_ms),
                  "The timeout to detect client failures when using the share group protocol.", Range(1, INT_MAX),
                  synonym="group.share.session.timeout.ms"),
        ConfigDef(SHARE_HEARTBEAT_INTERVAL_MS, INT, str(s.share_heartbeat_interval_ms),
                  "The heartbeat interval given to the members of a share group.", Range(1, INT_MAX),
                  synonym="group.share.heartbeat.interval.ms"),
        ConfigDef(SHARE_RECORD_LOCK_DURATION_MS, INT, str(s.share_record_lock_duration_ms),
                  "The record acquisition lock duration in milliseconds for share groups.", Range(1000, INT_MAX),
                  synonym="group.share.record.lock.duration.ms"),
        ConfigDef(SHARE_DELIVERY_COUNT_LIMIT, INT, str(s.share_delivery_count_limit),
                  "The maximum number of delivery attempts for a record delivered to a share group.",
                  Range(2, INT_MAX), synonym="group.share.delivery.count.limit"),
        ConfigDef(SHARE_PARTITION_MAX_RECORD_LOCKS, INT, str(s.share_partition_max_record_locks),
                  "Share-group record lock limit per share-partition.", Range(100, INT_MAX),
                  synonym="group.share.partition.max.record.locks"),
        ConfigDef(SHARE_AUTO_OFFSET_RESET, STRING, "latest",
                  "The strategy to initialize the share-partition start offset: earliest, latest, or "
                  "by_duration:<ISO-8601 duration> (the first record at or after now minus the duration).",
                  AutoOffsetReset()),
        ConfigDef(SHARE_ISOLATION_LEVEL, STRING, "read_uncommitted",
                  "read_committed: the share group delivers transactional records only once committed (up to "
                  "the last stable offset, aborted ones skipped); read_uncommitted: every record.",
                  Choice(("read_committed", "read_uncommitted"))),
    ]}


GROUP_CONFIGS: dict[str, ConfigDef] = _group_defs(GroupSettings())

# Kafka 4.3 group configs kshim refuses, with why (INVALID_CONFIG names the reason)
UNSERVED_GROUP_CONFIGS: dict[str, str] = {
    **dict.fromkeys(("streams.session.timeout.ms", "streams.heartbeat.interval.ms", "streams.num.standby.replicas",
                     "streams.initial.rebalance.delay.ms"), "kshim has no streams groups (KIP-1071)"),
    **dict.fromkeys(("consumer.assignment.interval.ms", "share.assignment.interval.ms"),
                    "kshim computes a target assignment at the heartbeat that needs it, never batched"),
}

# the GroupSettings fields bounding each config (Kafka's group.*.min.* / group.*.max.* broker configs)
_BOUNDS: dict[str, tuple[str, str]] = {
    CONSUMER_SESSION_TIMEOUT_MS: ("consumer_min_session_timeout_ms", "consumer_max_session_timeout_ms"),
    CONSUMER_HEARTBEAT_INTERVAL_MS: ("consumer_min_heartbeat_interval_ms", "consumer_max_heartbeat_interval_ms"),
    SHARE_SESSION_TIMEOUT_MS: ("share_min_session_timeout_ms", "share_max_session_timeout_ms"),
    SHARE_HEARTBEAT_INTERVAL_MS: ("share_min_heartbeat_interval_ms", "share_max_heartbeat_interval_ms"),
    SHARE_RECORD_LOCK_DURATION_MS: ("share_min_record_lock_duration_ms", "share_max_record_lock_duration_ms"),
    SHARE_DELIVERY_COUNT_LIMIT: ("share_min_delivery_count_limit", "share_max_delivery_count_limit"),
    SHARE_PARTITION_MAX_RECORD_LOCKS: ("share_min_partition_max_record_locks", "share_max_partition_max_record_locks"),
}


def _broker_name(field_name: str) -> str:
    kind, rest = field_name.split("_", 1)
    return f"group.{kind}.{rest.replace('_', '.')}"


def group_definition(name: str) -> ConfigDef:
    definition = GROUP_CONFIGS.get(name)
    if definition is None:
        if name in UNSERVED_GROUP_CONFIGS:
            raise InvalidConfig(f"group config {name!r} is not served: {UNSERVED_GROUP_CONFIGS[name]}")
        raise InvalidConfig(f"Unknown group config name: {name}")
    return definition


def check_group_names(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Names known and values typed and in their base range (what the controller checks); None
    values (deletions) dropped."""
    out = {}
    for name, value in configs.items():
        definition = group_definition(name)
        if value is not None:
            definition.parse(value)
            out[name] = value
    return out


def validate_group(configs: Mapping[str, str | None], settings: GroupSettings | None = None) -> dict[str, str]:
    """A group's whole set of overrides checked as Kafka's GroupConfig.validate does (the overrides
    merged over the broker's settings); the clean overrides."""
    settings = settings or GroupSettings()
    clean = check_group_names(configs)
    effective = _typed(clean, settings)
    for name, (lo_field, hi_field) in _BOUNDS.items():
        value = effective[name]
        if value < getattr(settings, lo_field):
            raise InvalidConfig(f"{name} must be greater than or equal to {_broker_name(lo_field)}")
        if value > getattr(settings, hi_field):
            raise InvalidConfig(f"{name} must be less than or equal to {_broker_name(hi_field)}")
    for session, heartbeat in ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                               (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS)):
        if effective[session] <= effective[heartbeat]:
            raise InvalidConfig(f"{session} must be greater than {heartbeat}")
    return clean


def _typed(overrides: Mapping[str, str], settings: GroupSettings) -> dict[str, Any]:
    defs = GROUP_CONFIGS if settings == GroupSettings() else _group_defs(settings)
    out: dict[str, Any] = {}
    for name, definition in defs.items():
        raw = overrides.get(name)
        out[name] = definition.parse(raw if raw is not None else definition.default or "")
    return out


@dataclass(frozen=True)
class EffectiveGroupConfig:
    """A group's configs as they apply: its override, else the broker's setting."""
    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str  # "latest", "earliest" or "by_duration:<ISO-8601>" (lower-cased prefix)
    share_isolation_level: str    # "read_committed" or "read_uncommitted"

    @property
    def read_committed(self) -> bool:
        return self.share_isolation_level == "read_committed"

    def auto_offset_reset_duration_ms(self) -> int | None:
        """For by_duration:<d>, the duration in ms; None for latest/earliest."""
        if not self.share_auto_offset_reset.startswith("by_duration:"):
            return None
        m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?",
                         self.share_auto_offset_reset[len("by_duration:"):], re.IGNORECASE)
        assert m is not None  # validated when set
        d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        return int(round(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000))


class _HasGroupConfigs(Protocol):
    @property
    def group_configs(self) -> Mapping[str, Mapping[str, str]]: ...


def group_config(image: _HasGroupConfigs, group_id: str, settings: GroupSettings | None = None) -> EffectiveGroupConfig:
    """The effective configs of `group_id`: the image's overrides (set with AlterConfigs on the
    GROUP resource), else the broker's `settings` (BrokerConfig.group_settings), typed. Overrides
    outside the broker's bounds (they were checked when set, but the bounds may differ on this
    broker) are clamped to them, as Kafka's GroupConfig.evaluate does."""
    settings = settings or GroupSettings()
    overrides = image.group_configs.get(group_id, {})
    try:
        typed = _typed(overrides, settings)
    except InvalidConfig:  # never stored invalid; a broker older than the value's rule falls back
        typed = _typed({}, settings)
    for name, (lo_field, hi_field) in _BOUNDS.items():
        typed[name] = min(max(typed[name], getattr(settings, lo_field)), getattr(settings, hi_field))
    reset = typed[SHARE_AUTO_OFFSET_RESET]
    lowered = reset.lower()
    reset = lowered if lowered in ("latest", "earliest") else "by_duration:" + reset[len("by_duration:"):]
    return EffectiveGroupConfig(
        typed[CONSUMER_SESSION_TIMEOUT_MS], typed[CONSUMER_HEARTBEAT_INTERVAL_MS], typed[SHARE_SESSION_TIMEOUT_MS],
        typed[SHARE_HEARTBEAT_INTERVAL_MS], typed[SHARE_RECORD_LOCK_DURATION_MS], typed[SHARE_DELIVERY_COUNT_LIMIT],
        typed[SHARE_PARTITION_MAX_RECORD_LOCKS], reset, typed[SHARE_ISOLATION_LEVEL])


def group_definitions(settings: GroupSettings | None = None) -> dict[str, ConfigDef]:
    """The group config table with this broker's settings as defaults (DescribeConfigs)."""
    settings = settings or GroupSettings()
    return GROUP_CONFIGS if settings == GroupSettings() else _group_defs(settings)
