"""`kshim serve --config-file server.properties --override NAME=VALUE`, as a user runs Kafka: the
file's settings take effect, DescribeConfigs shows where each came from, a refused config stops
the start with its name, and client libraries' own test fixtures start kshim unchanged."""
from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from compat_tests.fixture_configs import free_ports, write_kafka_python
from compat_tests.kshim_process import KshimProcess
from kshim.testing import free_port_block

STATIC, DEFAULT = 4, 5  # DescribeConfigs' config_source


def start(tmp_path, lines: list[str], *extra: str) -> KshimProcess:
    port = free_port_block(1)
    path = tmp_path / "server.properties"
    path.write_text("\n".join(line.format(port=port, data=tmp_path / "logs") for line in lines) + "\n")
    return KshimProcess(None, "--config-file", str(path), *extra, port=port).start()


def broker_configs(admin: AdminClient) -> dict:
    resource = ConfigResource("BROKER", "0")
    return admin.describe_configs([resource])[resource].result(timeout=10)


def test_a_server_properties_file_configures_the_broker(tmp_path):
    kshim = start(tmp_path, ["# as Kafka's own config/server.properties has them",
                             "process.roles=broker,controller", "node.id=0",
                             "listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:9093",
                             "controller.listener.names=CONTROLLER", "num.network.threads=3",
                             "num.partitions=4", "delete.topic.enable=false", "log.retention.hours=2"])
    try:
        admin = AdminClient({"bootstrap.servers": kshim.bootstrap})
        admin.create_topics([NewTopic("made-by-default")])["made-by-default"].result(timeout=10)
        metadata = admin.list_topics("made-by-default", timeout=10)
        assert len(metadata.topics["made-by-default"].partitions) == 4  # num.partitions
        with pytest.raises(Exception, match="TOPIC_DELETION_DISABLED"):
            admin.delete_topics(["made-by-default"])["made-by-default"].result(timeout=10)
        configs = broker_configs(admin)
        assert (configs["num.partitions"].value, configs["num.partitions"].source) == ("4", STATIC)
        assert (configs["num.network.threads"].value, configs["num.network.threads"].source) == ("3", STATIC)
        assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (str(2 * 3600_000), STATIC)
        assert configs["num.io.threads"].source == DEFAULT
        topic = ConfigResource("TOPIC", "made-by-default")
        retention = admin.describe_configs([topic])[topic].result(timeout=10)["retention.ms"]
        assert retention.value == str(2 * 3600_000)
        assert any("num.network.threads=3 accepted with no effect" in line for line in kshim.output)
    finally:
        assert kshim.terminate() == 0, kshim.logs()


@pytest.mark.parametrize("override, named", [
    ("zookeeper.connect=localhost:2181", "zookeeper.connect"),
    ("num.partitons=3", "num.partitons"),
    ("remote.log.storage.system.enable=true", "remote.log.storage.system.enable"),
])
def test_a_refused_config_stops_the_start_and_names_itself(tmp_path, override, named):
    done = subprocess.run([sys.executable, "-m", "kshim", "serve", "--ephemeral", "--port", "0", "--override",
                           override], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert named in done.stderr and "kshim ready" not in done.stdout


def test_kafka_pythons_fixture_config_starts_kshim_and_its_group_timings_hold(tmp_path, topic_name):
    """kafka-python's own group test joins with session_timeout_ms=3000, which its fixture allows
    with group.min.session.timeout.ms=1000 (Kafka's minimum is 6000)."""
    from kafka import KafkaConsumer, KafkaProducer

    data = tmp_path / "kraft-combined-logs"
    path = tmp_path / "kafka.properties"
    port = write_kafka_python(path, data)
    kshim = KshimProcess(data, "--config-file", str(path), port=port).start()
    try:
        producer = KafkaProducer(bootstrap_servers=kshim.bootstrap)
        for i in range(3):
            producer.send(topic_name, f"v{i}".encode())
        producer.flush(timeout=20)
        producer.close()
        consumer = KafkaConsumer(topic_name, bootstrap_servers=kshim.bootstrap, group_id=topic_name,
                                 session_timeout_ms=3000, heartbeat_interval_ms=1000,
                                 auto_offset_reset="earliest", consumer_timeout_ms=20_000)
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 3:
                break
        consumer.commit()
        consumer.close()
        assert sorted(values) == [b"v0", b"v1", b"v2"]
        admin = AdminClient({"bootstrap.servers": kshim.bootstrap})
        configs = broker_configs(admin)
        assert (configs["group.min.session.timeout.ms"].value, configs["group.min.session.timeout.ms"].source) == \
            ("1000", STATIC)
        metadata = admin.list_topics(timeout=10)
        assert len(metadata.topics["__consumer_offsets"].partitions) == 2  # offsets.topic.num.partitions
    finally:
        assert kshim.terminate() == 0, kshim.logs()


def test_a_clusters_brokers_take_the_files_configs(tmp_path):
    """`kshim serve --brokers 2 --config-file F`: each broker process gets the configs that are no
    kshim option (a topic default, a coordinator setting, a no-op), and reports them as given."""
    from compat_tests.cluster import Cluster, running

    path = tmp_path / "server.properties"
    path.write_text("log.retention.minutes=30\ngroup.min.session.timeout.ms=1500\nnum.io.threads=4\n"
                    "default.replication.factor=2\n")
    with running(Cluster(tmp_path / "data", 2, "--config-file", str(path))) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for node in ("0", "1"):
            resource = ConfigResource("BROKER", node)
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
            assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == ("1800000", STATIC)
            assert (configs["group.min.session.timeout.ms"].value,
                    configs["group.min.session.timeout.ms"].source) == ("1500", STATIC)
            assert (configs["num.io.threads"].value, configs["num.io.threads"].source) == ("4", STATIC)
        admin.create_topics([NewTopic("replicated")])["replicated"].result(timeout=20)
        metadata = admin.list_topics("replicated", timeout=10)
        assert len(metadata.topics["replicated"].partitions[0].replicas) == 2  # default.replication.factor


def test_each_listener_advertises_its_own_host(tmp_path):
    """advertised.listeners, host by listener (a Docker-style second listener): a client is told
    every broker's address on the listener it came in on, at that listener's advertised host."""
    port, docker = free_ports(2)
    path = tmp_path / "server.properties"
    path.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port},DOCKER://127.0.0.1:{docker}\n"
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,DOCKER:PLAINTEXT\n"
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},DOCKER://localhost:{docker}\n")
    kshim = KshimProcess(None, "--config-file", str(path), port=port).start()
    try:
        for bootstrap, host in ((f"127.0.0.1:{port}", "127.0.0.1"), (f"127.0.0.1:{docker}", "localhost")):
            brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
            assert [(b.host, b.port) for b in brokers.values()] == [(host, int(bootstrap.rsplit(":", 1)[1]))]
    finally:
        assert kshim.terminate() == 0, kshim.logs()
