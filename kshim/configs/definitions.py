"""The configs kshim serves, one typed entry each, by Kafka's names.

Topic configs are all dynamic (AlterConfigs changes them per topic) and each names the broker
setting that supplies its default (retention.ms <- log.retention.ms). Broker settings are static:
they come from the command line and DescribeConfigs reports them read-only. Adding a config is
adding one entry here. Values travel as strings, as in Kafka's admin APIs; `ConfigDef.parse`
turns one into its typed value or raises InvalidConfig with the message the client gets.
"""
from __future__ import annotations

import re
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
# Java's String.trim() (every char up to U+0020) and ConfigDef's COMMA_WITH_WHITESPACE ("\\s*,\\s*")
_JAVA_BLANKS = "".join(map(chr, range(33)))
_LIST_SEPARATOR = re.compile(r"[ \t\n\x0b\f\r]*,[ \t\n\x0b\f\r]*")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _trimmed(value: str) -> str:
    """A string value as Kafka's ConfigDef reads it: trimmed as Java's String.trim() does."""
    return value.strip(_JAVA_BLANKS)


def _number(value: str) -> int:
    # Java's parseInt/parseLong of the trimmed value: a sign and digits (Python's int() would also
    # take "1_000" and non-ASCII digits)
    digits = _trimmed(value)
    if not _INTEGER.fullmatch(digits):
        raise ValueError(f"value {value!r} is not a number")
    return int(digits)


def _double(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"value {value!r} is not a number") from None


def _boolean(value: str) -> bool:
    word = _trimmed(value).lower()
    if word not in ("true", "false"):
        raise ValueError(f"value {value!r} is not true or false")
    return word == "true"


def _items(value: str) -> tuple[str, ...]:
    """A list value's items, as Kafka reads them: comma-separated, blanks trimmed and dropped."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True)
class ConfigType:
    name: str  # as DescribeConfigs v3+ names it
    code: int  # DescribeConfigs config_type
    parse: Callable[[str], Any]  # raises ValueError saying what is wrong


BOOLEAN = ConfigType("boolean", 1, _boolean)
STRING = ConfigType("string", 2, _trimmed)
INT = ConfigType("int", 3, _number)
SHORT = ConfigType("short", 4, _number)
LONG = ConfigType("long", 5, _number)
DOUBLE = ConfigType("double", 6, _double)
LIST = ConfigType("list", 7, _items)
CLASS = ConfigType("class", 8, _trimmed)
PASSWORD = ConfigType("password", 9, _trimmed)
TYPES = {t.name.upper(): t for t in (BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD)}


# ------------------------------------------------------------------ validators
@dataclass(frozen=True)
class Range:
    lo: int | float
    hi: int | float

    def problem(self, raw: str, value: Any) -> str | None:
        return None if self.lo <= value <= self.hi else f"value {value} is outside [{self.lo}, {self.hi}]"


@dataclass(frozen=True)
class Choice:
    """One of `choices`; for a list config, items as Kafka splits them (the value trimmed, split at
    commas with the blanks around them: "compact, delete" is two items, "compact," has an empty
    one), no repeats, each one of them, or (with `empty`) no item at all: a blank value is the
    empty list."""
    choices: tuple[str, ...]
    empty: bool = False

    def problem(self, raw: str, value: Any) -> str | None:
        trimmed = _trimmed(raw)
        if self.empty and isinstance(value, tuple) and not trimmed:
            return None
        items = _LIST_SEPARATOR.split(trimmed) if isinstance(value, tuple) else [trimmed]
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
    validator: Validator | None = None
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
_NO_SYNONYM_REASON = "no broker-level default in Kafka"


@dataclass(frozen=True)
class CompressionLevel:
    """A codec's level range; gzip also takes -1, zlib's own default (6)."""
    lo: int
    hi: int
    also: int | None = None

    def problem(self, raw: str, value: Any) -> str | None:
        if self.lo <= value <= self.hi or value == self.also:
            return None
        extra = f" or {self.also}" if self.also is not None else ""
        return f"value {value} is outside [{self.lo}, {self.hi}]{extra}"


class ThrottledReplicas:
    """'*' or a list of partition:broker pairs, as Kafka's ThrottledReplicaListValidator."""

    def problem(self, raw: str, value: Any) -> str | None:
        items = list(value)
        if items == ["*"] or all(re.fullmatch(r"[0-9]+:[0-9]+", item) for item in items):
            return None
        return f"value {raw!r} must be '*' or a list of partition:broker pairs"


