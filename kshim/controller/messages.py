"""The control-plane operations between the controller process, its brokers and `kshim ctl`.

Each operation is declared once: a frozen dataclass subclassing Operation[Result] with its type
code. Its wire codec, and its result's, are derived from the type hints (kshim.controller.schema);
OPERATIONS maps type codes to operations. It is served by the method named after it
(CreateTopic -> create_topic), called with its fields as keyword arguments, of the Controller;
for `served_by=Server.PROCESS`, of the controller process's ControllerService (broker sessions,
the image's status); for `served_by=Server.SUPERVISOR`, of the supervisor of `kshim serve
--brokers N` (status and commands of the processes, on <data-dir>/supervisor.sock). The RPC server and the in-process client both dispatch through `invoke`.
Adding an operation is one schema and one Controller method:

    @dataclass(frozen=True)
    class RenameTopic(Operation[None], code=11, publishes=True):
        name: str
        new_name: str

    class Controller:
        def rename_topic(self, name: str, new_name: str) -> None: ...

and a broker asks `await broker.controller.call(RenameTopic("a", "b"))`, the same through the RPC
or in-process. tests/test_control_plane.py round-trips every registered operation and binds it to
its handler's parameters, so a schema that drifts from its method fails there.

`publishes=True`: the operation changes the image. Every answer carries the controller's image
version once the request was handled; the broker that asked a publishing operation waits until it
has applied that version before it answers its own client.

Framing: an int32 size, then the body. A request body is its correlation id (int32), its type code
(int16) and the request's fields; a response body is the correlation id, the type code it answers,
a Kafka error code (int16, `wire.errors.ErrorCode`), a nullable message text, and, only when the
error code is NONE, the image version (int64) and the typed result. A body must be consumed
exactly: trailing bytes make the frame malformed.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import sqlite3
import re
import typing
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Generic, Mapping, TypeVar

from construct import Construct, ConstructError, Int16sb, Int16ub, Int32sb, Int64sb, Struct, Tell, Terminated

from kshim.cluster.image import MetadataImage, PartitionInfo, QuotaEntityPart, ScramEntry, TopicInfo
from kshim.controller.schema import Int32, Int64, Nullable, String, codec
from kshim.errors import BrokerError
from kshim.security.acls import AclBinding, AclFilter
from wire.errors import ErrorCode

SIZE_BYTES = 4
MAX_FRAME_BYTES = 64 * 1024 * 1024  # an image of thousands of partitions is a few hundred KiB

R = TypeVar("R")


class FrameError(Exception):
    """A frame that does not decode: the connection that sent it is closed."""


class Server(Enum):
    """Whose method serves an operation."""
    CONTROLLER = "controller"  # kshim.controller.controller.Controller: metadata decisions
    PROCESS = "controller process"  # kshim.controller.service.ControllerService: broker sessions
    SUPERVISOR = "supervisor"  # kshim.controller.process.SupervisorService: the processes, for ctl
    BROKER = "broker"  # kshim.cluster.admin.BrokerAdmin: one broker's local chores, for ctl (<broker data dir>/broker.sock)


OPERATIONS: dict[int, type[Operation]] = {}


class Operation(Generic[R]):
    """A control-plane request whose answer is an R. Subclass as a frozen dataclass with
    `code=` (unique), and optionally `publishes=` and `served_by=`."""

    CODE: ClassVar[int]
    RESULT: ClassVar[Any]  # R, the type hint of the result
    PUBLISHES: ClassVar[bool]
    SERVED_BY: ClassVar[Server]
    METHOD: ClassVar[str]  # the serving method: the class name in snake case

    def __init_subclass__(cls, *, code: int, publishes: bool = False, served_by: Server = Server.CONTROLLER,
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code in OPERATIONS:
            raise TypeError(f"{cls.__name__} and {OPERATIONS[code].__name__} share type code {code}")
        cls.CODE, cls.PUBLISHES, cls.SERVED_BY = code, publishes, served_by
        cls.RESULT = next(typing.get_args(base)[0] for base in getattr(cls, "__orig_bases__", ())
                          if typing.get_origin(base) is Operation)
        cls.METHOD = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        OPERATIONS[code] = cls

    def arguments(self) -> dict[str, Any]:
        """The fields, as keyword arguments of the serving method (nested values as they are)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


