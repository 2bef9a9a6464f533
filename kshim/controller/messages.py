"""The control-plane messages between the controller process, its brokers and `kshim ctl`.

Framing: an int32 size, then the body. A request body is its correlation id (int32), its message
type (int16) and the typed request; a response body is the correlation id, the message type it
answers, a Kafka error code (int16, `wire.errors.ErrorCode`), a nullable message text, and, only
when the error code is NONE, the typed response. Integers are big-endian; strings are UTF-8
with a length prefix; a nullable value has a one-byte presence flag. A body must be consumed
exactly: trailing bytes make the frame malformed.

Every message is a frozen dataclass; the construct codecs map dataclasses to bytes and back, so
a MetadataImage (uuids, config dicts in their order, tuples of replica ids) round-trips exactly.
Mutating responses carry the controller's image version after the change: the broker that asked
waits until it has applied that version before it answers its own client.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any, ClassVar

from construct import (
    Adapter,
    Bytes,
    ConstructError,
    Error,
    Flag,
    If,
    Int16sb,
    Int16ub,
    Int32sb,
    Int32ub,
    Int64sb,
    PascalString,
    PrefixedArray,
    Struct,
    Switch,
    Terminated,
    this,
)

from kshim.cluster.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from wire.errors import ErrorCode

SIZE_BYTES = 4
MAX_FRAME_BYTES = 64 * 1024 * 1024  # an image of thousands of partitions is a few hundred KiB


class FrameError(Exception):
    """A frame that does not decode: the connection that sent it is closed."""


class MessageType(IntEnum):
    # broker -> controller
    REGISTER = 1
    HEARTBEAT = 2
    CREATE_TOPIC = 3
    DELETE_TOPIC = 4
    CREATE_PARTITIONS = 5
    SET_TOPIC_CONFIGS = 6
    ALLOCATE_PRODUCER_IDS = 7
    ALTER_PARTITION = 8
    # kshim ctl -> controller
    STATUS = 32
    KILL = 33
    START = 34
    PAUSE = 35
    RESUME = 36
    ISOLATE = 37
    HEAL = 38


# ---------------------------------------------------------------------------------------- codecs
_String = PascalString(Int32ub, "utf8")


class _Nullable(Adapter):
    """None, or a value of `subcon`, behind a presence flag."""

    def __init__(self, subcon) -> None:
        super().__init__(Struct("present" / Flag, "value" / If(this.present, subcon)))

    def _decode(self, obj, context, path):
        return obj.value if obj.present else None

    def _encode(self, obj, context, path):
        return {"present": obj is not None, "value": obj}


class _Uuid(Adapter):
    def __init__(self) -> None:
        super().__init__(Bytes(16))

    def _decode(self, obj, context, path):
        return uuid.UUID(bytes=bytes(obj))

    def _encode(self, obj, context, path):
        return obj.bytes


class _Tuple(Adapter):
    """A tuple of `subcon` values (a list on the wire, a tuple in the dataclasses)."""

    def __init__(self, subcon) -> None:
        super().__init__(PrefixedArray(Int32ub, subcon))

    def _decode(self, obj, context, path):
        return tuple(obj)

    def _encode(self, obj, context, path):
        return list(obj)


class _StringMap(Adapter):
    """dict[str, str | None] in insertion order."""

    def __init__(self) -> None:
        super().__init__(PrefixedArray(Int32ub, Struct("key" / _String, "value" / _Nullable(_String))))

    def _decode(self, obj, context, path):
        return {entry.key: entry.value for entry in obj}

    def _encode(self, obj, context, path):
        return [{"key": k, "value": v} for k, v in obj.items()]


class _Record(Adapter):
    """A dataclass, field by field, in the order of `struct`'s fields."""

    def __init__(self, cls: type, struct: Struct) -> None:
        super().__init__(struct)
        self.cls = cls
        self.names = [f.name for f in fields(cls)]

    def _decode(self, obj, context, path):
        return self.cls(**{name: obj[name] for name in self.names})

    def _encode(self, obj, context, path):
        if not isinstance(obj, self.cls):
            raise ConstructError(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        return {name: getattr(obj, name) for name in self.names}


class _Keyed(Adapter):
    """dict[key, value] stored as the list of its values (each value holds its key)."""

    def __init__(self, subcon, key: str) -> None:
        super().__init__(PrefixedArray(Int32ub, subcon))
        self.key = key

    def _decode(self, obj, context, path):
        return {getattr(v, self.key): v for v in obj}

    def _encode(self, obj, context, path):
        return list(obj.values())


BrokerInfoCodec = _Record(BrokerInfo, Struct(
    "node_id" / Int32sb, "host" / _String, "port" / Int32sb, "epoch" / Int64sb,
    "alive" / Flag, "isolated" / Flag, "pid" / Int32sb))

PartitionInfoCodec = _Record(PartitionInfo, Struct(
    "index" / Int32sb, "replicas" / _Tuple(Int32sb), "leader" / Int32sb, "leader_epoch" / Int32sb,
    "isr" / _Tuple(Int32sb), "partition_epoch" / Int32sb))

TopicInfoCodec = _Record(TopicInfo, Struct(
    "name" / _String, "topic_id" / _Uuid(), "configs" / _StringMap(),
    "partitions" / _Tuple(PartitionInfoCodec)))

MetadataImageCodec = _Record(MetadataImage, Struct(
    "version" / Int64sb, "cluster_id" / _String, "controller_id" / Int32sb,
    "brokers" / _Keyed(BrokerInfoCodec, "node_id"), "topics" / _Keyed(TopicInfoCodec, "name")))


# ---------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Register:
    TYPE: ClassVar[MessageType] = MessageType.REGISTER
    node_id: int
    host: str
    port: int
    pid: int


@dataclass(frozen=True)
class ReplicaOffsets:
    topic: str
    partition: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True)
