"""Client quotas against a real kshim process: AlterClientQuotas / DescribeClientQuotas with
kafka-python's admin client (its protocol classes, over its admin connection: kafka-python has no
quota methods, nor has confluent-kafka's AdminClient; the Java Admin client's are in
test_java_quotas.py), and enforcement measured with confluent-kafka (librdkafka) clients: a
throttled producer and consumer move at their quota's rate, within 20%, while a client id without
a quota on the same broker is not slowed.

The broker measures rates over 2 samples of 1 s (--quota-window-num 2): with Kafka's default of
11 samples a client that was idle may first send 10 windows' worth at once, and its rate over any
8 s swings far past 20% (tests/test_quotas.py checks the long-run rate with 11 samples).
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import METADATA, RawConnection

QUOTA = 200 * 1024  # bytes per second
MEASURE_S = 8.0
WARM_UP_S = 2.0
VALUE = b"v" * 1000

INVALID_REQUEST, UNSUPPORTED_VERSION, THROTTLING_QUOTA_EXCEEDED = 42, 35, 89
CREATE_TOPICS, DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 19, 48, 49
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--partitions", "1",
                        "--quota-window-num", "2").start()
    yield proc
    code = proc.terminate()
    assert code == 0, "kshim did not shut down cleanly:\n" + proc.logs()


@pytest.fixture(scope="module")
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def _send(admin: KafkaAdminClient, request):
    async def send():
        return await admin._manager.send(request)
    return admin._manager.run(send)


def alter(admin, entity: dict, ops: dict, validate_only: bool = False) -> tuple[int, str | None]:
    """One entity's alteration: ops maps a key to its value, None to remove it."""
    E = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(entries=[E(
        entity=[E.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[E.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only)
    (entry,) = _send(admin, request).entries
    return entry.error_code, entry.error_message


def describe(admin, components=(), strict=False):
    request = DescribeClientQuotasRequest(components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
        strict=strict)
    response = _send(admin, request)
    if response.error_code:
        return response.error_code, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def test_kafka_python_admin_sets_describes_and_removes_quotas(admin):
    user = f"u-{uuid.uuid4().hex[:6]}"
    assert alter(admin, {"user": user, "client-id": None}, {"producer_byte_rate": 1024.0,
                                                             "request_percentage": 25.0}) == (0, None)
    assert alter(admin, {"user": user}, {"consumer_byte_rate": 4096.0}) == (0, None)
    mine = [("user", EXACT, user)]
    assert describe(admin, mine) == {
        (("client-id", None), ("user", user)): {"producer_byte_rate": 1024.0, "request_percentage": 25.0},
        (("user", user),): {"consumer_byte_rate": 4096.0}}
    assert describe(admin, mine, strict=True) == {(("user", user),): {"consumer_byte_rate": 4096.0}}
    assert describe(admin, mine + [("client-id", DEFAULT, None)]) == {
        (("client-id", None), ("user", user)): {"producer_byte_rate": 1024.0, "request_percentage": 25.0}}
    # validate_only changes nothing; remove drops a key, the last one the entity
    assert alter(admin, {"user": user}, {"consumer_byte_rate": 1.0}, validate_only=True) == (0, None)
    assert alter(admin, {"user": user}, {"consumer_byte_rate": None}) == (0, None)
    assert alter(admin, {"user": user, "client-id": None}, {"request_percentage": None}) == (0, None)
    assert describe(admin, mine) == {(("client-id", None), ("user", user)): {"producer_byte_rate": 1024.0}}


def test_kafka_python_admin_gets_kafkas_errors_for_bad_input(admin):
    assert alter(admin, {"group": "g"}, {"producer_byte_rate": 1.0}) == (
        INVALID_REQUEST, "Unhandled client quota entity type: group")
    assert alter(admin, {}, {"producer_byte_rate": 1.0}) == (INVALID_REQUEST, "Invalid empty client quota entity")
    assert alter(admin, {"client-id": "c"}, {"bogus_rate": 1.0}) == (INVALID_REQUEST, "Invalid configuration key bogus_rate")
    assert alter(admin, {"client-id": "c"}, {"producer_byte_rate": -1.0}) == (
        INVALID_REQUEST, "Quota producer_byte_rate must be greater than 0")
    assert alter(admin, {"client-id": "c"}, {"producer_byte_rate": 1.5})[0] == INVALID_REQUEST
    assert alter(admin, {"ip": "127.0.0.1", "user": "u"}, {"connection_creation_rate": 1.0})[0] == INVALID_REQUEST
    assert alter(admin, {"ip": "not an address"}, {"connection_creation_rate": 1.0})[0] == INVALID_REQUEST
    assert describe(admin, [("group", SPECIFIED, None)]) == (UNSUPPORTED_VERSION, "Unsupported entity type group")
    assert describe(admin, [("user", EXACT, None)])[0] == INVALID_REQUEST
    assert describe(admin, [("client-id", EXACT, "c")]) == {}  # nothing was stored


# ---------------------------------------------------------------- enforcement
def _producer(broker, client_id: str) -> Producer:
    # 16 KiB batches (the Java client's default) so that one request is a small part of a window
    return Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "batch.size": 16384,
                     "linger.ms": 5, "queue.buffering.max.kbytes": 1024, "log_level": 3})


def _produce_for(broker, client_id: str, topic: str, seconds: float) -> list[tuple[float, int]]:
    """Produce as fast as the broker lets `client_id`; (time, value bytes) of each acknowledgement."""
    acked: list[tuple[float, int]] = []
    errors = []
    p = _producer(broker, client_id)

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))
        elif err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            errors.append(err)

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:  # the local queue is full: the broker is holding us back
            p.poll(0.01)
            continue
        p.poll(0)
    p.purge()  # what is still queued is not part of the measurement
    p.flush(30)
    assert not errors, errors[:3]
    return acked


