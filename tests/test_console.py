"""The console in process: its HTTP server (routes, bounds, server-sent events, actions), the state
it builds from a source (stale replicas, offsets the controller heard), /metrics merging each
broker's metrics under a `broker` label, and a broker's own metrics (kshim.observability.metrics) from a
real standalone broker's produce, fetch and replicas."""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterator

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kshim.broker import Broker, BrokerConfig
from kshim.cluster import admin
from kshim.console.console import Console, build_state
from kshim.console.http import MAX_HEAD_BYTES
from kshim.console.sources import StandaloneSource
from kshim.errors import BrokerError
from kshim.net.server import Server, open_listener
from kshim.observability.metrics import BrokerMetrics
from kshim.replication.client import BrokerConnection
from kshim.standalone import open_standalone
from tests.nodes import served
from wire.errors import ErrorCode
from wire.records import encode_batch

pytestmark = pytest.mark.anyio
WAIT_S = 10


@pytest.fixture
def anyio_backend():
    return "asyncio"


class FakeSource:
    """Two brokers: 0 answers, 1 does not (paused)."""
    mode = "cluster"
    actions = ("pause", "resume")

    def __init__(self) -> None:
        self.done: list[tuple[str, Any]] = []
        self.hw = 5

    async def overview(self) -> dict[str, Any]:
        return {"cluster_id": "c1", "controller": {"state": "running"},
                "brokers": [{"id": 0, "host": "127.0.0.1", "port": 1, "alive": True, "process": "running"},
                            {"id": 1, "host": "127.0.0.1", "port": 2, "alive": True, "process": "running"}],
                "partitions": [{"topic": "t", "partition": 0, "leader": 0, "leader_epoch": 1, "replicas": [0, 1],
                                "isr": [0, 1], "replica_offsets": {"1": {"log_end_offset": 3, "high_watermark": 3}}}]}

    async def replica_states(self, node_id: int) -> list[dict[str, Any]]:
        if node_id == 1:
            raise TimeoutError
        return [{"topic": "t", "partition": 0, "log_start_offset": 0, "last_stable_offset": self.hw,
                 "high_watermark": self.hw, "log_end_offset": self.hw + 2}]

    async def metrics_text(self, node_id: int) -> str:
        if node_id == 1:
            raise TimeoutError
        return "# HELP kafka_x a gauge\n# TYPE kafka_x gauge\nkafka_x{topic=\"t\"} 7.0\n"

    async def act(self, action: str, node: int | str) -> str:
        if node == 9:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, "no broker 9")
        self.done.append((action, node))
        return f"{action} {node}"

    async def fault_rules(self, nodes: list[int]) -> list[dict[str, Any]] | None:
        return None

    async def fault_add(self, spec: dict[str, Any], node: int | None) -> str:
        raise BrokerError(ErrorCode.INVALID_REQUEST, "no fault rules here")

    async def fault_clear(self, rule_id: int | None, node: int | None) -> str:
        return "0 fault rule(s) cleared"


async def http(port: int, raw: bytes, read_all: bool = True) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(raw)
        out = b""
        with anyio.fail_after(WAIT_S):
            try:
                while True:
                    out += await s.receive()
                    if not read_all and b"\n\n" in out.partition(b"\r\n\r\n")[2]:
                        return out
            except anyio.EndOfStream:
                return out