class Heartbeat:
    """Also a long-poll: answered as soon as the image version passes known_image_version, else
    after wait_ms with no image."""
    TYPE: ClassVar[MessageType] = MessageType.HEARTBEAT
    node_id: int
    broker_epoch: int
    known_image_version: int
    wait_ms: int
    offsets: tuple[ReplicaOffsets, ...] = ()


@dataclass(frozen=True)
class CreateTopic:
    TYPE: ClassVar[MessageType] = MessageType.CREATE_TOPIC
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True)
class DeleteTopic:
    TYPE: ClassVar[MessageType] = MessageType.DELETE_TOPIC
    name: str


@dataclass(frozen=True)
class CreatePartitions:
    TYPE: ClassVar[MessageType] = MessageType.CREATE_PARTITIONS
    name: str
    total: int
    validate_only: bool = False


@dataclass(frozen=True)
class SetTopicConfigs:
    TYPE: ClassVar[MessageType] = MessageType.SET_TOPIC_CONFIGS
    name: str
    configs: dict[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True)
class AllocateProducerIds:
    TYPE: ClassVar[MessageType] = MessageType.ALLOCATE_PRODUCER_IDS
    count: int


@dataclass(frozen=True)
class AlterPartition:
    TYPE: ClassVar[MessageType] = MessageType.ALTER_PARTITION
    node_id: int
    broker_epoch: int
    topic: str
    index: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True)
class Status:
    TYPE: ClassVar[MessageType] = MessageType.STATUS


@dataclass(frozen=True)
class Kill:
    TYPE: ClassVar[MessageType] = MessageType.KILL
    node_id: int


@dataclass(frozen=True)
class Start:
    TYPE: ClassVar[MessageType] = MessageType.START
    node_id: int


@dataclass(frozen=True)
class Pause:
    TYPE: ClassVar[MessageType] = MessageType.PAUSE
    node_id: int


@dataclass(frozen=True)
class Resume:
    TYPE: ClassVar[MessageType] = MessageType.RESUME
    node_id: int


@dataclass(frozen=True)
class Isolate:
    TYPE: ClassVar[MessageType] = MessageType.ISOLATE
    node_id: int


@dataclass(frozen=True)
class Heal:
    TYPE: ClassVar[MessageType] = MessageType.HEAL
    node_id: int


NODE_COMMANDS: dict[str, type] = {"kill": Kill, "start": Start, "pause": Pause, "resume": Resume,
                                  "isolate": Isolate, "heal": Heal}


# ---------------------------------------------------------------------------------------- responses
@dataclass(frozen=True)
class RegisterResult:
    broker_epoch: int
    image: MetadataImage


@dataclass(frozen=True)
class HeartbeatResult:
    image: MetadataImage | None  # None: nothing newer than known_image_version within wait_ms