class RemoteStorage:
    """kshim has no tiered storage: only false is a valid value (Kafka refuses true when the
    broker's remote log storage system is off)."""

    def problem(self, raw: str, value: Any) -> str | None:
        if not value:
            return None
        return ("tiered storage is not available in kshim (no remote log storage system): "
                "remote.storage.enable must be false")


def _iso_duration(text: str) -> bool:
    """Java's Duration.parse for the non-negative PnDTnHnMn.nS form Kafka's validator accepts."""
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,9})?)S)?)?", text, re.IGNORECASE)
    if m is None or not any(m.groups()):
        return False
    return not text.upper().endswith("T")


class AutoOffsetReset:
    """latest, earliest or by_duration:<ISO-8601 duration> (Kafka's ShareGroupAutoOffsetResetStrategy)."""

    def problem(self, raw: str, value: Any) -> str | None:
        lowered = raw.lower()
        if lowered in ("latest", "earliest"):
            return None
        if lowered.startswith("by_duration:"):
            if _iso_duration(raw[len("by_duration:"):]):
                return None
            return f"value {raw!r}: by_duration needs a non-negative ISO-8601 duration (PnDTnHnMn.nS)"
        return f"value {raw!r} is not one of latest, earliest, by_duration:PnDTnHnMn.nS"


Validator = Range | Choice | CompressionLevel | ThrottledReplicas | RemoteStorage | AutoOffsetReset