def _rate(events: list[tuple[float, int]], start: float, seconds: float) -> float:
    return sum(n for t, n in events if start <= t < start + seconds) / seconds


def _append_times(broker, topic: str) -> list[tuple[float, int]]:
    """(append time in seconds, value bytes) of every record of the topic's partition 0, as the
    broker stamped them (message.timestamp.type=LogAppendTime): the rate the log took them in,
    whatever delays the client's own callbacks saw on a busy machine."""
    end = high_watermark(broker, topic)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 3})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[float, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < end and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is not None and msg.error() is None:
                out.append((msg.timestamp()[1] / 1000, len(msg.value())))
    finally:
        c.close()
    assert len(out) == end, f"read {len(out)} of {end} records"
    return out


def high_watermark(broker, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hw", "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_a_produce_quota_holds_a_client_id_to_its_rate_and_spares_the_others(broker, admin):
    topic = f"produce-quota-{uuid.uuid4().hex[:6]}"
    # the broker stamps each batch as it appends it: the rate is read from the log, not from
    # acknowledgement callbacks that a busy test process may run late and in bunches
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    assert alter(admin, {"client-id": "throttled-producer"}, {"producer_byte_rate": float(QUOTA)}) == (0, None)
    _produce_for(broker, "free-producer", f"{topic}-free", 0.5)  # its topic exists before anyone is timed
    runner = threading.Thread(target=lambda: _produce_for(broker, "throttled-producer", topic, WARM_UP_S + MEASURE_S))
    runner.start()
    try:
        time.sleep(WARM_UP_S)  # a free producer beside it, while it is throttled
        free = _produce_for(broker, "free-producer", f"{topic}-free", 3.0)
    finally:
        runner.join(120)
    appended = _append_times(broker, topic)
    start = appended[0][0] + WARM_UP_S
    measured = _rate(appended, start, appended[-1][0] - start)
    assert 0.8 * QUOTA <= measured <= 1.2 * QUOTA, f"{measured / 1024:.0f} KiB/s against a quota of {QUOTA / 1024:.0f}"
    unthrottled = _rate(free, free[0][0], free[-1][0] - free[0][0])
    assert unthrottled > 2 * QUOTA, f"the free producer managed only {unthrottled / 1024:.0f} KiB/s"


def _consume_for(broker, client_id: str, topic: str, seconds: float, total: int) -> list[tuple[float, int]]:
    """Read the topic's partition from the start, for `seconds` after the first record or until
    `total` bytes; (time, value bytes) of each record as the application gets it."""
    # 16 KiB fetches: one that is a whole window's quota is refused (answered empty) as often as
    # not, and the client gets half its quota, by Kafka's arithmetic as much as kshim's
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "client.id": client_id, "enable.auto.commit": False, "max.partition.fetch.bytes": 16384,
                  "log_level": 3})
    got: list[tuple[float, int]] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group to join: the clock starts at once
        deadline = time.monotonic() + 30  # for the first record
        received = 0
        while time.monotonic() < deadline and received < total:
            for msg in c.consume(500, timeout=0.2):
                assert msg.error() is None, msg.error()
                if not got:
                    deadline = time.monotonic() + seconds
                got.append((time.monotonic(), len(msg.value())))
                received += len(msg.value())
    finally:
        c.close()
    return got