@dataclass(frozen=True)
class CreateTopicResult:
    version: int
    topic: TopicInfo | None  # None for validate_only


@dataclass(frozen=True)
class DeleteTopicResult:
    version: int
    topic_id: uuid.UUID


@dataclass(frozen=True)
class VersionResult:
    """CreatePartitions and SetTopicConfigs: the image version that holds the change."""
    version: int


@dataclass(frozen=True)
class AllocateProducerIdsResult:
    version: int
    first_id: int


@dataclass(frozen=True)
class AlterPartitionResult:
    version: int
    partition: PartitionInfo


@dataclass(frozen=True)
class StatusResult:
    json: str


@dataclass(frozen=True)
class CommandResult:
    """A ctl node command: the controller's image version afterwards and what was done."""
    version: int
    text: str


def _node(cls: type) -> _Record:
    return _Record(cls, Struct("node_id" / Int32sb))


_REQUESTS: dict[MessageType, tuple[type, Any]] = {
    MessageType.REGISTER: (Register, _Record(Register, Struct(
        "node_id" / Int32sb, "host" / _String, "port" / Int32sb, "pid" / Int32sb))),
    MessageType.HEARTBEAT: (Heartbeat, _Record(Heartbeat, Struct(
        "node_id" / Int32sb, "broker_epoch" / Int64sb, "known_image_version" / Int64sb, "wait_ms" / Int32sb,
        "offsets" / _Tuple(_Record(ReplicaOffsets, Struct(
            "topic" / _String, "partition" / Int32sb, "log_end_offset" / Int64sb, "high_watermark" / Int64sb)))))),
    MessageType.CREATE_TOPIC: (CreateTopic, _Record(CreateTopic, Struct(
        "name" / _String, "partitions" / Int32sb, "replication_factor" / Int32sb, "configs" / _StringMap(),
        "validate_only" / Flag))),
    MessageType.DELETE_TOPIC: (DeleteTopic, _Record(DeleteTopic, Struct("name" / _String))),
    MessageType.CREATE_PARTITIONS: (CreatePartitions, _Record(CreatePartitions, Struct(
        "name" / _String, "total" / Int32sb, "validate_only" / Flag))),
    MessageType.SET_TOPIC_CONFIGS: (SetTopicConfigs, _Record(SetTopicConfigs, Struct(
        "name" / _String, "configs" / _StringMap(), "validate_only" / Flag))),
    MessageType.ALLOCATE_PRODUCER_IDS: (AllocateProducerIds, _Record(AllocateProducerIds, Struct(
        "count" / Int32sb))),
    MessageType.ALTER_PARTITION: (AlterPartition, _Record(AlterPartition, Struct(
        "node_id" / Int32sb, "broker_epoch" / Int64sb, "topic" / _String, "index" / Int32sb,
        "leader_epoch" / Int32sb, "partition_epoch" / Int32sb, "new_isr" / _Tuple(Int32sb)))),
    MessageType.STATUS: (Status, _Record(Status, Struct())),
    MessageType.KILL: (Kill, _node(Kill)),
    MessageType.START: (Start, _node(Start)),
    MessageType.PAUSE: (Pause, _node(Pause)),
    MessageType.RESUME: (Resume, _node(Resume)),
    MessageType.ISOLATE: (Isolate, _node(Isolate)),
    MessageType.HEAL: (Heal, _node(Heal)),
}

_command_result = _Record(CommandResult, Struct("version" / Int64sb, "text" / _String))
_version_result = _Record(VersionResult, Struct("version" / Int64sb))

