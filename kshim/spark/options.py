"""The data source's options, named as Spark's own Kafka source and sink name them.

Options reach a Python data source as a case-insensitive map of strings. They are parsed once, on
the driver, into frozen dataclasses: those travel to executors inside pickled readers and writers,
so they hold plain data only (no clients).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import overload

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

# kafka.* settings the source or sink decides itself (Spark refuses the same ones, for the same
# reasons): offsets are tracked by Spark's checkpoint, never by the client or a group.
_REFUSED_CLIENT_SETTINGS = {
    "auto.offset.reset": "use the option startingOffsets",
    "enable.auto.commit": "the source never commits offsets; Spark checkpoints them",
    "enable.auto.offset.store": "the source never stores offsets; Spark checkpoints them",
    "enable.partition.eof": "the source needs end-of-partition events to end ranges",
    "key.deserializer": "keys are always read as binary",
    "value.deserializer": "values are always read as binary",
    "key.serializer": "keys are written from the key column: binary as is, strings as UTF-8",
    "value.serializer": "values are written from the value column: binary as is, strings as UTF-8",
    "interceptor.classes": "interceptors are a Java client feature",
}

# Offset -2 means earliest and -1 latest in offset JSON, as in Spark and Kafka's ListOffsets.
EARLIEST = -2
LATEST = -1

OffsetSpec = str | dict[str, dict[str, int]]  # "earliest", "latest", or {"topic": {"0": 12}}


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _flag(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


@overload
def _positive_int(opts: dict[str, str], name: str, default: int) -> int: ...


@overload
def _positive_int(opts: dict[str, str], name: str, default: None) -> int | None: ...


def _positive_int(opts: dict[str, str], name: str, default: int | None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"option {name} must be positive, not {value}")
    return value


def _client_settings(opts: dict[str, str]) -> dict[str, str]:
    """Every kafka.* option without its prefix: librdkafka settings, passed through unchanged."""
    settings = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    for name, why in _REFUSED_CLIENT_SETTINGS.items():
        if name in settings:
            raise ValueError(f"option kafka.{name} is not supported: {why}")
    if not settings.get("bootstrap.servers"):
        raise ValueError("option kafka.bootstrap.servers is required")
    return settings


def include_headers(options: Mapping[str, str]) -> bool:
    return _flag(_lowered(options), "includeHeaders", False)


def parse_offset_spec(raw: str | None, name: str, default: str) -> OffsetSpec:
    """`earliest`, `latest` or Spark's offset JSON {"topic": {"partition": offset}}."""
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f'option {name} must be earliest, latest or JSON like {{"topic": {{"0": 12}}}}, '
                         f"not {raw!r}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError(f'option {name} JSON must map topics to {{"partition": offset}}, not {raw!r}')
    spec: dict[str, dict[str, int]] = {}
    for topic, parts in parsed.items():
        spec[topic] = {}
        for part, offset in parts.items():
            if not str(part).isdigit() or not isinstance(offset, int) or offset < EARLIEST:
                raise ValueError(f"option {name}: bad partition/offset {part!r}: {offset!r} for topic {topic}")
            spec[topic][str(int(part))] = offset
    return spec