def test_a_consume_quota_holds_a_client_id_to_its_rate_and_spares_the_others(broker, admin):
    topic = f"consume-quota-{uuid.uuid4().hex[:6]}"
    assert alter(admin, {"client-id": "throttled-consumer"}, {"consumer_byte_rate": float(QUOTA)}) == (0, None)
    total = int(QUOTA * (WARM_UP_S + MEASURE_S + 6))
    p = _producer(broker, "free-producer")
    for _ in range(total // len(VALUE)):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    stored = (total // len(VALUE)) * len(VALUE)

    free = _consume_for(broker, "free-consumer", topic, 60, stored)
    assert sum(n for _, n in free) == stored
    unthrottled = stored / (free[-1][0] - free[0][0])
    assert unthrottled > 2 * QUOTA, f"the free consumer managed only {unthrottled / 1024:.0f} KiB/s"

    throttled = _consume_for(broker, "throttled-consumer", topic, WARM_UP_S + MEASURE_S, stored)
    first = throttled[0][0]
    measured = _rate(throttled, first + WARM_UP_S, MEASURE_S)
    assert 0.8 * QUOTA <= measured <= 1.2 * QUOTA, f"{measured / 1024:.0f} KiB/s against a quota of {QUOTA / 1024:.0f}"


def test_a_connection_creation_rate_closes_connections_past_it_unanswered(tmp_path):
    """An ip quota (KIP-612) on a broker of its own: past 1 connection a second (10 in the first
    window of Kafka's 11 samples), new connections from 127.0.0.1 are closed without an answer;
    removing the quota lets them in again."""
    proc = KshimProcess(tmp_path / "kshim-data").start()
    admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
    try:
        assert alter(admin, {"ip": "127.0.0.1"}, {"connection_creation_rate": 1.0}) == (0, None)
        answered = 0
        for _ in range(15):
            with RawConnection(proc.bootstrap, timeout=5) as conn:
                try:
                    conn.api_versions()
                    answered += 1
                except (ConnectionError, OSError, EOFError):
                    pass
        assert 9 <= answered <= 11, answered
        assert describe(admin, [("ip", EXACT, "127.0.0.1")]) == {
            (("ip", "127.0.0.1"),): {"connection_creation_rate": 1.0}}
        assert alter(admin, {"ip": "127.0.0.1"}, {"connection_creation_rate": None}) == (0, None)
        with RawConnection(proc.bootstrap, timeout=5) as conn:
            assert conn.api_versions().error_code == 0
    finally:
        admin.close()
        assert proc.terminate() == 0, proc.logs()


def test_request_percentage_throttles_a_busy_client_id_for_at_most_a_window(broker, admin):
    """0.01% of a second per second: a few Metadata requests of the raw client's id exceed it; the
    answer says how long to wait (at most one window) and the next request is held that long."""
    assert alter(admin, {"client-id": "kshim-raw"}, {"request_percentage": 0.01}) == (0, None)
    try:
        with RawConnection(broker.bootstrap) as conn:
            throttle = 0
            for _ in range(200):
                throttle = conn.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False}).throttle_time_ms
                if throttle:
                    break
            assert 0 < throttle <= 1000
            started = time.monotonic()
            conn.api_versions()
            assert time.monotonic() - started >= throttle / 1000 * 0.9
    finally:
        assert alter(admin, {"client-id": "kshim-raw"}, {"request_percentage": None}) == (0, None)