async def invoke(servers: Mapping[Server, object], request: Operation[R]) -> R:
    """Serve `request` with the method of the object that serves its kind of operation."""
    server = servers.get(request.SERVED_BY)
    if server is None:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"{type(request).__name__} needs the "
                                                     f"{request.SERVED_BY.value}, which is not running here")
    try:
        result = getattr(server, request.METHOD)(**request.arguments())
        return await result if inspect.isawaitable(result) else result
    except (sqlite3.Error, OSError) as e:
        # the metadata store could not be written (a full disk): the operation did not happen,
        # since the controller changes its memory only after the store
        raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"the controller cannot write its metadata: {e}") from e


@dataclass(frozen=True)
class Reply(Generic[R]):
    version: int  # the controller's image version once it handled the request
    result: R


# ---------------------------------------------------------------------------------------- broker -> controller
@dataclass(frozen=True)
class Registration:
    broker_epoch: Int64
    image: MetadataImage


@dataclass(frozen=True)
class Register(Operation[Registration], code=1, served_by=Server.PROCESS):
    node_id: Int32
    host: str
    port: Int32
    pid: Int32


@dataclass(frozen=True)
class ReplicaOffsets:
    topic: str
    partition: Int32
    log_end_offset: Int64
    high_watermark: Int64


@dataclass(frozen=True)
class Heartbeat(Operation[MetadataImage | None], code=2, served_by=Server.PROCESS):
    """Also a long-poll: answered with the image as soon as its version passes
    known_image_version, else after wait_ms with None."""
    node_id: Int32
    broker_epoch: Int64
    known_image_version: Int64
    wait_ms: Int32
    offsets: tuple[ReplicaOffsets, ...] = ()


@dataclass(frozen=True)
class CreateTopic(Operation[TopicInfo | None], code=3, publishes=True):  # None for validate_only
    name: str
    partitions: Int32
    replication_factor: Int32
    configs: dict[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True)
class DeleteTopic(Operation[uuid.UUID], code=4, publishes=True):  # the deleted topic's id
    name: str


@dataclass(frozen=True)
class CreatePartitions(Operation[None], code=5, publishes=True):
    name: str
    total: Int32
    validate_only: bool = False
    # the replicas of each new partition, in order (CreatePartitions' manual assignment); None: kshim places them
    assignments: tuple[tuple[Int32, ...], ...] | None = None


@dataclass(frozen=True)
class SetTopicConfigs(Operation[None], code=6, publishes=True):
    name: str
    configs: dict[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True)
class SetBrokerConfigs(Operation[None], code=12, publishes=True):
    resource: str  # "" for the cluster-wide defaults, else a node id
    configs: dict[str, str | None]  # the resource's whole set of dynamic settings
    validate_only: bool = False


@dataclass(frozen=True)
class SetClientMetrics(Operation[None], code=180, publishes=True):
    """A client-metrics subscription (KIP-714 CLIENT_METRICS resource): its whole set of configs,
    validated by kshim.configs.client_metrics; empty removes it."""
    name: str
    configs: dict[str, str]
    validate_only: bool = False


@dataclass(frozen=True)
class SetGroupConfigs(Operation[None], code=200, publishes=True):
    group: str
    configs: dict[str, str | None]  # the group's whole set of overrides (the broker checked their bounds)
    validate_only: bool = False


@dataclass(frozen=True)
class CreateAcls(Operation[None], code=130, publishes=True):
    """Add ACL bindings (the broker validated each; existing ones stay as they are)."""
    acls: tuple[AclBinding, ...]


@dataclass(frozen=True)
class DeletedAcls:
    acls: tuple[AclBinding, ...]  # the bindings one filter matched, now deleted


@dataclass(frozen=True)
class DeleteAcls(Operation[tuple[DeletedAcls, ...]], code=131, publishes=True):
    """Delete the bindings each filter matches; answers what each filter deleted, in order."""
    filters: tuple[AclFilter, ...]


@dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: str


@dataclass(frozen=True)
class ScramResult:
    user: str
    error_code: Int32
    error_message: str | None


@dataclass(frozen=True)
class AlterScramCredentials(Operation[tuple[ScramResult, ...]], code=120, publishes=True):
    """AlterUserScramCredentials: one result per user named; credentials arrive salted."""
    deletions: tuple[ScramDeletion, ...]
    upsertions: tuple[ScramEntry, ...]


@dataclass(frozen=True)
class QuotaAlteration:
    """One entity of AlterClientQuotas: its (type, name) parts as the client sent them, and the
    keys to set (a value) or remove (None)."""
    entity: tuple[QuotaEntityPart, ...]
    ops: dict[str, float | None]


