"""Request fault rules (kshim.observability.faults) against real clients: each kind of fault, with kafka-python and
confluent-kafka, through the Python API (kshim.ctl.faults) and `kshim ctl fault`; the request log
shows what each client sent and what it was answered."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError as KafkaPythonError
from kafka.errors import TopicAuthorizationFailedError

from compat_tests.cluster import Cluster, run_ctl, running
from compat_tests.kshim_process import wait_until
from kshim.ctl.faults import FaultClient, RequestLogClient

SEND_TIMEOUT_S = 30


@pytest.fixture
def faults(kshim):
    client = FaultClient(kshim.data_dir)
    client.clear()
    yield client
    client.clear()


@pytest.fixture
def requests(kshim):
    log = RequestLogClient(kshim.data_dir)
    log.mark()
    return log


def kp_producer(kshim, **extra) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=kshim.bootstrap, acks="all", retries=10, retry_backoff_ms=50,
                         client_id="kp-faults", **extra)


def ck_producer(kshim, **extra) -> Producer:
    return Producer({"bootstrap.servers": kshim.bootstrap, "acks": "all", "client.id": "ck-faults",
                     "retry.backoff.ms": 50, **extra})


def ck_send(producer: Producer, topic: str, value: bytes) -> tuple[KafkaError | None, int]:
    result: list = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: result.append((err, msg.offset())))
    producer.flush(SEND_TIMEOUT_S)
    assert result, "no delivery report"
    return result[0]


def read_all(kshim, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=kshim.bootstrap, consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < expected and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            values.extend(r.value for r in records)
    for records in consumer.poll(500).values():  # nothing more (no duplicate)
        values.extend(r.value for r in records)
    consumer.close()
    return values


def produces(entries: list[dict], topic: str) -> list[dict]:
    return [e for e in entries if e["api"] == "Produce" and f"{topic}/0" in e["partitions"]]


def test_kafka_python_retries_through_injected_not_leader_errors(kshim, faults, requests, topic_name):
    producer = kp_producer(kshim)
    producer.send(topic_name, b"warm-up", partition=0).get(SEND_TIMEOUT_S)  # the topic exists, metadata known
    [rule] = faults.add("error", api="Produce", topic=topic_name, partition=0, error="NOT_LEADER_OR_FOLLOWER",
                        count=2)
    assert rule["id"] and rule["count"] == 2 and rule["node"] == 0
    meta = producer.send(topic_name, b"through", partition=0).get(SEND_TIMEOUT_S)
    producer.close()
    assert meta.offset == 1
    sent = produces(requests.new(client_id="kp-faults"), topic_name)
    assert [(e["errors"], e["fault"]) for e in sent[1:]] == \
        [(["NOT_LEADER_OR_FOLLOWER"], rule["id"])] * 2 + [([], None)]
    assert faults.list() == []  # the rule is gone once spent
    assert read_all(kshim, topic_name, 2) == [b"warm-up", b"through"]


def test_confluent_kafka_retries_through_injected_not_leader_errors(kshim, faults, requests, topic_name):
    producer = ck_producer(kshim)
    assert ck_send(producer, topic_name, b"warm-up")[0] is None
    faults.add("error", api="Produce", topic=topic_name, error="NOT_LEADER_OR_FOLLOWER", count=2)
    err, offset = ck_send(producer, topic_name, b"through")
    assert err is None and offset == 1
    sent = produces(requests.new(client_id="ck-faults"), topic_name)
    assert [e["errors"] for e in sent[-3:]] == [["NOT_LEADER_OR_FOLLOWER"]] * 2 + [[]]


def test_a_non_retriable_error_reaches_the_application(kshim, faults, topic_name):
    kp = kp_producer(kshim)
    kp.send(topic_name, b"warm-up", partition=0).get(SEND_TIMEOUT_S)
    faults.add("error", api="Produce", topic=topic_name, error="TOPIC_AUTHORIZATION_FAILED", count=1,
               client_id="kp-faults")
    with pytest.raises(TopicAuthorizationFailedError):
        kp.send(topic_name, b"refused", partition=0).get(SEND_TIMEOUT_S)
    kp.close()
    ck = ck_producer(kshim)
    faults.add("error", api="Produce", topic=topic_name, error="TOPIC_AUTHORIZATION_FAILED", count=1,
               client_id="ck-faults")
    err, _ = ck_send(ck, topic_name, b"refused")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert read_all(kshim, topic_name, 1) == [b"warm-up"]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_delay_holds_each_answer_back(kshim, faults, requests, topic_name, client):
    if client == "kafka-python":
        producer = kp_producer(kshim)
        send = lambda v: producer.send(topic_name, v, partition=0).get(SEND_TIMEOUT_S)  # noqa: E731
    else:
        ck = ck_producer(kshim)
        send = lambda v: ck_send(ck, topic_name, v)  # noqa: E731
    send(b"warm-up")
    faults.add("delay", api="Produce", topic=topic_name, delay_ms=700, duration_ms=60_000)
    started = time.monotonic()
    send(b"late")
    assert time.monotonic() - started >= 0.7
    [entry] = produces(requests.new(), topic_name)[1:]
    assert entry["latency_ms"] >= 700 and entry["errors"] == [] and entry["fault"] is not None
    assert faults.list()[0]["applied"] == 1  # a duration rule stays until its time is up


def test_delay_of_every_fetch_slows_a_consumer_but_it_reads_everything(kshim, faults, requests, topic_name):
    producer = kp_producer(kshim)
    for i in range(3):
        producer.send(topic_name, b"%d" % i, partition=0)
    producer.flush(SEND_TIMEOUT_S)
    faults.add("delay", api="Fetch", topic=topic_name, delay_ms=200, duration_ms=60_000)
    consumer = Consumer({"bootstrap.servers": kshim.bootstrap, "group.id": topic_name, "client.id": "ck-fetch",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            values.append(msg.value())
    consumer.close()
    assert values == [b"0", b"1", b"2"]
    fetches = [e for e in requests.new(api="Fetch", client_id="ck-fetch") if e["fault"] is not None]
    assert fetches and all(e["latency_ms"] >= 200 for e in fetches)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_drop_closes_the_connection_and_the_idempotent_producer_retries_once(kshim, faults, requests, topic_name,
                                                                              client):
    if client == "kafka-python":
        producer = kp_producer(kshim, enable_idempotence=True)
        send = lambda v: producer.send(topic_name, v, partition=0).get(SEND_TIMEOUT_S)  # noqa: E731
    else:
        ck = ck_producer(kshim, **{"enable.idempotence": True})
        send = lambda v: ck_send(ck, topic_name, v)  # noqa: E731
    send(b"warm-up")
    faults.add("drop", api="Produce", topic=topic_name, count=1)
    send(b"after-drop")
    outcomes = [e["outcome"] for e in produces(requests.new(), topic_name)]
    assert outcomes[1:] == ["dropped", "answered"]
    assert read_all(kshim, topic_name, 2) == [b"warm-up", b"after-drop"]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_timeout_applies_the_request_but_withholds_the_answer(kshim, faults, requests, topic_name, client):
    """Accept-then-time-out: the records are written, the client never hears so. A producer that
    does not retry is told its record failed, and the record is in the log all the same; an
    idempotent producer times out and retries, and its retry is recognised as a duplicate: one copy."""
    if client == "kafka-python":
        producer = kp_producer(kshim, enable_idempotence=True, request_timeout_ms=2000)
        send = lambda v: producer.send(topic_name, v, partition=0).get(SEND_TIMEOUT_S)  # noqa: E731
        once = KafkaProducer(bootstrap_servers=kshim.bootstrap, acks="all", retries=0, request_timeout_ms=2000,
                             client_id="kp-once")

        def send_once(value: bytes) -> None:
            with pytest.raises(KafkaPythonError):
                once.send(topic_name, value, partition=0).get(SEND_TIMEOUT_S)
        close_once = lambda: once.close(timeout=5)  # noqa: E731
    else:
        ck = ck_producer(kshim, **{"enable.idempotence": True, "request.timeout.ms": 2000})
        send = lambda v: ck_send(ck, topic_name, v)  # noqa: E731
        ck_once = ck_producer(kshim, **{"retries": 0, "request.timeout.ms": 2000, "client.id": "ck-once"})

        def send_once(value: bytes) -> None:
            err, _ = ck_send(ck_once, topic_name, value)
            assert err is not None, "a withheld answer reached the client"
        close_once = lambda: None  # noqa: E731
    send(b"warm-up")
    # the request's effect without a retry: the producer is told its record failed (no answer came),
    # yet the broker applied the request, so a consumer reads it
    faults.add("timeout", api="Produce", topic=topic_name, count=1, delay_ms=10_000)
    send_once(b"applied-unanswered")
    close_once()
    assert read_all(kshim, topic_name, 2) == [b"warm-up", b"applied-unanswered"]
    faults.add("timeout", api="Produce", topic=topic_name, count=1, delay_ms=10_000)
    send(b"applied-once")
    assert read_all(kshim, topic_name, 3) == [b"warm-up", b"applied-unanswered", b"applied-once"]
    sent = produces(requests.new(), topic_name)
    assert [e["outcome"] for e in sent[1:]] == ["withheld", "withheld", "answered"] and sent[-1]["errors"] == []


def test_answer_once_and_fail_the_retry(kshim, faults, requests, topic_name):
    """after=1: the first matching request is answered, the next one (here: the next produce) fails."""
    producer = kp_producer(kshim)
    producer.send(topic_name, b"warm-up", partition=0).get(SEND_TIMEOUT_S)
    faults.add("error", api="Produce", topic=topic_name, error="NOT_LEADER_OR_FOLLOWER", after=1, count=1)
    producer.send(topic_name, b"first", partition=0).get(SEND_TIMEOUT_S)
    producer.send(topic_name, b"second", partition=0).get(SEND_TIMEOUT_S)
    producer.close()
    assert [e["errors"] for e in produces(requests.new(), topic_name)[1:]] == \
        [[], ["NOT_LEADER_OR_FOLLOWER"], []]
    assert read_all(kshim, topic_name, 3) == [b"warm-up", b"first", b"second"]


def test_ctl_fault_add_list_clear_and_requests(kshim, faults, topic_name):
    out = run_ctl(kshim.data_dir, "fault", "add", "error", "--api", "Metadata", "--topic", topic_name,
                  "--error", "UNKNOWN_TOPIC_OR_PARTITION", "--count", "3")
    assert out.returncode == 0, out.stderr
    rule = json.loads(out.stdout)
    assert rule["api"] == "Metadata" and rule["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    listed = run_ctl(kshim.data_dir, "fault", "list")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [rule["id"]]
    bad = run_ctl(kshim.data_dir, "fault", "add", "error", "--api", "Produce")
    assert bad.returncode == 1 and "needs the error code" in bad.stderr and "Traceback" not in bad.stderr
    cleared = run_ctl(kshim.data_dir, "fault", "clear", str(rule["id"]))
    assert json.loads(cleared.stdout) == {"cleared": 1}
    assert run_ctl(kshim.data_dir, "fault", "list").stdout == ""
    logged = run_ctl(kshim.data_dir, "requests", "--api", "Produce")
    assert logged.returncode == 0 and all(json.loads(line)["api"] == "Produce" for line in logged.stdout.splitlines())


def test_ctl_fault_names_a_missing_broker(tmp_path):
    out = run_ctl(tmp_path, "fault", "list")
    assert out.returncode == 1 and "no broker admin socket" in out.stderr


def test_rules_per_broker_and_network_faults_of_a_cluster(tmp_path, topic_name):
    with running(Cluster(tmp_path / "cluster", 2, "--replica-lag-time-max-ms", "3000")) as cluster:
        client = FaultClient(cluster.data_dir)
        [rule] = client.add("error", api="Metadata", error="UNKNOWN_SERVER_ERROR", count=5, broker=1)
        assert rule["node"] == 1
        assert [r["node"] for r in client.list()] == [1]
        assert [r["node"] for r in client.add("delay", api="Fetch", delay_ms=100, count=1)] == [0, 1]
        out = run_ctl(cluster.data_dir, "fault", "list", "--broker", "0")
        assert [json.loads(line)["action"] for line in out.stdout.splitlines()] == ["delay"]
        assert client.clear() == 3

        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic(topic_name, 1, 2)])
        admin.close()
        wait_until(lambda: len(cluster.partition(topic_name)["isr"]) == 2, message="both replicas in sync")
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", client_id="cluster-faults")
        producer.send(topic_name, b"before", partition=0).get(SEND_TIMEOUT_S)

        # latency between the brokers: an acks=all produce waits for the follower's delayed fetch
        out = run_ctl(cluster.data_dir, "net", "latency", "0", "1", "--ms", "400")
        assert out.returncode == 0 and [json.loads(line)["label"] for line in out.stdout.splitlines()] == ["net:0-1"] * 2
        producer.send(topic_name, b"slow", partition=0).get(SEND_TIMEOUT_S)  # the follower's fetches are slow now
        assert len(cluster.partition(topic_name)["isr"]) == 2  # slow, not lagging (the lag time is 3 s)
        started = time.monotonic()
        producer.send(topic_name, b"slow", partition=0).get(SEND_TIMEOUT_S)
        assert time.monotonic() - started >= 0.35

        # a partition: the follower falls out of the ISR (its fetches are cut), acks=all goes on
        # with the leader alone; once healed it catches up and is back in the ISR
        leader = cluster.partition(topic_name)["leader"]
        client.partition(0, 1)  # replaces the latency
        assert {r["action"] for r in client.list()} == {"drop"}
        wait_until(lambda: cluster.partition(topic_name)["isr"] == [leader], message="the follower out of the ISR")
        producer.send(topic_name, b"alone", partition=0).get(SEND_TIMEOUT_S)
        assert json.loads(run_ctl(cluster.data_dir, "net", "heal", "0", "1").stdout) == {"cleared": 2}
        wait_until(lambda: len(cluster.partition(topic_name)["isr"]) == 2, message="the follower back in the ISR")
        producer.close()

        log = RequestLogClient(cluster.data_dir)
        replica_fetches = [e for e in log.read(api="Fetch") if e["client_id"].startswith("kshim-replica-")]
        assert {e["outcome"] for e in replica_fetches} >= {"answered", "dropped"}
        assert any(e["client_id"] == "cluster-faults" for e in log.read(api="Produce"))
