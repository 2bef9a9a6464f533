"""Topic configs by their Kafka names: definitions, defaults, validation, and the log settings they map to.

Values travel as strings (as in Kafka's admin APIs) and are validated here, so CreateTopics,
AlterConfigs and IncrementalAlterConfigs all reject the same things with the same messages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kshim.log import LogConfig

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class InvalidConfig(ValueError):
    """An unknown name or a value outside its range; the message is sent to the client."""


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # "long", "int", "string", "boolean", "list" (as DescribeConfigs v3+ reports them)
    default: str
    check: Callable[[str], None]
    doc: str


def _number(lo: int, hi: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        try:
            n = int(value)
        except ValueError:
            raise InvalidConfig(f"value {value!r} is not a number") from None
        if not lo <= n <= hi:
            raise InvalidConfig(f"value {n} is outside [{lo}, {hi}]")
    return check


def _one_of(*choices: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in choices:
            raise InvalidConfig(f"value {value!r} is not one of {', '.join(choices)}")
    return check


def _boolean(value: str) -> None:
    if value.lower() not in ("true", "false"):
        raise InvalidConfig(f"value {value!r} is not true or false")


_WEEK_MS = str(7 * 24 * 3600 * 1000)

DEFINITIONS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("retention.ms", "long", _WEEK_MS, _number(-1, LONG_MAX),
              "Delete whole segments whose newest record is older than this; -1 keeps them forever."),
    ConfigDef("retention.bytes", "long", "-1", _number(-1, LONG_MAX),
              "Delete the oldest whole segments while the partition is larger than this; -1 for no limit."),
    ConfigDef("segment.bytes", "int", str(1 << 30), _number(14, INT_MAX),
              "Roll to a new segment file once the active one would exceed this size."),
    ConfigDef("segment.ms", "long", _WEEK_MS, _number(1, LONG_MAX),
              "Roll to a new segment file once the active one is this old."),
    ConfigDef("max.message.bytes", "int", "1048588", _number(0, INT_MAX),
              "The largest record batch accepted, after compression."),
    ConfigDef("flush.messages", "long", str(LONG_MAX), _number(1, LONG_MAX),
              "fsync the log after this many records; the default never forces a flush."),
    ConfigDef("flush.ms", "long", str(LONG_MAX), _number(0, LONG_MAX),
              "fsync the log when the last flush is older than this; the default never forces a flush."),
    ConfigDef("min.insync.replicas", "int", "1", _number(1, INT_MAX),
              "acks=all produce fails with NOT_ENOUGH_REPLICAS when fewer replicas are in sync."),
    ConfigDef("cleanup.policy", "list", "delete", _one_of("delete"),
              "Only 'delete' is supported: kshim does not compact logs."),
    ConfigDef("message.timestamp.type", "string", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append."),
    ConfigDef("unclean.leader.election.enable", "boolean", "false", _boolean,
              "Elect an out-of-sync replica when no in-sync one is alive: available again, but COMMITTED "
              "records that replica lacks are lost."),
    ConfigDef("kshim.commit.quorum", "string", "isr", _one_of("isr", "majority"),
              "isr: a record is COMMITTED once every in-sync replica has it (Kafka). majority: once a "
              "majority of the assigned replicas have it."),
    ConfigDef("kshim.uncommitted.read.limit", "string", "log-end", _one_of("log-end", "high-watermark"),
              "How far read_uncommitted consumers read: the leader's log end (UNCOMMITTED records "
              "included) or the high watermark, as Kafka itself does."),
]}


def validate(configs: dict[str, str | None]) -> dict[str, str]:
    """Check names and values; returns the configs with None values (deletions) dropped."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        definition = DEFINITIONS.get(name)
        if definition is None:
            raise InvalidConfig(f"unknown topic config {name!r}")
        if value is None:
            continue
        try:
            definition.check(value)
        except InvalidConfig as e:
            raise InvalidConfig(f"invalid value for {name}: {e}") from None
        out[name] = value
    return out


def effective(configs: dict[str, str], defaults: dict[str, str] | None = None) -> dict[str, str]:
    """Every known config: the topic's override, else the broker's default, else Kafka's."""
    defaults = defaults or {}
    return {name: configs.get(name, defaults.get(name, d.default)) for name, d in DEFINITIONS.items()}


def log_config(configs: dict[str, str]) -> LogConfig:
    values = effective(configs)
    flush_messages = int(values["flush.messages"])
    flush_ms = int(values["flush.ms"])
    return LogConfig(
        segment_bytes=int(values["segment.bytes"]),
        segment_ms=int(values["segment.ms"]),
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        flush_messages=None if flush_messages == LONG_MAX else flush_messages,
        flush_ms=None if flush_ms == LONG_MAX else flush_ms,
    )