@dataclass(frozen=True)
class QuotaAlterationResult:
    error_code: Int32  # a wire.errors.ErrorCode
    message: str | None


@dataclass(frozen=True)
class AlterClientQuotas(Operation[tuple[QuotaAlterationResult, ...]], code=160, publishes=True):
    """Each entity succeeds or fails on its own (one result per alteration, in order)."""
    alterations: tuple[QuotaAlteration, ...]
    validate_only: bool = False


@dataclass(frozen=True)
class AllocateProducerIds(Operation[Int64], code=7):  # the first id of the block (KIP-730)
    count: Int32


@dataclass(frozen=True)
class AlterPartition(Operation[PartitionInfo], code=8, publishes=True):
    """A leader's ISR proposal, fenced by its session (node id, broker epoch) and the epochs."""
    node_id: Int32
    broker_epoch: Int64
    topic: str
    index: Int32
    leader_epoch: Int32
    partition_epoch: Int32
    new_isr: tuple[Int32, ...]


@dataclass(frozen=True)
class SetIsolated(Operation[None], code=9, publishes=True):
    """`kshim ctl isolate/heal`, through the supervisor: replication to and from the node stops."""
    node_id: Int32
    isolated: bool


@dataclass(frozen=True)
class ControllerStatus(Operation[str], code=10, served_by=Server.PROCESS):
    """The controller's view, as JSON: its pid and image version, the registered brokers, the
    partitions and the replica offsets the brokers report (the supervisor adds the processes)."""


class Election(Enum):
    """ElectLeaders' election types (the values are what kshim's logs say)."""
    PREFERRED = "preferred"  # move leadership to the first replica, if it is alive and in sync
    UNCLEAN = "unclean"  # a leaderless partition gets any alive replica when no in-sync one is alive


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: Int32
    error_code: Int32  # a wire.errors.ErrorCode
    message: str | None


@dataclass(frozen=True)
class ElectLeaders(Operation[tuple[ElectionResult, ...]], code=110, publishes=True):
    """Kafka's ElectLeaders: one result per asked partition, in order; partitions=None asks for
    every partition and leaves out those whose election was not needed."""
    election: Election
    partitions: dict[str, tuple[Int32, ...]] | None


@dataclass(frozen=True)
class QuorumReplica:
    node_id: Int32
    log_end_offset: Int64  # the last image version it has (the controller's: its own)
    last_fetch_ms: Int64  # wall clock; -1 unknown
    last_caught_up_ms: Int64


@dataclass(frozen=True)
class QuorumState:
    leader_id: Int32
    leader_epoch: Int32  # bumped at every start of the controller (a new "election")
    high_watermark: Int64  # the controller's image version
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]


@dataclass(frozen=True)
class DescribeQuorum(Operation[QuorumState], code=111):
    """DescribeQuorum: the controller as a quorum of one voter, the brokers as observers."""


class FeatureUpgrade(Enum):
    UPGRADE = "upgrade"
    SAFE_DOWNGRADE = "safe downgrade"
    UNSAFE_DOWNGRADE = "unsafe downgrade"


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: Int32  # 0 removes the feature
    upgrade: FeatureUpgrade


@dataclass(frozen=True)
class UpdateFeatures(Operation[None], code=112, publishes=True):
    """Kafka's UpdateFeatures: all the updates or none (the first invalid one is the error)."""
    updates: tuple[FeatureUpdate, ...]
    validate_only: bool = False


@dataclass(frozen=True)
class UnregisterBroker(Operation[None], code=113, publishes=True):
    """Kafka's UnregisterBroker: forget a broker that is gone for good."""
    node_id: Int32


@dataclass(frozen=True)
class Reassignment:
    """One partition of AlterPartitionReassignments: its target replicas, or None to cancel."""
    topic: str
    partition: Int32
    replicas: tuple[Int32, ...] | None


@dataclass(frozen=True)
class ReassignmentResult:
    topic: str
    partition: Int32
    error_code: Int32  # a wire.errors.ErrorCode
    message: str | None


@dataclass(frozen=True)
class AlterPartitionReassignments(Operation[tuple[ReassignmentResult, ...]], code=170, publishes=True):
    """Kafka's AlterPartitionReassignments (KIP-455): each partition on its own, one result per
    partition in order; allow_replication_factor_change=False refuses a target of another size."""
    reassignments: tuple[Reassignment, ...]
    allow_replication_factor_change: bool = True