# compression.type's values, by the codec id RecordBatch attributes carry (None: keep the producer's)
COMPRESSION_CODECS: dict[str, int | None] = {
    "producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Kafka 4.0 removed these topic configs; asking for one says so instead of "unknown"
REMOVED_TOPIC_CONFIGS: dict[str, str] = {
    "message.format.version": "Kafka 4.0 removed it: every batch is RecordBatch v2",
    "message.timestamp.difference.max.ms":
        "Kafka 4.0 removed it: use message.timestamp.before.max.ms and message.timestamp.after.max.ms",
}

TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [
    # ---------------------------------------------------------------- retention
    ConfigDef("retention.ms", LONG, _WEEK_MS,
              "Age after which a closed segment is removed, judged by its newest record timestamp; "
              "-1 means no time limit.",
              Range(-1, LONG_MAX), synonym="log.retention.ms"),
    ConfigDef("retention.bytes", LONG, "-1",
              "Size cap per partition: the oldest closed segments go while the partition exceeds it; "
              "a negative value means no size limit.",
              synonym="log.retention.bytes"),
    ConfigDef("local.retention.ms", LONG, "-2",
              "Tiered storage only: how long segments stay on local disk once copied to remote storage "
              "(-2: as retention.ms). Without tiered storage it has no effect.",
              Range(-2, LONG_MAX), synonym="log.local.retention.ms"),
    ConfigDef("local.retention.bytes", LONG, "-2",
              "Tiered storage only: local size cap for segments already copied to remote storage "
              "(-2: as retention.bytes). Without tiered storage it has no effect.",
              Range(-2, LONG_MAX), synonym="log.local.retention.bytes"),
    ConfigDef("file.delete.delay.ms", LONG, "60000",
              "Grace period before a removed partition directory (a deleted topic, a stray replica) is "
              "deleted; the broker's value applies. Segments are unlinked at once: kshim's readers hold "
              "no file positions across requests.",
              Range(0, LONG_MAX), synonym="log.segment.delete.delay.ms"),
    # ---------------------------------------------------------------- segments and indexes
    ConfigDef("segment.bytes", INT, str(1 << 30),
              "Size at which the active segment file is closed and a new one started.",
              Range(14, INT_MAX), synonym="log.segment.bytes"),  # Kafka 4.0: 1048576; see docs/configs.md
    ConfigDef("segment.ms", LONG, _WEEK_MS,
              "Age at which the active segment is closed and a new one started, even if not full.",
              Range(1, LONG_MAX), synonym="log.roll.ms"),
    ConfigDef("segment.jitter.ms", LONG, "0",
              "Each new segment draws a random amount below this (and below segment.ms) to subtract "
              "from segment.ms, so that partitions do not all roll at once.",
              Range(0, LONG_MAX), synonym="log.roll.jitter.ms"),
    ConfigDef("segment.index.bytes", INT, str(10 * 1024 * 1024),
              "Capacity of a segment's offset and time index files; a segment whose index is full "
              "is closed (8-byte offset entries, 12-byte time entries).",
              Range(4, INT_MAX), synonym="log.index.size.max.bytes"),
    ConfigDef("index.interval.bytes", INT, "4096",
              "Bytes of batches between two offset-index entries: smaller means denser indexes and "
              "shorter scans on lookup.",
              Range(0, INT_MAX), synonym="log.index.interval.bytes"),
    ConfigDef("preallocate", BOOLEAN, "false",
              "Kafka reserves segment.bytes on disk when it creates a segment. kshim grows segment "
              "files as it writes; nothing a client sees depends on it.",
              synonym="log.preallocate"),
    # ---------------------------------------------------------------- flushing
    ConfigDef("flush.messages", LONG, str(LONG_MAX),
              "Force an fsync of the log after this many records; the default leaves flushing to the OS.",
              Range(1, LONG_MAX), synonym="log.flush.interval.messages"),
    ConfigDef("flush.ms", LONG, str(LONG_MAX),
              "Force an fsync of the log when the previous one is this old; the default leaves "
              "flushing to the OS.",
              Range(0, LONG_MAX), synonym="log.flush.interval.ms"),
    # ---------------------------------------------------------------- messages
    ConfigDef("max.message.bytes", INT, _MAX_MESSAGE_BYTES,
              "Largest record batch the partition accepts, as stored (after any recompression); "
              "larger ones fail with MESSAGE_TOO_LARGE.",
              Range(0, INT_MAX), synonym="message.max.bytes"),
    ConfigDef("compression.type", STRING, "producer",
              "Codec batches are stored with: 'producer' stores them as sent; gzip, snappy, lz4 or "
              "zstd make the broker recompress batches sent with another codec; 'uncompressed' "
              "stores them decompressed.",
              Choice(tuple(COMPRESSION_CODECS)), synonym="compression.type"),
    ConfigDef("compression.gzip.level", INT, "-1",
              "gzip level used when the broker recompresses to gzip: 1 (fast) to 9 (small), or -1 "
              "for zlib's default.",
              CompressionLevel(1, 9, also=-1), synonym="compression.gzip.level"),
    ConfigDef("compression.lz4.level", INT, "9",
              "lz4 level used when the broker recompresses to lz4: 1 to 17.",
              CompressionLevel(1, 17), synonym="compression.lz4.level"),
    ConfigDef("compression.zstd.level", INT, "3",
              "zstd level used when the broker recompresses to zstd: -131072 to 22.",
              CompressionLevel(-131072, 22), synonym="compression.zstd.level"),
    ConfigDef("message.timestamp.type", STRING, "CreateTime",
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps every batch with the "
              "broker's clock as it is appended.",
              Choice(("CreateTime", "LogAppendTime")), synonym="log.message.timestamp.type"),
    ConfigDef("message.timestamp.before.max.ms", LONG, str(LONG_MAX),
              "With CreateTime, a batch holding a timestamp more than this far behind the broker's "
              "clock fails with INVALID_TIMESTAMP.",
              Range(0, LONG_MAX), synonym="log.message.timestamp.before.max.ms"),
    ConfigDef("message.timestamp.after.max.ms", LONG, "3600000",
              "With CreateTime, a batch holding a timestamp more than this far ahead of the broker's "
              "clock fails with INVALID_TIMESTAMP.",
              Range(0, LONG_MAX), synonym="log.message.timestamp.after.max.ms"),
    ConfigDef("message.downconversion.enable", BOOLEAN, "true",
              "Kept for compatibility: since Kafka 4.0 no broker converts batches down to older "
              "formats for old consumers, and neither does kshim, whatever the value.",
              synonym="log.message.downconversion.enable"),
    # ---------------------------------------------------------------- replication
    ConfigDef("min.insync.replicas", INT, "1",
              "acks=all produce fails with NOT_ENOUGH_REPLICAS when fewer replicas are in sync.",
              Range(1, INT_MAX), synonym="min.insync.replicas"),
    ConfigDef("unclean.leader.election.enable", BOOLEAN, "false",
              "Elect an out-of-sync replica when no in-sync one is alive: available again, but COMMITTED "
              "records that replica lacks are lost.",
              synonym="unclean.leader.election.enable"),
    ConfigDef("leader.replication.throttled.replicas", LIST, "",
              "Replicas ('*' or partition:broker pairs) whose leader-side replication counts against "
              "leader.replication.throttled.rate; kshim has no throttle rate, which is Kafka's "
              "unthrottled default.",
              ThrottledReplicas()),
    ConfigDef("follower.replication.throttled.replicas", LIST, "",
              "Replicas ('*' or partition:broker pairs) whose follower-side fetching counts against "
              "follower.replication.throttled.rate; kshim has no throttle rate, which is Kafka's "
              "unthrottled default.",
              ThrottledReplicas()),
    # ---------------------------------------------------------------- tiered storage (absent)
    ConfigDef("remote.storage.enable", BOOLEAN, "false",
              "Tiered storage: kshim has none, so only false is accepted.",
              RemoteStorage()),
    ConfigDef("remote.log.copy.disable", BOOLEAN, "false",
              "Tiered storage only: stop copying segments to remote storage. No effect without it.",),
    ConfigDef("remote.log.delete.on.disable", BOOLEAN, "false",
              "Tiered storage only: delete remote data when tiered storage is turned off. No effect "
              "without it."),
    # ---------------------------------------------------------------- compaction (docs/compaction.md)
    ConfigDef("cleanup.policy", LIST, "delete",
              "delete: closed segments go by retention.ms / retention.bytes. compact: the log cleaner "
              "keeps at least the last record of every key below the active segment (offsets never "
              "change) and drops tombstones delete.retention.ms after cleaning them. compact,delete: both. "
              "Empty: neither, records stay until DeleteRecords removes them (Kafka 4.2's infinite retention).",
              Choice(("compact", "delete"), empty=True), synonym="log.cleanup.policy"),
    ConfigDef("delete.retention.ms", LONG, str(24 * 3600 * 1000),
              "On a compacted topic, how long a tombstone (a record with a null value) stays once the "
              "cleaner has cleaned the batch holding it, so consumers reading from the start see it.",
              Range(0, LONG_MAX), synonym="log.cleaner.delete.retention.ms"),
    ConfigDef("min.cleanable.dirty.ratio", DOUBLE, "0.5",
              "The cleaner cleans a compacted log once its dirty (not yet cleaned) bytes reach this "
              "share of its cleanable bytes (unless max.compaction.lag.ms forces it sooner).",
              Range(0, 1), synonym="log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.compaction.lag.ms", LONG, "0",
              "A record stays uncompacted at least this long: segments holding newer records are not cleaned.",
              Range(0, LONG_MAX), synonym="log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", LONG, str(LONG_MAX),
              "A record is compacted at most this long after it was written, whatever the dirty ratio; "
              "the active segment of a compacted topic also rolls at this age.",
              Range(1, LONG_MAX), synonym="log.cleaner.max.compaction.lag.ms"),
    # ---------------------------------------------------------------- kshim's own
    ConfigDef("kshim.commit.quorum", STRING, "isr",
              "isr: a record is COMMITTED once every in-sync replica has it (Kafka). majority: once a "
              "majority of the assigned replicas have it.",
              Choice(("isr", "majority")), synonym="kshim.commit.quorum"),
    ConfigDef("kshim.uncommitted.read.limit", STRING, "log-end",
              "How far read_uncommitted consumers read: the leader's log end (UNCOMMITTED records "
              "included) or the high watermark, as Kafka itself does.",
              Choice(("log-end", "high-watermark")), synonym="kshim.uncommitted.read.limit"),
]}