def request(method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def body_of(response: bytes) -> bytes:
    return response.partition(b"\r\n\r\n")[2]


async def test_routes_state_and_actions():
    source = FakeSource()
    console = Console(source)
    async with anyio.create_task_group() as tg:
        port = await tg.start(console.serve, "127.0.0.1", 0)
        assert not console.watched  # nobody looks: it polls nothing
        page = await http(port, request("GET", "/"))
        assert status_of(page) == 200 and b"<title>kshim console</title>" in page
        state = json.loads(body_of(await http(port, request("GET", "/state"))))
        assert console.watched
        [replica0, replica1] = state["partitions"][0]["replica_states"]
        assert (replica0["high_watermark"], replica0["log_end_offset"], replica0["stale"]) == (5, 7, False)
        # broker 1 did not answer: what the controller heard from it, marked stale
        assert (replica1["high_watermark"], replica1["log_end_offset"], replica1["stale"]) == (3, 3, True)
        assert status_of(await http(port, request("GET", "/nothing"))) == 404
        assert status_of(await http(port, request("DELETE", "/state"))) == 405

        ok = await http(port, request("POST", "/action", b'{"action": "pause", "node": 1}'))
        assert status_of(ok) == 200 and json.loads(body_of(ok)) == {"ok": True, "message": "pause 1"}
        assert source.done == [("pause", 1)]
        refused = await http(port, request("POST", "/action", b'{"action": "pause", "node": 9}'))
        assert status_of(refused) == 409 and json.loads(body_of(refused))["message"] == "no broker 9"
        assert status_of(await http(port, request("POST", "/action", b'{"action": "kill", "node": 1}'))) == 400
        assert status_of(await http(port, request("POST", "/action", b'{"node": true, "action": "pause"}'))) == 400
        assert status_of(await http(port, request("POST", "/action", b"not json"))) == 400
        form = request("POST", "/action", b"action=pause&node=1", "application/x-www-form-urlencoded")
        assert status_of(await http(port, form)) == 415  # a cross-site form cannot send JSON
        assert source.done == [("pause", 1)]
        tg.cancel_scope.cancel()


async def test_malformed_and_oversized_requests_are_refused():
    console = Console(FakeSource())
    async with anyio.create_task_group() as tg:
        port = await tg.start(console.serve, "127.0.0.1", 0)
        assert status_of(await http(port, b"NONSENSE\r\n\r\n")) == 400
        assert status_of(await http(port, b"GET / SPDY/3\r\n\r\n")) == 400
        big = b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n"
        assert status_of(await http(port, big)) == 431
        too_long = b"POST /action HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n"
        assert status_of(await http(port, too_long)) == 413
        assert status_of(await http(port, request("GET", "/state"))) == 200  # still serving
        tg.cancel_scope.cancel()


async def test_events_carry_each_new_state():
    source = FakeSource()
    console = Console(source)
    async with anyio.create_task_group() as tg:
        port = await tg.start(console.serve, "127.0.0.1", 0)
        async with await anyio.connect_tcp("127.0.0.1", port) as s:
            await s.send(request("GET", "/events"))
            buf = b""
            head_seen = False

            async def next_event() -> dict:
                nonlocal buf, head_seen
                with anyio.fail_after(WAIT_S):
                    while True:
                        if not head_seen and b"\r\n\r\n" in buf:
                            head, _, buf = buf.partition(b"\r\n\r\n")
                            assert b"200 OK" in head and b"text/event-stream" in head
                            head_seen = True
                        if head_seen and b"\n\n" in buf:
                            event, _, buf = buf.partition(b"\n\n")
                            if event.startswith(b"data: "):
                                return json.loads(event[len(b"data: "):])
                            continue
                        buf += await s.receive()

            first = await next_event()
            assert first["partitions"][0]["replica_states"][0]["high_watermark"] == 5
            source.hw = 9  # the next poll sees it, and the stream carries it without being asked
            second = await next_event()
            while second["partitions"][0]["replica_states"][0]["high_watermark"] != 9:
                second = await next_event()
            assert second["version"] > first["version"]
        tg.cancel_scope.cancel()


async def test_metrics_merge_brokers_under_a_label():
    console = Console(FakeSource())
    await console.refresh()
    text = (await console.metrics()).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("kafka_x", (("broker", "0"), ("topic", "t")))] == 7
    assert samples[("kshim_console_broker_scrape_up", (("broker", "0"),))] == 1
    assert samples[("kshim_console_broker_scrape_up", (("broker", "1"),))] == 0
    assert samples[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == 1
    assert samples[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0


def test_a_silent_broker_keeps_its_last_offsets_marked_stale():
    source = FakeSource()
    overview = {"brokers": [], "partitions": [{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 2,
                                               "replicas": [0, 1], "isr": [1], "replica_offsets": {}}]}
    known = {0: [{"topic": "t", "partition": 0, "log_start_offset": 1, "last_stable_offset": 2,
                  "high_watermark": 2, "log_end_offset": 4}]}
    state = build_state(source, overview, known, fresh=set(), groups={}, txns={}, faults=None)
    r0, r1 = state["partitions"][0]["replica_states"]
    assert r0 == {"node": 0, "in_isr": False, "is_leader": False, "stale": True, "log_start_offset": 1,
                  "last_stable_offset": 2, "high_watermark": 2, "log_end_offset": 4}
    assert r1["is_leader"] and r1["log_end_offset"] is None  # nothing known of it at all


def test_a_silent_broker_shows_the_offsets_of_its_last_heartbeat():
    """`kshim ctl status` shows the log end and high watermark of a broker's last heartbeat; the
    console's own last answer from it may be older (it asks only while watched): the page shows
    what ctl status shows, with the last stable offset only when that answer is as recent."""
    source = FakeSource()
    known = {0: [{"topic": "t", "partition": 0, "log_start_offset": 1, "last_stable_offset": 8,
                  "high_watermark": 10, "log_end_offset": 10}]}

    def shown(reported: dict[str, int]) -> dict[str, Any]:
        overview = {"brokers": [], "partitions": [{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 2,
                                                   "replicas": [0, 1], "isr": [0, 1],
                                                   "replica_offsets": {"0": reported}}]}
        state = build_state(source, overview, known, fresh={1}, groups={}, txns={}, faults=None)
        return state["partitions"][0]["replica_states"][0]

    r0 = shown({"log_end_offset": 15, "high_watermark": 14})
    assert (r0["stale"], r0["log_start_offset"], r0["last_stable_offset"], r0["high_watermark"],
            r0["log_end_offset"]) == (True, 1, None, 14, 15)
    r0 = shown({"log_end_offset": 10, "high_watermark": 10})
    assert (r0["last_stable_offset"], r0["high_watermark"], r0["log_end_offset"]) == (8, 10, 10)


# ------------------------------------------------------------------------------------ a broker's metrics
@pytest.fixture
def standalone(tmp_path) -> Iterator[Broker]:
    broker = open_standalone(BrokerConfig(data_dir=tmp_path))
    yield broker
    broker.close()


def parse(metrics: BrokerMetrics) -> defaultdict[tuple[str, tuple], float]:
    """Each sample's value by (name, sorted labels); a sample not exposed reads 0."""
    return defaultdict(float, {(s.name, tuple(sorted(s.labels.items()))): s.value
                               for f in text_string_to_metric_families(metrics.exposition().decode())
                               for s in f.samples})


async def test_broker_metrics_count_requests_bytes_and_offsets(standalone):
    """The counters of real requests to a broker served in this process: Produce by topic name (v9)
    and by topic id (v13, as the Java client 4.x sends it), a Produce the broker refuses (its bytes
    and records are not counted), a Fetch by topic id and one that waits (a long poll)."""
    await standalone.create_topic("t", 1)
    node = served(standalone)
    metrics = node.metrics
    data = encode_batch([(None, b"x" * 50)] * 3)
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF  # its CRC no longer matches
    topic_id = standalone.image.topics["t"].topic_id

    def produce(topic: dict, records: bytes) -> dict:
        return {"acks": 1, "timeout_ms": 5000, "topic_data": [{**topic, "partition_data": [
            {"index": 0, "records": records}]}]}

    async with anyio.create_task_group() as tg:
        port = await tg.start(Server(node).serve, open_listener("127.0.0.1", 0))
        conn = BrokerConnection("127.0.0.1", port, "metrics-test")
        conn.security = None  # plaintext (another test may have set the process's inter-broker security)
        await conn.connect()
        try:
            answers = [await conn.request(0, 9, produce({"name": "t"}, data)),
                       await conn.request(0, 9, produce({"name": "t"}, bytes(corrupt))),
                       await conn.request(0, 13, produce({"topic_id": topic_id}, data))]
            assert [a.responses[0].partition_responses[0].error_code for a in answers] == [
                ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE, ErrorCode.NONE]

            def fetch(offset: int, max_wait_ms: int) -> dict:
                return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": 0, "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}
            fetched = await conn.request(1, 13, fetch(0, 0))
            assert len(fetched.responses[0].partitions[0].records) == 2 * len(data)
            # at the log end: a long poll, answered empty when its wait ends (counted when it completes)
            waited = await conn.request(1, 13, fetch(6, 20))
            assert not waited.responses[0].partitions[0].records
        finally:
            await conn.aclose()
            tg.cancel_scope.cancel()

    m = parse(metrics)
    assert m[("kafka_network_requestmetrics_requests_total", (("request", "Produce"),))] == 3
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 6
    assert m[("kafka_network_requestmetrics_totaltimems_count", (("request", "Fetch"),))] == 2
    assert m[("kafka_network_requestmetrics_totaltimems_bucket", (("le", "+Inf"), ("request", "Produce")))] == 3
    assert m[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "t"),))] == 2 * len(data)
    assert m[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "t"),))] == 2 * len(data)  # by topic id
    tp = (("partition", "0"), ("topic", "t"))
    assert m[("kafka_log_log_logendoffset", tp)] == 6
    assert m[("kshim_partition_high_watermark", tp)] == 6
    assert m[("kafka_server_replicamanager_leadercount", ())] == 1
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert m[("kafka_server_replicamanager_isrshrinks_total", ())] == 0

    # and through the admin socket's answer, as a cluster's console asks it
    states = json.loads(await admin.BrokerAdmin(standalone, metrics.exposition).replica_states())
    assert [(s["topic"], s["high_watermark"], s["log_end_offset"], s["is_leader"]) for s in states] == [("t", 6, 6, True)]
    source = StandaloneSource(standalone, lambda: standalone.image, metrics.exposition)
    assert "kafka_log_log_logendoffset" in await source.metrics_text(0)
    with pytest.raises(BrokerError):
        await source.act("kill", 0)