@dataclass(frozen=True)
class OngoingReassignment:
    topic: str
    partition: Int32
    replicas: tuple[Int32, ...]
    adding: tuple[Int32, ...]
    removing: tuple[Int32, ...]


@dataclass(frozen=True)
class ListPartitionReassignments(Operation[tuple[OngoingReassignment, ...]], code=171):
    """The reassignments under way among the asked partitions (None: all of them); partitions
    and topics that do not exist or are not reassigning are left out, as Kafka does."""
    partitions: dict[str, tuple[Int32, ...]] | None


# ---------------------------------------------------------------------------------------- kshim ctl -> supervisor
@dataclass(frozen=True)
class Status(Operation[str], code=32, served_by=Server.SUPERVISOR):
    """The cluster's processes, brokers and partitions, as JSON."""


class NodeAction(Enum):
    """What `kshim ctl ACTION NODE` does to a broker (the values are the ctl commands)."""
    KILL = "kill"
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    ISOLATE = "isolate"
    HEAL = "heal"


@dataclass(frozen=True)
class NodeCommand(Operation[str], code=33, served_by=Server.SUPERVISOR):  # what was done, for the user
    action: NodeAction
    node_id: Int32


@dataclass(frozen=True)
class KillController(Operation[str], code=34, served_by=Server.SUPERVISOR):
    """`kshim ctl kill controller`: SIGKILL the controller process; the supervisor restarts it."""


@dataclass(frozen=True)
class CompactNow(Operation[str], code=40, served_by=Server.BROKER):
    """`kshim ctl compact TOPIC [PARTITION]`: the broker cleans its replicas of the topic (all
    partitions: -1) now, whatever their dirty ratio; answers a JSON list of what each clean did."""
    topic: str
    partition: Int32 = -1


@dataclass(frozen=True)
class ReplicaStates(Operation[str], code=150, served_by=Server.BROKER):
    """The console (kshim.console): every replica the broker hosts, as JSON: its log start, last
    stable, high watermark and log end offsets, whether it leads, and the ISR it knows."""


@dataclass(frozen=True)
class MetricsText(Operation[str], code=151, served_by=Server.BROKER):
    """The console's /metrics: the broker's own metrics in Prometheus's text format."""


@dataclass(frozen=True)
class ShutdownBroker(Operation[None], code=144, publishes=True):
    """A broker stops cleanly (controlled shutdown): down at once, no fencing when it returns."""
    node_id: Int32
    broker_epoch: Int64


@dataclass(frozen=True)
class BrokerStatus(Operation[str], code=145, served_by=Server.BROKER):
    """`kshim ctl status` on a single `kshim serve` (no supervisor): the broker's own view, as JSON in
    the shape of the cluster's Status (its controller runs in the broker's process)."""


@dataclass(frozen=True)
class TelemetryRead(Operation[str], code=181, served_by=Server.BROKER):
    """`kshim ctl telemetry`: the client instances this broker knows (KIP-714) and the metrics each
    pushed last, a JSON list."""


@dataclass(frozen=True)
class FaultAdd(Operation[str], code=140, served_by=Server.BROKER):
    """`kshim ctl fault add`: a fault rule (kshim.observability.faults, a JSON object) for this broker's requests;
    answers the rule as stored, with its id, as JSON."""
    rule: str


@dataclass(frozen=True)
class FaultList(Operation[str], code=141, served_by=Server.BROKER):
    """`kshim ctl fault list`: this broker's live fault rules, a JSON list."""


@dataclass(frozen=True)
class FaultClear(Operation[str], code=142, served_by=Server.BROKER):
    """`kshim ctl fault clear [ID]`: remove one rule, those labelled `label`, or all (-1, ""); answers
    {"cleared": n} as JSON."""
    rule_id: Int32 = -1
    label: str = ""


@dataclass(frozen=True)
class RequestLogRead(Operation[str], code=143, served_by=Server.BROKER):
    """`kshim ctl requests`: entries of this broker's request log (kshim.observability.requestlog) numbered after
    `since`, at most `limit`; answers {"node", "entries", "dropped", "last", "capacity"} as JSON."""
    since: Int64 = 0
    limit: Int32 = 1000


@dataclass(frozen=True)
class ShareInFlight(Operation[str], code=210, served_by=Server.BROKER):
    """`kshim ctl groups`: the share partitions of share group `group` this broker leads, with their
    start offset, window end and records by state; a JSON list."""
    group: str