# the broker settings DescribeConfigs reports, in its order: static ones from the command line,
# then the dynamic cluster-wide defaults of topic configs (below)
_STATIC_BROKER_CONFIGS = [
    ConfigDef("broker.id", INT, "-1", "This broker's node id.", dynamic=False),
    ConfigDef("node.id", INT, "-1", "This broker's node id.", dynamic=False),
    ConfigDef("advertised.listeners", STRING, None, "The address clients are told to connect to.", dynamic=False),
    ConfigDef("listeners", STRING, None, "The listeners, NAME://HOST:PORT each (docs/security.md).", dynamic=False),
    ConfigDef("sasl.enabled.mechanisms", STRING, "GSSAPI", "SASL mechanisms enabled on SASL listeners.",
              dynamic=False),
    ConfigDef("ssl.client.auth", STRING, "none", "Whether TLS clients must present a certificate.", dynamic=False),
    ConfigDef("connection.failed.authentication.delay.ms", INT, "100",
              "Delay before a failed authentication is answered and its connection closed.", dynamic=False),
    ConfigDef("connections.max.reauth.ms", LONG, "0",
              "SASL session lifetime; clients re-authenticate before it ends (0: no end).", dynamic=False),
    ConfigDef("num.partitions", INT, "1",
              "Partitions of a topic created without an explicit count, or auto-created.", dynamic=False),
    ConfigDef("auto.create.topics.enable", BOOLEAN, "true",
              "Whether metadata requests and produces create unknown topics.", dynamic=False),
    ConfigDef("default.replication.factor", INT, "1",
              "Replicas of a new topic: always 1 on a single broker.", dynamic=False),
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
    ConfigDef("log.cleaner.io.max.bytes.per.second", DOUBLE, str(float(100 * 1024 * 1024)),
              "Bytes per second the log cleaner reads and writes (serve's --log-cleaner-io-max-bytes-per-second; "
              "Kafka's default is unlimited).", dynamic=False),
    ConfigDef("log.cleaner.dedupe.buffer.size", LONG, str(128 * 1024 * 1024),
              "Memory for the log cleaner's key -> offset map (serve's --log-cleaner-dedupe-buffer-size).",
              dynamic=False),
    ConfigDef("log.cleaner.backoff.ms", LONG, "15000",
              "Pause between the log cleaner's looks at the compacted partitions (serve's --log-cleaner-backoff-ms).",
              dynamic=False),
    ConfigDef("group.initial.rebalance.delay.ms", INT, "3000",
              "How long a classic consumer group's first rebalance waits for more members, extended by as much "
              "again (up to the rebalance timeout) while members keep joining "
              "(serve's --group-initial-rebalance-delay-ms).", dynamic=False),
    ConfigDef("authorizer.class.name", STRING, "",
              "The authorizer enforcing ACLs (serve's --authorizer); empty: none, every request is allowed.",
              dynamic=False),
    ConfigDef("super.users", STRING, None,
              "Principals (semicolon-separated, User:NAME) allowed everything whatever the ACLs "
              "(serve's --super-users).", dynamic=False),
    ConfigDef("allow.everyone.if.no.acl.found", BOOLEAN, "false",
              "Whether a resource no ACL applies to is open to everyone (serve's --allow-everyone-if-no-acl-found).",
              dynamic=False),
    ConfigDef("quota.window.num", INT, "11",
              "Samples over which client quota rates are measured (serve's --quota-window-num).", dynamic=False),
    ConfigDef("quota.window.size.seconds", INT, "1",
              "Length of one client quota sample (serve's --quota-window-size-seconds).", dynamic=False),
    ConfigDef("kshim.request.stall.timeout.ms", LONG, "30000",
              "A connection that stops sending halfway through a request is closed after this long.",
              dynamic=False),
]

