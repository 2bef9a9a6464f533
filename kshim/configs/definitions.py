"""The configs kshim serves, one typed entry each, by Kafka's names.

Topic configs are all dynamic (AlterConfigs changes them per topic) and each names the broker
setting that supplies its default (retention.ms <- log.retention.ms). Broker settings are static:
they come from the command line and DescribeConfigs reports them read-only. Adding a config is
adding one entry here. Values travel as strings, as in Kafka's admin APIs; `ConfigDef.parse`
turns one into its typed value or raises InvalidConfig with the message the client gets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kshim.errors import BrokerError
from wire.errors import ErrorCode

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class InvalidConfig(BrokerError):
    """An unknown name or a bad value: INVALID_CONFIG, with a message for the client."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_CONFIG, message)


# ------------------------------------------------------------------ types
def _number(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"value {value!r} is not a number") from None


def _double(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"value {value!r} is not a number") from None


def _boolean(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"value {value!r} is not true or false")
    return value.lower() == "true"


def _items(value: str) -> tuple[str, ...]:
    """A list value's items, as Kafka reads them: comma-separated, blanks trimmed and dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True)
class ConfigType:
    name: str  # as DescribeConfigs v3+ names it
    code: int  # DescribeConfigs config_type
    parse: Callable[[str], Any]  # raises ValueError saying what is wrong


BOOLEAN = ConfigType("boolean", 1, _boolean)
STRING = ConfigType("string", 2, str)
INT = ConfigType("int", 3, _number)
LONG = ConfigType("long", 5, _number)
DOUBLE = ConfigType("double", 6, _double)
LIST = ConfigType("list", 7, _items)
PASSWORD = ConfigType("password", 9, str)


# ------------------------------------------------------------------ validators
@dataclass(frozen=True)
class Range:
    lo: int | float
    hi: int | float

    def problem(self, raw: str, value: Any) -> str | None:
        return None if self.lo <= value <= self.hi else f"value {value} is outside [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class Choice:
    """One of `choices`; for a list config, items exactly as given (no blanks, no repeats), each one of them."""
    choices: tuple[str, ...]

    def problem(self, raw: str, value: Any) -> str | None:
        items = raw.split(",") if isinstance(value, tuple) else [raw]
        if all(item in self.choices for item in items) and len(set(items)) == len(items):
            return None
        return f"value {raw!r} is not one of {', '.join(self.choices)}"


# ------------------------------------------------------------------ definitions
@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None  # as DescribeConfigs shows it; None: no value
    doc: str
    validator: Range | Choice | None = None
    dynamic: bool = True  # alterable at runtime; static ones are read-only
    synonym: str | None = None  # a topic config's broker-level setting

    @property
    def sensitive(self) -> bool:
        return self.type is PASSWORD

    def parse(self, raw: str) -> Any:
        """The typed value of `raw`; InvalidConfig names this config and what is wrong."""
        try:
            value = self.type.parse(raw)
        except ValueError as e:
            problem: str | None = str(e)
        else:
            problem = self.validator.problem(raw, value) if self.validator else None
        if problem is not None:
            raise InvalidConfig(f"invalid value for {self.name}: {problem}")
        return value


_WEEK_MS = str(7 * 24 * 3600 * 1000)
_MAX_MESSAGE_BYTES = "1048588"

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("retention.ms", LONG, _WEEK_MS,
              "Delete whole segments whose newest record is older than this; -1 keeps them forever.",
              Range(-1, LONG_MAX), synonym="log.retention.ms"),
    ConfigDef("retention.bytes", LONG, "-1",
              "Delete the oldest whole segments while the partition is larger than this; -1 for no limit.",
              Range(-1, LONG_MAX), synonym="log.retention.bytes"),
    ConfigDef("segment.bytes", INT, str(1 << 30),
              "Roll to a new segment file once the active one would exceed this size.",
              Range(14, INT_MAX), synonym="log.segment.bytes"),
    ConfigDef("segment.ms", LONG, _WEEK_MS,
              "Roll to a new segment file once the active one is this old.",
              Range(1, LONG_MAX), synonym="log.roll.ms"),
    ConfigDef("max.message.bytes", INT, _MAX_MESSAGE_BYTES,
              "The largest record batch accepted, after compression.",
              Range(0, INT_MAX), synonym="message.max.bytes"),
    ConfigDef("flush.messages", LONG, str(LONG_MAX),
              "fsync the log after this many records; the default never forces a flush.",
              Range(1, LONG_MAX), synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", LONG, str(LONG_MAX),
              "fsync the log when the last flush is older than this; the default never forces a flush.",
              Range(0, LONG_MAX), synonym="log.flush.interval.ms"),
    ConfigDef("min.insync.replicas", INT, "1",
              "acks=all produce fails with NOT_ENOUGH_REPLICAS when fewer replicas are in sync.",
              Range(1, INT_MAX), synonym="min.insync.replicas"),
    ConfigDef("cleanup.policy", LIST, "delete",
              "Only 'delete' is supported: kshim does not compact logs.",
              Choice(("delete",)), synonym="log.cleanup.policy"),
    ConfigDef("message.timestamp.type", STRING, "CreateTime",
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
              Choice(("CreateTime", "LogAppendTime")), synonym="log.message.timestamp.type"),
    ConfigDef("unclean.leader.election.enable", BOOLEAN, "false",
              "Elect an out-of-sync replica when no in-sync one is alive: available again, but COMMITTED "
              "records that replica lacks are lost.",
              synonym="unclean.leader.election.enable"),
    ConfigDef("kshim.commit.quorum", STRING, "isr",
              "isr: a record is COMMITTED once every in-sync replica has it (Kafka). majority: once a "
              "majority of the assigned replicas have it.",
              Choice(("isr", "majority")), synonym="kshim.commit.quorum"),
    ConfigDef("kshim.uncommitted.read.limit", STRING, "log-end",
              "How far read_uncommitted consumers read: the leader's log end (UNCOMMITTED records "
              "included) or the high watermark, as Kafka itself does.",
              Choice(("log-end", "high-watermark")), synonym="kshim.uncommitted.read.limit"),
]}

# the broker settings DescribeConfigs reports, in its order
BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [
    ConfigDef("broker.id", INT, "-1", "This broker's node id.", dynamic=False),
    ConfigDef("node.id", INT, "-1", "This broker's node id.", dynamic=False),
    ConfigDef("advertised.listeners", STRING, None, "The address clients are told to connect to.", dynamic=False),
    ConfigDef("num.partitions", INT, "1",
              "Partitions of a topic created without an explicit count, or auto-created.", dynamic=False),
    ConfigDef("auto.create.topics.enable", BOOLEAN, "true",
              "Whether metadata requests and produces create unknown topics.", dynamic=False),
    ConfigDef("default.replication.factor", INT, "1",
              "Replicas of a new topic: always 1 on a single broker.", dynamic=False),
    ConfigDef("message.max.bytes", INT, _MAX_MESSAGE_BYTES,
              "The largest record batch accepted, unless a topic sets max.message.bytes.", dynamic=False),
    ConfigDef("socket.request.max.bytes", INT, str(100 * 1024 * 1024),
              "The largest request the broker reads; larger ones close the connection.", dynamic=False),
    ConfigDef("log.dirs", STRING, None, "Where partition logs and metadata are stored.", dynamic=False),
    ConfigDef("queued.max.request.bytes", LONG, str(512 * 1024 * 1024),
              "Bytes of large requests being received or handled, across all connections; past it the "
              "broker stops reading from connections until some are handled.", dynamic=False),
    ConfigDef("max.connections", INT, "10000",
              "Connections open at once; a connection past it is closed as soon as it is accepted.", dynamic=False),
    ConfigDef("max.connections.per.ip", INT, "10000",
              "Connections open at once from one client address; past it a new one is closed at once.",
              dynamic=False),
    ConfigDef("connections.max.idle.ms", LONG, "600000",
              "A connection with no request in progress and nothing to answer is closed after this long.",
              dynamic=False),
    ConfigDef("kshim.request.stall.timeout.ms", LONG, "30000",
              "A connection that stops sending halfway through a request is closed after this long.",
              dynamic=False),
]}


def topic_definition(name: str) -> ConfigDef:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"unknown topic config {name!r}")
    return definition
