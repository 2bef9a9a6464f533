"""`kshim ctl groups` and `ctl txns` against a broker whose only listener is SASL_SSL (SCRAM-SHA-512,
the development CA), run as real subprocesses: through --data-dir they connect over the
inter-broker listener as the inter-broker user; with --bootstrap, as the user of a
--command-config file (Kafka client properties); without credentials, or with a wrong password,
they fail with an error that names no password. A 3-broker cluster with a SASL_SSL inter-broker
listener: compat_tests/test_security_cluster.py."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.kshim_process import KshimProcess

pytestmark = pytest.mark.process

BROKER_PASSWORD, ALICE_PASSWORD = "broker-secret", "alice-secret"
GROUP, TXN_ID, TOPIC = "secure-group", "secure-txn", "secure-events"
DEADLINE_S = 30.0


def ctl(data_dir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kshim", "ctl", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=120)


def ok_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """The broker, a group with a committed offset and a transaction left open, and a client
    properties file for alice."""
    tmp = tmp_path_factory.mktemp("ctl-security")
    users = tmp / "users.txt"
    users.write_text(f"broker:{BROKER_PASSWORD}\nalice:{ALICE_PASSWORD}\n")
    proc = KshimProcess(tmp / "data", "--listeners", "SASL_SSL://127.0.0.1:0", "--tls-dev",
                        "--sasl-users", str(users), "--inter-broker-user", "broker",
                        "--group-initial-rebalance-delay-ms", "0").start()
    ca = next(line.split(" in ", 1)[1] for line in proc.output if line.startswith("kshim tls-dev:"))
    client = {"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": ALICE_PASSWORD,
              "log_level": 3}
    producer = Producer({**client, "transactional.id": TXN_ID, "transaction.timeout.ms": 600000})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"open", partition=0)
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer({**client, "group.id": GROUP})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    consumer.close()
    config = tmp / "alice.properties"
    config.write_text("# as Kafka's tools take it\nsecurity.protocol=SASL_SSL\n"
                      f"ssl.ca.location={ca}\nsasl.mechanism=SCRAM-SHA-256\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                      f"    username=\"alice\" password=\"{ALICE_PASSWORD}\";\n")
    yield proc, config, tmp
    del producer  # its transaction stays open until the broker stops
    code = proc.proc.poll()
    proc.terminate()
    assert code is None, "kshim exited during the tests:\n" + proc.logs()
    assert BROKER_PASSWORD not in proc.logs() and ALICE_PASSWORD not in proc.logs()


def test_data_dir_connects_as_the_inter_broker_user(secure):
    proc, _, _ = secure
    groups = ok_json(ctl(proc.data_dir, "groups", "--json"))
    group = next(g for g in groups["groups"] if g["group_id"] == GROUP)
    assert [(o["topic"], o["partition"], o["committed"]) for o in group["offsets"]] == [(TOPIC, 0, 1)]
    assert groups["brokers"][0]["port"] == proc.port  # the SASL_SSL listener, the only one
    txns = ok_json(ctl(proc.data_dir, "txns", "--json"))
    txn = next(t for t in txns["transactions"] if t["transactional_id"] == TXN_ID)
    assert txn["state"] == "Ongoing" and txn["partitions"] == {TOPIC: [0]}, txn
    producers = ok_json(ctl(proc.data_dir, "txns", "--producers", TOPIC, "--json"))
    assert producers["partitions"][0]["producers"][0]["transactional_id"] == TXN_ID


def test_bootstrap_with_command_config(secure):
    proc, config, _ = secure
    groups = ok_json(ctl(proc.data_dir, "groups", "--bootstrap", proc.bootstrap, "--command-config", str(config),
                         "--group", GROUP))
    assert [g["group_id"] for g in groups["groups"]] == [GROUP] and not groups["groups"][0]["error"]
    txns = ok_json(ctl(proc.data_dir, "txns", "--bootstrap", proc.bootstrap, "--command-config", str(config),
                       "--json"))
    assert any(t["transactional_id"] == TXN_ID and t["state"] == "Ongoing" for t in txns["transactions"])


def test_without_credentials_or_with_a_wrong_one_a_clear_error(secure):
    proc, config, tmp = secure
    plain = ctl(proc.data_dir, "groups", "--bootstrap", proc.bootstrap)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert "closed the connection" in plain.stderr or "no broker answered" in plain.stderr, plain.stderr

    wrong = tmp / "wrong.properties"
    wrong.write_text(config.read_text().replace(ALICE_PASSWORD, "not-the-password"))
    result = ctl(proc.data_dir, "txns", "--bootstrap", proc.bootstrap, "--command-config", str(wrong))
    assert result.returncode == 1 and "SASL" in result.stderr and "not-the-password" not in result.stderr, \
        result.stderr

    unused = tmp / "unused.properties"
    unused.write_text(config.read_text() + "request.timeout.ms=1000\n")
    result = ctl(proc.data_dir, "groups", "--bootstrap", proc.bootstrap, "--command-config", str(unused))
    assert result.returncode == 1 and "request.timeout.ms not used by kshim ctl" in result.stderr, result.stderr