# kshim's own topic configs take their broker defaults from the cluster's command line only
_STATIC_SYNONYMS = {"kshim.commit.quorum", "kshim.uncommitted.read.limit"}


def _broker_synonym(topic: ConfigDef) -> ConfigDef:
    """The broker-level default of a topic config: same type, range and default. Dynamic (as in
    Kafka, where every log.* topic default is cluster-wide dynamic) except kshim's own."""
    assert topic.synonym is not None
    return ConfigDef(topic.synonym, topic.type, topic.default,
                     f"Default of the topic config {topic.name} for topics that do not set it. {topic.doc}",
                     topic.validator, dynamic=topic.synonym not in _STATIC_SYNONYMS)


# ---- topic-config defaults at broker level (cluster-wide dynamic, or per broker)
_TOPIC_DEFAULT_BROKER_CONFIGS = [_broker_synonym(d) for d in TOPIC_CONFIGS.values() if d.synonym is not None]

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in [*_STATIC_BROKER_CONFIGS, *_TOPIC_DEFAULT_BROKER_CONFIGS]}


def topic_definition(name: str) -> ConfigDef:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        if name in REMOVED_TOPIC_CONFIGS:
            raise InvalidConfig(f"topic config {name!r} no longer exists: {REMOVED_TOPIC_CONFIGS[name]}")
        raise InvalidConfig(f"unknown topic config {name!r}")
    return definition


def broker_definition(name: str) -> ConfigDef:
    """A broker config that (Incremental)AlterConfigs may change: known and dynamic."""
    definition = BROKER_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"unknown broker config {name!r}")
    if not definition.dynamic:
        raise InvalidConfig(f"broker config {name!r} is read-only: it is set on the command line "
                            f"of `kshim serve` and cannot be changed at runtime")
    return definition