@dataclass(frozen=True)
class ClientProperties(Operation[str], code=230, served_by=Server.BROKER):
    """`kshim ctl groups/txns --data-dir`: the inter-broker identity as Kafka client properties, a
    JSON object (security.protocol, sasl.*, ssl.*; {} for PLAINTEXT), so ctl connects to the
    brokers as they connect to each other. It holds the inter-broker password: the admin socket is
    its owner's only (mode 0600)."""


# ---------------------------------------------------------------------------------------- frames
_RequestHead = Struct("correlation_id" / Int32sb, "code" / Int16ub)
_ResponseHead = Struct("correlation_id" / Int32sb, "code" / Int16ub, "error_code" / Int16sb,
                       "message" / Nullable(String), "end" / Tell)
_Nothing = Struct(Terminated)


@functools.cache
def _request_body(code: int) -> Construct:
    op: Any = OPERATIONS[code]  # Any: mypy takes a frozen dataclass's class for unhashable (codec caches by it)
    return Struct("request" / codec(op), Terminated)


@functools.cache
def _reply_body(code: int) -> Construct:
    return Struct("version" / Int64sb, "result" / codec(OPERATIONS[code].RESULT), Terminated)


@dataclass(frozen=True)
class Response:
    correlation_id: int
    code: int  # the type code of the operation it answers
    error_code: ErrorCode
    message: str | None
    reply: Reply | None  # None when error_code is not NONE


def _framed(body: bytes) -> bytes:
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"a {len(body)}-byte frame exceeds the {MAX_FRAME_BYTES}-byte limit")
    return len(body).to_bytes(SIZE_BYTES, "big") + body


def _operation(code: int) -> type[Operation]:
    op = OPERATIONS.get(code)
    if op is None:
        raise FrameError(f"unknown operation type {code}")
    return op


def encode_request(correlation_id: int, request: Operation) -> bytes:
    """The framed request (size prefix included)."""
    if OPERATIONS.get(getattr(request, "CODE", None)) is not type(request):  # type: ignore[arg-type]
        raise FrameError(f"cannot encode {request!r}: not a registered operation")
    try:
        return _framed(_RequestHead.build({"correlation_id": correlation_id, "code": request.CODE})
                       + _request_body(request.CODE).build({"request": request}))
    except (ConstructError, AttributeError, TypeError, ValueError) as e:
        raise FrameError(f"cannot encode {request!r}: {e}") from None


def decode_request(body: bytes) -> tuple[int, Operation]:
    """(correlation id, request) from a frame body (size prefix removed)."""
    try:
        head = _RequestHead.parse(body)
        return head.correlation_id, _request_body(_operation(head.code).CODE).parse(body[_RequestHead.sizeof():]).request
    except (ConstructError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise FrameError(f"malformed request: {e}") from None


def encode_response(correlation_id: int, op: type[Operation], reply: Reply | None = None,
                    error_code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> bytes:
    """The framed response; `reply` only when error_code is NONE."""
    try:
        head = _ResponseHead.build({"correlation_id": correlation_id, "code": op.CODE,
                                    "error_code": int(error_code), "message": message})
        if error_code != ErrorCode.NONE:
            return _framed(head)
        if not isinstance(reply, Reply):
            raise TypeError(f"expected a Reply, got {type(reply).__name__}")
        return _framed(head + _reply_body(op.CODE).build({"version": reply.version, "result": reply.result}))
    except (ConstructError, AttributeError, TypeError, ValueError) as e:
        raise FrameError(f"cannot encode the {op.__name__} response: {e}") from None


def decode_response(body: bytes) -> Response:
    try:
        head = _ResponseHead.parse(body)
        error_code = ErrorCode(head.error_code)
        rest = body[head.end:]
        if error_code != ErrorCode.NONE:
            _Nothing.parse(rest)
            return Response(head.correlation_id, head.code, error_code, head.message, None)
        parsed = _reply_body(_operation(head.code).CODE).parse(rest)
        return Response(head.correlation_id, head.code, error_code, head.message,
                        Reply(parsed.version, parsed.result))
    except (ConstructError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise FrameError(f"malformed response: {e}") from None


def frame_size(header: bytes) -> int:
    """The body size announced by a 4-byte frame header; FrameError if out of bounds."""
    size = int.from_bytes(header, "big", signed=True)
    if not 0 < size <= MAX_FRAME_BYTES:
        raise FrameError(f"frame size {size} is outside 1..{MAX_FRAME_BYTES}")
    return size