def test_create_topics_past_the_controller_mutation_rate_is_throttling_quota_exceeded(broker, admin):
    """1 partition a second, a token bucket of 2 samples x 1 s x 1 = 2 partitions: CreateTopics v7
    from the quota's client id gets THROTTLING_QUOTA_EXCEEDED once the bucket is overdrawn."""
    assert alter(admin, {"client-id": "kshim-raw"}, {"controller_mutation_rate": 1.0}) == (0, None)
    try:
        prefix = f"mutated-{uuid.uuid4().hex[:6]}"
        topics = [{"name": f"{prefix}-{i}", "num_partitions": 2, "replication_factor": -1, "assignments": [],
                   "configs": []} for i in range(3)]
        with RawConnection(broker.bootstrap) as conn:
            resp = conn.request(CREATE_TOPICS, 7, {"topics": topics, "timeout_ms": 5000, "validate_only": False})
        codes = [t.error_code for t in resp.topics]
        # the first empties the bucket, the second overdraws it (allowed, as in Kafka), the third is refused
        assert codes == [0, 0, THROTTLING_QUOTA_EXCEEDED], codes
        assert 1500 <= resp.throttle_time_ms <= 2000  # 2 partitions short at 1 a second
    finally:
        assert alter(admin, {"client-id": "kshim-raw"}, {"controller_mutation_rate": None}) == (0, None)


def test_quotas_reach_every_broker_of_a_cluster_and_survive_a_controller_restart(tmp_path):
    with running(Cluster(tmp_path / "cluster", 3)) as cluster:
        def described(node: int) -> dict:
            with RawConnection(f"127.0.0.1:{cluster.base_port + node}") as conn:
                resp = conn.request(DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
            return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
                    for entry in resp.entries}

        with RawConnection(f"127.0.0.1:{cluster.base_port + 1}") as conn:
            resp = conn.request(ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
                {"entity": [{"entity_type": "user", "entity_name": None}],
                 "ops": [{"key": "consumer_byte_rate", "value": 5e6, "remove": False}]}]})
        assert [e.error_code for e in resp.entries] == [0]
        expected = {(("user", None),): {"consumer_byte_rate": 5e6}}
        for node in range(3):
            wait_until(lambda: described(node) == expected, message=f"the quota on broker {node}")
        assert run_ctl(cluster.data_dir, "kill", "controller").returncode == 0

        def alter_through_broker_2() -> bool:  # errors until the restarted controller answers
            with RawConnection(f"127.0.0.1:{cluster.base_port + 2}") as conn:
                resp = conn.request(ALTER_CLIENT_QUOTAS, 1, {"validate_only": False, "entries": [
                    {"entity": [{"entity_type": "client-id", "entity_name": "c"}],
                     "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]}]})
            return [e.error_code for e in resp.entries] == [0]

        wait_until(alter_through_broker_2, timeout=60, interval=0.5, message="an alteration after the restart")
        assert described(0)[(("user", None),)] == {"consumer_byte_rate": 5e6}  # the restarted controller kept it
        expected[(("client-id", "c"),)] = {"producer_byte_rate": 1e6}
        for node in range(3):
            wait_until(lambda: described(node) == expected, message=f"both quotas on broker {node}")