_RESPONSES: dict[MessageType, tuple[type, Any]] = {
    MessageType.REGISTER: (RegisterResult, _Record(RegisterResult, Struct(
        "broker_epoch" / Int64sb, "image" / MetadataImageCodec))),
    MessageType.HEARTBEAT: (HeartbeatResult, _Record(HeartbeatResult, Struct(
        "image" / _Nullable(MetadataImageCodec)))),
    MessageType.CREATE_TOPIC: (CreateTopicResult, _Record(CreateTopicResult, Struct(
        "version" / Int64sb, "topic" / _Nullable(TopicInfoCodec)))),
    MessageType.DELETE_TOPIC: (DeleteTopicResult, _Record(DeleteTopicResult, Struct(
        "version" / Int64sb, "topic_id" / _Uuid()))),
    MessageType.CREATE_PARTITIONS: (VersionResult, _version_result),
    MessageType.SET_TOPIC_CONFIGS: (VersionResult, _version_result),
    MessageType.ALLOCATE_PRODUCER_IDS: (AllocateProducerIdsResult, _Record(AllocateProducerIdsResult, Struct(
        "version" / Int64sb, "first_id" / Int64sb))),
    MessageType.ALTER_PARTITION: (AlterPartitionResult, _Record(AlterPartitionResult, Struct(
        "version" / Int64sb, "partition" / PartitionInfoCodec))),
    MessageType.STATUS: (StatusResult, _Record(StatusResult, Struct("json" / _String))),
    **{t: (CommandResult, _command_result) for t in (MessageType.KILL, MessageType.START, MessageType.PAUSE,
                                                     MessageType.RESUME, MessageType.ISOLATE, MessageType.HEAL)},
}

_RequestFrame = Struct(
    "correlation_id" / Int32sb,
    "type" / Int16ub,
    "body" / Switch(this.type, {int(t): codec for t, (_, codec) in _REQUESTS.items()},
                    default=Error),
    Terminated,
)

_ResponseFrame = Struct(
    "correlation_id" / Int32sb,
    "type" / Int16ub,
    "error_code" / Int16sb,
    "message" / _Nullable(_String),
    "body" / If(this.error_code == 0, Switch(this.type, {int(t): codec for t, (_, codec) in _RESPONSES.items()},
                                              default=Error)),
    Terminated,
)


@dataclass(frozen=True)
class Response:
    correlation_id: int
    type: MessageType
    error_code: ErrorCode
    message: str | None
    body: Any  # the typed response; None when error_code is not NONE


def _framed(body: bytes) -> bytes:
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"a {len(body)}-byte frame exceeds the {MAX_FRAME_BYTES}-byte limit")
    return len(body).to_bytes(SIZE_BYTES, "big") + body


def encode_request(correlation_id: int, request: Any) -> bytes:
    """The framed request (size prefix included)."""
    try:
        return _framed(_RequestFrame.build({"correlation_id": correlation_id, "type": int(request.TYPE),
                                            "body": request}))
    except (ConstructError, AttributeError) as e:
        raise FrameError(f"cannot encode {request!r}: {e}") from None


def decode_request(body: bytes) -> tuple[int, Any]:
    """(correlation id, request) from a frame body (size prefix removed)."""
    try:
        parsed = _RequestFrame.parse(body)
        MessageType(parsed.type)
        return parsed.correlation_id, parsed.body
    except (ConstructError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise FrameError(f"malformed request: {e}") from None


def request_type(body: bytes) -> tuple[int, int] | None:
    """(correlation id, type) of a request body that may not decode, or None if too short."""
    if len(body) < 6:
        return None
    return int.from_bytes(body[:4], "big", signed=True), int.from_bytes(body[4:6], "big")


def encode_response(correlation_id: int, type_: MessageType, body: Any = None,
                    error_code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> bytes:
    """The framed response; `body` only when error_code is NONE."""
    if error_code == ErrorCode.NONE:
        expected = _RESPONSES[MessageType(type_)][0]
        if not isinstance(body, expected):
            raise FrameError(f"{MessageType(type_).name} answers {expected.__name__}, not {type(body).__name__}")
    try:
        return _framed(_ResponseFrame.build({"correlation_id": correlation_id, "type": int(type_),
                                             "error_code": int(error_code), "message": message,
                                             "body": body if error_code == ErrorCode.NONE else None}))
    except ConstructError as e:
        raise FrameError(f"cannot encode the {MessageType(type_).name} response: {e}") from None


def decode_response(body: bytes) -> Response:
    try:
        parsed = _ResponseFrame.parse(body)
        return Response(parsed.correlation_id, MessageType(parsed.type), ErrorCode(parsed.error_code),
                        parsed.message, parsed.body)
    except (ConstructError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise FrameError(f"malformed response: {e}") from None


def frame_size(header: bytes) -> int:
    """The body size announced by a 4-byte frame header; FrameError if out of bounds."""
    size = int.from_bytes(header, "big", signed=True)
    if not 0 < size <= MAX_FRAME_BYTES:
        raise FrameError(f"frame size {size} is outside 1..{MAX_FRAME_BYTES}")
    return size
