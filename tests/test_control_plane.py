"""The control plane: message codecs, the unix-socket RPC, and a broker's session with a real
Controller over it (register, heartbeat long-poll, fencing, registering again), in one process."""
from __future__ import annotations

import inspect
import json
import math
import os
import tempfile
import uuid
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from kshim.broker import Broker, BrokerConfig
from kshim.clock import SYSTEM, Clock, ManualClock
from kshim.cluster.admin import BrokerAdmin
from kshim.cluster.image import BrokerInfo, ClientQuota, MetadataImage, PartitionInfo, QuotaEntityPart, ScramEntry, TopicInfo
from kshim.cluster.remote import RemoteControllerClient
from kshim.controller import messages as m
from kshim.controller import rpc
from kshim.controller.controller import Controller, ControllerConfig
from kshim.controller.process import SupervisorService
from kshim.controller.service import ControllerService
from kshim.controller.store import MetadataStore
from kshim.errors import BrokerError
from kshim.security.acls import AclBinding, AclFilter
from tests.waiting import wait_until
from wire.errors import ErrorCode

TIMEOUT_S = 10


# ------------------------------------------------------------------------------------------ codecs
IMAGE = MetadataImage(
    version=42, cluster_id="Zm9vYmFyYmF6cXV4cXV1eA", controller_id=0,
    brokers={2: BrokerInfo(2, "127.0.0.1", 9094, 7, False, True, 4321),
             0: BrokerInfo(0, "localhost", 9092, 1, True, False, 1234)},
    topics={
        "orders": TopicInfo("orders", uuid.uuid4(), {"retention.ms": "1000", "cleanup.policy": "delete"}, (
            PartitionInfo(0, (0, 2, 1), 0, 3, (0, 2), 5),
            PartitionInfo(1, (2, 1, 0), -1, 9, (2,), 11),
        )),
        "__internal": TopicInfo("__internal", uuid.uuid4(), {}, ()),
        "ünïcode-less.but_legal": TopicInfo("ünïcode-less.but_legal", uuid.uuid4(), {"k": ""},
                                            (PartitionInfo(0, (1,), 1, 0, (1,)),)),
    },
    broker_configs={"": {"log.retention.ms": "1000"}, "2": {"compression.type": "gzip", "min.insync.replicas": "2"}},
    features={"metadata.version": 30, "group.version": 1}, features_epoch=41,
    acls=(AclBinding(2, "orders", 3, "User:alice", "*", 3, 3), AclBinding(4, "kafka-cluster", 4, "User:*", "::1", 2, 2)),
    scram=(ScramEntry("alice", "SCRAM-SHA-512", "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096),),
    client_quotas=(ClientQuota((QuotaEntityPart("client-id", None), QuotaEntityPart("user", "alice")),
                               {"producer_byte_rate": 1024.0, "request_percentage": 12.5}),
                   ClientQuota((QuotaEntityPart("ip", "127.0.0.1"),), {"connection_creation_rate": 3.0})),
    group_configs={"queue": {"share.auto.offset.reset": "earliest"}},
)
ACL_FILTER = AclFilter(1, None, 2, "User:bob", None, 1, 3)

REQUESTS = [
    m.Register(3, "127.0.0.1", 9095, 98765),
    m.Heartbeat(3, 2, 41, 250, (m.ReplicaOffsets("orders", 0, 100, 90), m.ReplicaOffsets("x", 7, 0, 0))),
    m.Heartbeat(0, 1, 0, 0),
    m.CreateTopic("t", -1, 3, {"min.insync.replicas": "2", "retention.ms": None}, True),
    m.DeleteTopic("t"),
    m.CreatePartitions("t", 12, False),
    m.CreatePartitions("t", 3, True, ((2, 0), (0, 1))),
    m.SetTopicConfigs("t", {"a": "b", "c": None}, True),
    m.SetBrokerConfigs("", {"log.retention.ms": "1000", "compression.type": None}, False),
    m.SetGroupConfigs("queue", {"share.auto.offset.reset": "earliest", "share.session.timeout.ms": None}, True),
    m.AllocateProducerIds(1000),
    m.AlterPartition(1, 4, "orders", 0, 3, 5, (0, 2, 1)),
    m.SetIsolated(2, True),
    m.ControllerStatus(),
    m.Status(),
    *[m.NodeCommand(action, 2) for action in m.NodeAction],
    m.KillController(),
    m.CompactNow("t", 2),
    m.ElectLeaders(m.Election.PREFERRED, {"t": (0, 2), "u": ()}),
    m.ElectLeaders(m.Election.UNCLEAN, None),
    m.AlterPartitionReassignments((m.Reassignment("t", 0, (1, 2)), m.Reassignment("t", 1, None)), False),
    m.ListPartitionReassignments({"t": (0, 1)}),
    m.ListPartitionReassignments(None),
    m.DescribeQuorum(),
    m.UpdateFeatures((m.FeatureUpdate("group.version", 0, m.FeatureUpgrade.SAFE_DOWNGRADE),
                      m.FeatureUpdate("metadata.version", 30, m.FeatureUpgrade.UPGRADE)), True),
    m.UnregisterBroker(2),
    m.CreateAcls(IMAGE.acls),
    m.DeleteAcls((ACL_FILTER, AclFilter(2, "t", 4, None, "*", 8, 1))),
    m.ReplicaStates(),
    m.MetricsText(),
    m.AlterScramCredentials((m.ScramDeletion("bob", "SCRAM-SHA-256"),), IMAGE.scram),
    m.FaultAdd('{"action": "drop"}'),
    m.FaultList(),
    m.TelemetryRead(),
    m.SetClientMetrics("sub", {"metrics": "org.apache.kafka.", "interval.ms": "1000"}, False),
    m.FaultClear(3),
    m.ShutdownBroker(2, 7),
    m.BrokerStatus(),
    m.RequestLogRead(17, 100),
    m.ShareInFlight("g"),
    m.ClientProperties(),
    m.AlterClientQuotas((m.QuotaAlteration((QuotaEntityPart("user", None),), {"consumer_byte_rate": 1e6,
                                                                               "request_percentage": None}),
                         m.QuotaAlteration((), {})), True),
]

RESULTS = [
    (m.Register, m.Registration(7, IMAGE)),
    (m.Heartbeat, IMAGE),
    (m.Heartbeat, None),
    (m.CreateTopic, IMAGE.topics["orders"]),
    (m.CreateTopic, None),
    (m.DeleteTopic, uuid.uuid4()),
    (m.CreatePartitions, None),
    (m.SetTopicConfigs, None),
    (m.SetBrokerConfigs, None),
    (m.SetGroupConfigs, None),
    (m.AllocateProducerIds, 1 << 40),
    (m.AlterPartition, PartitionInfo(0, (0, 2, 1), 0, 3, (0, 2, 1), 6)),
    (m.Status, json.dumps({"brokers": [], "ünï": "code"})),
    (m.NodeCommand, "killed broker 1 (pid 4321)"),
    (m.SetIsolated, None),
    (m.ControllerStatus, json.dumps({"controller": {"pid": 7}})),
    (m.KillController, "killed the controller (pid 4321)"),
    (m.CompactNow, json.dumps([{"topic": "t", "partition": 0, "cleaned_to": 5}])),
    (m.ElectLeaders, (m.ElectionResult("t", 0, 0, None), m.ElectionResult("t", 2, 84, "not needed"))),
    (m.AlterPartitionReassignments, (m.ReassignmentResult("t", 0, 0, None), m.ReassignmentResult("t", 1, 85, "none"))),
    (m.ListPartitionReassignments, (m.OngoingReassignment("t", 0, (1, 2, 0), (2,), (0,)),)),
    (m.DescribeQuorum, m.QuorumState(0, 3, 1 << 40, (m.QuorumReplica(0, 1 << 40, 5, 5),),
                                     (m.QuorumReplica(1, 7, 4, -1), m.QuorumReplica(2, 1 << 40, 5, 5)))),
    (m.UpdateFeatures, None),
    (m.UnregisterBroker, None),
    (m.CreateAcls, None),
    (m.DeleteAcls, (m.DeletedAcls(IMAGE.acls), m.DeletedAcls(()))),
    (m.ReplicaStates, json.dumps([{"topic": "t", "partition": 0, "high_watermark": 5}])),
    (m.MetricsText, "# TYPE x gauge\nx 1.0\n"),
    (m.AlterScramCredentials, (m.ScramResult("alice", 0, None), m.ScramResult("bob", 91, "does not exist"))),
    (m.FaultAdd, json.dumps({"id": 1, "action": "drop"})),
    (m.RequestLogRead, json.dumps({"entries": [], "last": 0})),
    (m.ShareInFlight, json.dumps([{"topic": "t", "partition": 0, "acquired": 3}])),
    (m.FaultList, "[]"),
    (m.TelemetryRead, "[]"),
    (m.SetClientMetrics, None),
    (m.ShutdownBroker, None),
    (m.BrokerStatus, json.dumps({"brokers": []})),
    (m.ClientProperties, json.dumps({"security.protocol": "SASL_SSL"})),
    (m.FaultClear, json.dumps({"cleared": 2})),
    (m.AlterClientQuotas, (m.QuotaAlterationResult(0, None), m.QuotaAlterationResult(42, "Invalid empty entity"))),
]

# whose methods serve each kind of operation (messages.Server)
SERVERS = {m.Server.CONTROLLER: Controller, m.Server.PROCESS: ControllerService,
           m.Server.SUPERVISOR: SupervisorService, m.Server.BROKER: BrokerAdmin}


def test_every_operation_is_covered():
    assert {type(r) for r in REQUESTS} == set(m.OPERATIONS.values())
    assert {op for op, _ in RESULTS} == set(m.OPERATIONS.values())
    assert set(m.NodeAction) == {r.action for r in REQUESTS if isinstance(r, m.NodeCommand)}


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_operation_binds_to_the_method_that_serves_it(request_):
    """The schema's fields are exactly the serving method's parameters (what `invoke` passes)."""
    method = getattr(SERVERS[request_.SERVED_BY], request_.METHOD)
    parameters = list(inspect.signature(method).parameters)[1:]  # after self
    assert set(parameters) == set(request_.arguments())
    inspect.signature(method).bind(None, **request_.arguments())


def test_a_type_code_is_registered_once():
    with pytest.raises(TypeError, match="share type code 3"):
        class Again(m.Operation[None], code=m.CreateTopic.CODE):
            pass
    assert m.OPERATIONS[3] is m.CreateTopic


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip(request_):
    frame = m.encode_request(123456, request_)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert m.decode_request(frame[4:]) == (123456, request_)


@pytest.mark.parametrize("op, result", RESULTS, ids=lambda x: getattr(x, "__name__", type(x).__name__))
def test_response_round_trip(op, result):
    frame = m.encode_response(-7, op, m.Reply(1 << 40, result))
    assert m.decode_response(frame[4:]) == m.Response(-7, op.CODE, ErrorCode.NONE, None, m.Reply(1 << 40, result))


def test_metadata_image_round_trips_exactly():
    decoded = m.decode_response(m.encode_response(1, m.Register, m.Reply(1, m.Registration(1, IMAGE)))[4:]).reply
    image = decoded.result.image
    assert image == IMAGE
    assert list(image.brokers) == [2, 0] and list(image.topics) == list(IMAGE.topics)
    orders = image.topics["orders"]
    assert isinstance(orders.topic_id, uuid.UUID) and orders.topic_id == IMAGE.topics["orders"].topic_id
    assert isinstance(orders.partitions, tuple) and isinstance(orders.partitions[0].replicas, tuple)
    assert list(orders.configs.items()) == list(IMAGE.topics["orders"].configs.items())


def test_integers_keep_their_width():
    with pytest.raises(m.FrameError):
        m.encode_request(1, m.CreatePartitions("t", 1 << 31))  # an Int32 field
    with pytest.raises(m.FrameError):
        m.encode_request(1, m.NodeCommand("reboot", 1))  # type: ignore[arg-type]


def test_error_response_round_trip():
    frame = m.encode_response(5, m.Heartbeat, error_code=ErrorCode.STALE_BROKER_EPOCH,
                              message="broker 1 epoch 2 is not current")
    assert m.decode_response(frame[4:]) == m.Response(5, m.Heartbeat.CODE, ErrorCode.STALE_BROKER_EPOCH,
                                                      "broker 1 epoch 2 is not current", None)
    with pytest.raises(m.FrameError):
        m.decode_response(frame[4:] + b"\x00")  # trailing byte


@pytest.mark.parametrize("body", [
    b"",
    b"\x00\x00\x00\x01",  # no type
    b"\x00\x00\x00\x01\x00\x63",  # unknown type
    m.encode_request(1, m.Register(1, "h", 2, 3))[4:] + b"\x00",  # trailing byte
    m.encode_request(1, m.Register(1, "h", 2, 3))[4:-1],  # truncated
    b"\x00\x00\x00\x01\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00",  # huge string
    m.encode_request(1, m.NodeCommand(m.NodeAction.KILL, 1))[4:].replace(b"kill", b"kilt"),  # unknown action
])
def test_malformed_requests_are_frame_errors(body):
    with pytest.raises(m.FrameError):
        m.decode_request(body)


def test_frame_size_is_bounded():
    assert m.frame_size((1000).to_bytes(4, "big")) == 1000
    for bad in (0, -1, m.MAX_FRAME_BYTES + 1):
        with pytest.raises(m.FrameError):
            m.frame_size(bad.to_bytes(4, "big", signed=True))


def test_response_body_must_match_its_type():
    with pytest.raises(m.FrameError):
        m.encode_response(1, m.Heartbeat, m.Reply(1, PartitionInfo(0, (0,), 0, 0, (0,))))
    with pytest.raises(m.FrameError):
        m.encode_response(1, m.Heartbeat, IMAGE)  # not a Reply


# ------------------------------------------------------------------------------------------ RPC
@pytest.fixture
def sock_dir():
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer
    with tempfile.TemporaryDirectory(prefix="kshim-cp-") as d:
        yield Path(d)


@asynccontextmanager
async def controller_server(store_dir: Path, sock: Path, clock: Clock = SYSTEM, **config):
    controller = Controller(MetadataStore(store_dir / "metadata.sqlite"), ControllerConfig(**config), clock)
    service = ControllerService(controller)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(rpc.RpcServer(service.handle).serve, sock)
            yield service
            tg.cancel_scope.cancel()
    finally:
        controller.close()


@asynccontextmanager
async def remote_broker(tmp_path: Path, sock: Path, node_id: int = 0, client_cls=RemoteControllerClient):
    client = client_cls(sock, node_id, heartbeat_wait_ms=100)
    broker = Broker(BrokerConfig(node_id=node_id, data_dir=tmp_path / f"broker-{node_id}"), client)
    client.attach(broker)
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(TIMEOUT_S):
                await tg.start(client.run, "127.0.0.1", 19092 + node_id, os.getpid())
            yield broker, client, tg
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_register_gets_epoch_and_image(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, remote_broker(tmp_path, sock) as (broker, client, _):
        assert client.broker_epoch == 1 and client.registrations == 1
        assert broker.image.version == service.controller.version
        info = broker.image.brokers[0]
        assert (info.host, info.port, info.pid, info.alive) == ("127.0.0.1", 19092, os.getpid(), True)
        assert service.registered == {0: os.getpid()}


@pytest.mark.anyio
async def test_mutating_calls_return_once_the_broker_applied_the_change(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, remote_broker(tmp_path, sock) as (broker, client, _):
        topic = await broker.create_topic("t", 2, {"retention.ms": "5000"})
        assert topic == service.controller.image.topics["t"]
        assert broker.topics["t"] == topic and broker.partition("t", 1) is not None  # applied already
        assert await broker.create_topic("v", 1, validate_only=True) is None and "v" not in broker.topics
        with pytest.raises(BrokerError) as e:
            await broker.create_topic("t", 1)
        assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        await broker.add_partitions("t", 3)
        assert len(broker.topics["t"].partitions) == 3
        await broker.set_topic_configs("t", {"retention.ms": "7000"})
        assert broker.topics["t"].configs == {"retention.ms": "7000"}
        first = await broker.allocate_producer_id()
        assert await broker.allocate_producer_id() == first + 1
        p = broker.topics["t"].partitions[0]
        info = await client.alter_partition("t", 0, p.leader_epoch, p.partition_epoch, [0])
        assert info.partition_epoch == p.partition_epoch + 1
        assert broker.topics["t"].partitions[0] == info
        with pytest.raises(BrokerError) as e:
            await client.alter_partition("t", 0, p.leader_epoch, p.partition_epoch, [0])  # stale partition epoch
        assert e.value.code == ErrorCode.INVALID_UPDATE_VERSION
        topic_id = await broker.delete_topic("t")
        assert topic_id == topic.topic_id and "t" not in broker.topics and broker.partition("t", 0) is None


@pytest.mark.anyio
async def test_heartbeat_long_poll_answers_when_the_image_changes(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, rpc.connect(sock) as conn:
        c = service.controller
        reg = await conn.call(m.Register(0, "127.0.0.1", 9092, 1))
        known = reg.image.version
        # nothing new: the answer comes after the wait, with no image
        start = anyio.current_time()
        idle = await conn.call(m.Heartbeat(0, reg.broker_epoch, known, 100))
        assert idle is None and anyio.current_time() - start >= 0.09
        # already behind: answered at once
        c.create_topic("early", 1, 1)
        assert (await conn.call(m.Heartbeat(0, reg.broker_epoch, known, 5000))).version == c.version
        known = c.version
        # waiting: answered as soon as the change is published, long before wait_ms
        results = []

        async def poll():
            results.append(await conn.call(m.Heartbeat(0, reg.broker_epoch, known, 5000)))

        with anyio.fail_after(2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                await anyio.wait_all_tasks_blocked()  # the long-poll is waiting at the controller
                # the same connection answers other requests while the long-poll waits
                status = json.loads(await conn.call(m.ControllerStatus()))
                assert not results and [b["id"] for b in status["brokers"]] == [0]
                c.create_topic("late", 1, 1)
        assert "late" in results[0].topics and results[0].version == c.version


@pytest.mark.anyio
async def test_heartbeat_offsets_show_in_status(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, remote_broker(tmp_path, sock) as (broker, client, _):
        await broker.create_topic("t", 1)
        broker.partition("t", 0).append(_one_batch())
        status = await wait_until(lambda: (s := service.status_report())["partitions"][0]["replica_offsets"].get("0", {})
                                .get("log_end_offset") == 1 and s)
        p = status["partitions"][0]
        assert (p["topic"], p["partition"], p["leader"], p["replicas"], p["isr"]) == ("t", 0, 0, [0], [0])
        assert status["brokers"][0]["alive"] and status["cluster_id"] == service.controller.cluster_id


def _one_batch() -> bytes:
    from wire.records import encode_batch
    return encode_batch([(b"k", b"v")])


class StoppableClient(RemoteControllerClient):
    """A broker whose heartbeats can be held back, as if its process were paused."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stopped = False
        self.resumed = anyio.Event()
        self.sent = 0  # heartbeats sent
        self.held = False  # a heartbeat is held back, so none is in flight

    async def heartbeat(self, connection):
        while self.stopped:
            self.held = True
            await self.resumed.wait()
        self.held = False
        self.sent += 1
        return await super().heartbeat(connection)

    async def heartbeats_after_now(self) -> None:
        """Return once the controller has handled a heartbeat sent from now on (they go one at a time)."""
        sent = self.sent
        await wait_until(lambda: self.sent >= sent + 2, message="a heartbeat handled")


@pytest.mark.anyio
async def test_fenced_after_the_session_timeout_then_registers_again(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    clock = ManualClock(wall_ms=SYSTEM.wall_ms())  # metadata versions start from the wall clock
    async with controller_server(tmp_path, sock, clock, session_timeout_ms=300) as service, \
            remote_broker(tmp_path, sock, client_cls=StoppableClient) as (broker, client, tg):
        c = service.controller
        tg.start_soon(c.run_session_checks)
        await broker.create_topic("t", 1)
        for _ in range(5):  # heartbeats keep it alive past the session timeout
            clock.advance(ms=100)
            await client.heartbeats_after_now()
        assert c.image.brokers[0].alive
        client.stopped = True
        await wait_until(lambda: client.held, message="heartbeats held back")
        clock.advance(ms=301)
        await wait_until(lambda: not c.image.brokers[0].alive, message="fenced")
        assert c.image.topics["t"].partitions[0].leader == -1  # its only replica is gone
        client.stopped = False
        client.resumed.set()
        await wait_until(lambda: client.registrations == 2 and broker.image.brokers[0].alive, message="registered")
        assert client.broker_epoch == 2 and broker.image.brokers[0].epoch == 2
        assert broker.topics["t"].partitions[0].leader == 0  # it leads again what it was in sync for


@pytest.mark.anyio
async def test_a_controlled_shutdown_ends_with_the_controllers_answer(tmp_path, sock_dir):
    """A broker the controller marked down gets no more images (its heartbeat is refused): its
    controlled shutdown returns once the controller answered, with no image to wait for (waiting
    held every SIGTERMed cluster broker for the whole shutdown timeout)."""
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, \
            remote_broker(tmp_path, sock, client_cls=StoppableClient) as (broker, client, _):
        client.stopped = True
        await wait_until(lambda: client.held, message="heartbeats held back")  # no image reaches it now
        applied = broker.image.version
        with anyio.fail_after(TIMEOUT_S):  # no timeout of its own: it ends with the answer or never
            await client.shutdown(math.inf)
        c = service.controller
        assert not c.image.brokers[0].alive and c.version > applied == broker.image.version


@pytest.mark.anyio
async def test_stale_broker_epoch_makes_the_broker_register_again(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, remote_broker(tmp_path, sock) as (broker, client, _):
        service.controller.fence(0)
        await wait_until(lambda: client.registrations == 2, message="registered again")
        assert client.broker_epoch == 2
        await wait_until(lambda: broker.image.brokers[0].alive and broker.image.brokers[0].epoch == 2)
        # a heartbeat with the old epoch is refused
        async with rpc.connect(sock) as conn:
            with pytest.raises(BrokerError) as e:
                await conn.call(m.Heartbeat(0, 1, 0, 0))
            assert e.value.code == ErrorCode.STALE_BROKER_EPOCH


@pytest.mark.anyio
async def test_broker_keeps_its_image_while_the_controller_is_away(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    client = RemoteControllerClient(sock, 0, heartbeat_wait_ms=100)
    broker = Broker(BrokerConfig(node_id=0, data_dir=tmp_path / "broker-0"), client)
    client.attach(broker)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run, "127.0.0.1", 19092, os.getpid())  # before the controller is up
            async with controller_server(tmp_path, sock):
                await wait_until(lambda: client.connected, message="connected")
                await broker.create_topic("t", 1)
                version = broker.image.version
            await wait_until(lambda: not client.connected, message="disconnected")
            assert broker.image.version == version and "t" in broker.topics  # still serving what it knew
            with pytest.raises(BrokerError) as e:
                await broker.create_topic("u", 1)
            assert e.value.code == ErrorCode.NOT_CONTROLLER
            async with controller_server(tmp_path, sock) as service:
                # a controller restarted on its metadata: the broker resumes its session, unfenced
                await wait_until(lambda: client.sessions == 2, message="session resumed")
                assert client.registrations == 1 and service.registered == {}
                info = service.controller.image.brokers[0]
                assert info.alive and info.epoch == client.broker_epoch == 1
                assert broker.image.version == service.controller.version > version
                assert (await broker.create_topic("u", 1)).name == "u"
            (tmp_path / "elsewhere").mkdir()
            async with controller_server(tmp_path / "elsewhere", sock) as service:
                # a controller that does not know this epoch: the broker registers
                await wait_until(lambda: client.registrations == 2, message="registered again")
                assert service.registered == {0: os.getpid()}
            tg.cancel_scope.cancel()
    finally:
        broker.close()


@pytest.mark.anyio
async def test_malformed_frame_closes_only_that_connection(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock), rpc.connect(sock) as good:
        for garbage in (b"\x00\x00\x00\x02\x00\x00",  # a body that does not decode
                        (m.MAX_FRAME_BYTES + 1).to_bytes(4, "big"),  # too large
                        b"\xff\xff\xff\xff"):  # negative size
            stream = await anyio.connect_unix(sock)
            async with stream:
                await stream.send(garbage)
                with anyio.fail_after(TIMEOUT_S), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError,
                                                                  ConnectionError)):
                    await stream.receive()
        assert json.loads(await good.call(m.ControllerStatus()))["brokers"] == []


@pytest.mark.anyio
async def test_process_commands_need_the_supervisor_and_isolation_needs_a_broker(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service, rpc.connect(sock) as conn:
        for request in (m.NodeCommand(m.NodeAction.KILL, 0), m.Status(), m.KillController()):
            with pytest.raises(BrokerError, match="needs the supervisor") as e:
                await conn.call(request)
            assert e.value.code == ErrorCode.INVALID_REQUEST
        with pytest.raises(BrokerError) as e:
            await conn.call(m.SetIsolated(5, True))
        assert e.value.code == ErrorCode.BROKER_NOT_AVAILABLE
        await conn.call(m.Register(5, "127.0.0.1", 9097, 1))
        reply = await conn.answer(m.SetIsolated(5, True))
        assert reply.version == service.controller.version and service.controller.image.brokers[5].isolated
        await conn.call(m.SetIsolated(5, False))
        assert not service.controller.image.brokers[5].isolated


@pytest.mark.anyio
async def test_a_closed_connection_fails_pending_calls(tmp_path, sock_dir):
    sock = sock_dir / "c.sock"
    async with controller_server(tmp_path, sock) as service:
        async with rpc.connect(sock) as conn:
            reg = await conn.call(m.Register(0, "127.0.0.1", 9092, 1))
            errors = []

            async def long_poll():
                try:
                    await conn.call(m.Heartbeat(0, reg.broker_epoch, service.controller.version, 5000))
                except rpc.RpcConnectionError as e:
                    errors.append(e)

            with anyio.fail_after(TIMEOUT_S):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_poll)
                    await anyio.wait_all_tasks_blocked()  # the call is pending
                    await conn.aclose()  # the connection dies under the pending call
            assert len(errors) == 1
            with pytest.raises(rpc.RpcConnectionError):
                await conn.call(m.Status())