@dataclass(frozen=True)
class ReadOptions:
    """What a read (batch or streaming) needs; picklable."""

    client: dict[str, str]                      # kafka.* settings without the prefix
    topics: tuple[str, ...] = ()                # subscribe
    assign: tuple[tuple[str, int], ...] = ()    # assign: explicit (topic, partition) pairs
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    isolation_level: str = "read_uncommitted"   # Spark's default (the Kafka consumer's default)
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_s: float = 120.0               # kafkaConsumer.pollTimeoutMs
    offset_retries: int = 3                     # fetchOffset.numRetries
    offset_retry_interval_s: float = 0.01       # fetchOffset.retryIntervalMs
    group_id: str = field(default_factory=lambda: f"spark-kafka-source-{uuid.uuid4()}")

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> "ReadOptions":
        opts = _lowered(options)
        client = _client_settings(opts)
        isolation = client.pop("isolation.level", "read_uncommitted").strip().lower()
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"option kafka.isolation.level must be one of {ISOLATION_LEVELS}, not {isolation!r}")
        group_id = client.pop("group.id", None) or f"{opts.get('groupidprefix', 'spark-kafka-source')}-{uuid.uuid4()}"

        chosen = [name for name in ("subscribe", "assign", "subscribepattern") if opts.get(name)]
        if len(chosen) != 1:
            raise ValueError("exactly one of the options subscribe (a comma-separated topic list) or assign "
                             '(JSON like {"topic": [0, 1]}) is required')
        topics: tuple[str, ...] = ()
        assign: tuple[tuple[str, int], ...] = ()
        if chosen[0] == "subscribepattern":
            raise ValueError("option subscribePattern is not supported by kshim.spark; use subscribe or assign")
        if chosen[0] == "subscribe":
            topics = tuple(sorted({t.strip() for t in opts["subscribe"].split(",") if t.strip()}))
            if not topics:
                raise ValueError("option subscribe names no topic")
        else:
            try:
                parsed = json.loads(opts["assign"])
                assign = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
            except (ValueError, TypeError, AttributeError):
                raise ValueError('option assign must be JSON like {"topic": [0, 1]}, '
                                 f'not {opts["assign"]!r}') from None

        starting = parse_offset_spec(opts.get("startingoffsets"), "startingOffsets",
                                     "latest" if streaming else "earliest")
        ending = parse_offset_spec(opts.get("endingoffsets"), "endingOffsets", "latest")
        if streaming and "endingoffsets" in opts:
            raise ValueError("option endingOffsets is for batch queries only")
        if not streaming:
            # Spark's rules: a batch cannot start at latest nor end at earliest
            if starting == "latest" or (isinstance(starting, dict) and
                                        any(o == LATEST for ps in starting.values() for o in ps.values())):
                raise ValueError("startingOffsets latest (or -1) is not allowed for batch queries")
            if ending == "earliest" or (isinstance(ending, dict) and
                                        any(o == EARLIEST for ps in ending.values() for o in ps.values())):
                raise ValueError("endingOffsets earliest (or -2) is not allowed for batch queries")
            if "maxoffsetspertrigger" in opts:
                raise ValueError("option maxOffsetsPerTrigger is for streaming queries only")
        for unsupported in ("startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
                            "endingoffsetsbytimestamp", "minoffsetspertrigger", "maxtriggerdelay", "minpartitions"):
            if unsupported in opts:
                raise ValueError(f"option {unsupported} is not supported by kshim.spark (see docs/spark.md)")

        return cls(
            client=client,
            topics=topics,
            assign=assign,
            starting=starting,
            ending=ending,
            isolation_level=isolation,
            max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger", None),
            include_headers=_flag(opts, "includeHeaders", False),
            fail_on_data_loss=_flag(opts, "failOnDataLoss", True),
            poll_timeout_s=_positive_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000) / 1000,
            offset_retries=_positive_int(opts, "fetchOffset.numRetries", 3),
            offset_retry_interval_s=_positive_int(opts, "fetchOffset.retryIntervalMs", 10) / 1000,
            group_id=group_id,
        )

    def admin_config(self) -> dict[str, str | int | float | bool]:
        """The driver's client, which only asks for metadata and offsets (ListOffsets)."""
        return dict(self.client)

    def consumer_config(self) -> dict[str, object]:
        """An executor's consumer: assign() with explicit offsets, no group membership, no commits.

        librdkafka's Python binding insists on a group.id even without subscribe(); nothing joins
        or commits with it. Offsets out of range are an error unless failOnDataLoss=false, when
        the consumer skips to the earliest offset still on the broker.
        """
        return {
            **self.client,
            "group.id": self.group_id,
            "isolation.level": self.isolation_level,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
        }


@dataclass(frozen=True)
class WriteOptions:
    """What a writer (batch or streaming) needs; picklable."""

    client: dict[str, str]
    topic: str | None = None       # overrides any topic column, as in Spark
    flush_timeout_s: float = 330.0  # librdkafka's message.timeout.ms (300 s) plus a margin

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "WriteOptions":
        opts = _lowered(options)
        client = _client_settings(opts)
        client.setdefault("acks", "all")
        client.pop("isolation.level", None)  # a consumer setting; a read option shared by habit
        message_timeout_ms = int(client.get("message.timeout.ms", client.get("delivery.timeout.ms", 300_000)))
        return cls(client=client, topic=(opts.get("topic") or "").strip() or None,
                   flush_timeout_s=message_timeout_ms / 1000 + 30)

    def producer_config(self) -> dict[str, str]:
        return dict(self.client)
