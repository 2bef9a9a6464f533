"""Kafka's per-listener security settings with real clients (docs/security.md, "Listeners" and
"Settings by Kafka's names"): ssl.client.auth reaches SSL listeners only (KIP-684), a SASL_SSL
listener asks for certificates by its own listener.name.<l>.ssl.client.auth, listeners named
freely through listener.security.protocol.map, SASL mechanisms and TLS material per listener."""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from compat_tests.cluster import Cluster, free_port_block, running
from compat_tests.kshim_process import KshimProcess, wait_until
from kshim.security.tls import dev_files, issue_client_files

pytestmark = pytest.mark.process

USER, PASSWORD = "alice", "alice-secret"


def listeners(proc: KshimProcess) -> dict[str, str]:
    return {line.split("://")[0].split()[-1]: line.split("://")[1]
            for line in proc.output if line.startswith("kshim listener ")}


def dev_ca(proc: KshimProcess) -> str:
    return next(line.split(" in ", 1)[1] for line in proc.output if line.startswith("kshim tls-dev:"))


def settings(address: str, protocol: str, ca: str, mechanism: str | None = None,
             cert: tuple | None = None) -> dict:
    out = {"bootstrap.servers": address, "security.protocol": protocol, "ssl.ca.location": ca}
    if mechanism is not None:
        out.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
    if cert is not None:
        out.update({"ssl.certificate.location": str(cert[0]), "ssl.key.location": str(cert[1])})
    return out


def brokers_listed(config: dict) -> list[str]:
    """The brokers a client that connected with `config` is told of (Metadata), as host:port."""
    md = AdminClient(config).list_topics(timeout=20)
    return [f"{b.host}:{b.port}" for b in md.brokers.values()]


def refused(config: dict) -> None:
    """The client cannot get Metadata: its TLS handshake or its authentication fails."""
    errors: list = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    wait_until(lambda: admin.poll(0.1) >= 0 and errors, 20, message="the client's connection error")


def round_trip(config: dict, topic: str) -> None:
    p = Producer({**config, "acks": "all"})
    p.produce(topic, b"v")
    assert p.flush(30) == 0


def stop(proc: KshimProcess) -> None:
    code = proc.proc.poll()
    proc.terminate()
    assert code is None, "kshim exited during the tests:\n" + proc.logs()
    assert PASSWORD not in proc.logs()


# ---------------------------------------------------------------- the broker-wide ssl.client.auth
@pytest.fixture(scope="module")
def mtls(tmp_path_factory):
    """ssl.client.auth=required broker-wide, with an SSL and a SASL_SSL listener."""
    tmp = tmp_path_factory.mktemp("mtls")
    proc = KshimProcess(tmp / "data", "--listeners", "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "--tls-dev",
                        "--tls-client-auth", "required", "--sasl-user", f"{USER}:{PASSWORD}",
                        "--connection-failed-authentication-delay-ms", "0").start()
    proc.client_cert = issue_client_files(proc.data_dir, "client-1", tmp / "certs")
    yield proc
    stop(proc)


def test_broker_wide_client_auth_requires_certificates_on_ssl_listeners_only(mtls, topic_name):
    """KIP-684: a SASL_SSL client with the right password and no certificate is accepted; on the
    SSL listener a certificate is required."""
    ca, addresses = dev_ca(mtls), listeners(mtls)
    round_trip(settings(addresses["SASL_SSL"], "SASL_SSL", ca, "SCRAM-SHA-512"), topic_name)
    round_trip(settings(addresses["SSL"], "SSL", ca, cert=mtls.client_cert), topic_name)
    refused(settings(addresses["SSL"], "SSL", ca))
    wait_until(lambda: any("on listener SSL: TLS handshake failed" in line for line in mtls.output), 20,
               message="the broker's log line for the refused handshake")


# ---------------------------------------------------------------- listeners by name, settings per listener
@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """INTERNAL (SASL_SSL; client certificates required by its own ssl.client.auth, SCRAM-SHA-512
    only, the --tls-dev certificate), EXTERNAL (SSL, its own PKCS12 keystore) and LEGACY (SASL_SSL,
    PLAIN allowed, its own PEM keystore file with an encrypted key)."""
    tmp = tmp_path_factory.mktemp("named")
    ca, cert, key = dev_files(tmp / "other-ca")  # another CA than the broker's --tls-dev one
    broker_key = serialization.load_pem_private_key(key.read_bytes(), None)
    broker_cert = x509.load_pem_x509_certificate(cert.read_bytes())
    p12 = tmp / "external.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", broker_key, broker_cert, None, serialization.BestAvailableEncryption(b"p12-secret")))
    pem = tmp / "legacy-keystore.pem"
    pem.write_bytes(broker_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.BestAvailableEncryption(b"key-secret")) + cert.read_bytes())
    overrides = {
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.external.ssl.keystore.type": "PKCS12",
        "listener.name.external.ssl.keystore.location": str(p12),
        "listener.name.external.ssl.keystore.password": "p12-secret",
        "listener.name.legacy.ssl.keystore.type": "PEM",
        "listener.name.legacy.ssl.keystore.location": str(pem),
        "listener.name.legacy.ssl.key.password": "key-secret",
    }
    proc = KshimProcess(
        tmp / "data", "--listeners", "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0,LEGACY://127.0.0.1:0",
        "--listener-security-protocol-map", "INTERNAL:SASL_SSL,EXTERNAL:SSL,LEGACY:SASL_SSL", "--tls-dev",
        "--sasl-user", f"{USER}:{PASSWORD}", "--connection-failed-authentication-delay-ms", "0",
        *[arg for name, value in overrides.items() for arg in ("--override", f"{name}={value}")]).start()
    proc.client_cert = issue_client_files(proc.data_dir, "client-1", tmp / "certs")
    proc.other_ca = str(ca)
    yield proc
    stop(proc)
    assert "p12-secret" not in proc.logs() and "key-secret" not in proc.logs()


def test_each_named_listener_advertises_its_own_address(named):
    addresses, ca = listeners(named), dev_ca(named)
    assert set(addresses) == {"INTERNAL", "EXTERNAL", "LEGACY"}
    internal = settings(addresses["INTERNAL"], "SASL_SSL", ca, "SCRAM-SHA-512", cert=named.client_cert)
    assert brokers_listed(internal) == [addresses["INTERNAL"]]
    assert brokers_listed(settings(addresses["EXTERNAL"], "SSL", named.other_ca)) == [addresses["EXTERNAL"]]
    assert brokers_listed(settings(addresses["LEGACY"], "SASL_SSL", named.other_ca, "PLAIN")) == [addresses["LEGACY"]]


def test_a_sasl_ssl_listener_requires_certificates_by_its_own_client_auth(named, topic_name):
    addresses, ca = listeners(named), dev_ca(named)
    round_trip(settings(addresses["INTERNAL"], "SASL_SSL", ca, "SCRAM-SHA-512", cert=named.client_cert), topic_name)
    refused(settings(addresses["INTERNAL"], "SASL_SSL", ca, "SCRAM-SHA-512"))  # the password alone is not enough
    # LEGACY, SASL_SSL too, asks for none
    round_trip(settings(addresses["LEGACY"], "SASL_SSL", named.other_ca, "SCRAM-SHA-512"), topic_name)


def test_sasl_mechanisms_are_per_listener(named, topic_name):
    addresses, ca = listeners(named), dev_ca(named)
    refused(settings(addresses["INTERNAL"], "SASL_SSL", ca, "PLAIN", cert=named.client_cert))
    wait_until(lambda: any("unsupported SASL mechanism 'PLAIN'" in line for line in named.output), 20,
               message="the broker's log line for the refused mechanism")
    round_trip(settings(addresses["LEGACY"], "SASL_SSL", named.other_ca, "PLAIN"), topic_name)


def test_listeners_present_their_own_certificates(named, topic_name):
    """EXTERNAL (PKCS12) and LEGACY (a PEM keystore file) present the other CA's certificate:
    a client trusting only the --tls-dev CA, as on INTERNAL, is refused there."""
    addresses = listeners(named)
    round_trip(settings(addresses["EXTERNAL"], "SSL", named.other_ca), topic_name)
    refused(settings(addresses["EXTERNAL"], "SSL", dev_ca(named)))
    refused(settings(addresses["LEGACY"], "SASL_SSL", dev_ca(named), "PLAIN"))


# ---------------------------------------------------------------- a cluster
def test_a_cluster_replicates_over_a_named_listener_that_requires_certificates(tmp_path, topic_name):
    """The supervisor hands each broker the map and the listener.name.* settings: the brokers
    replicate over INTERNAL (SASL_SSL, client certificates required by its own ssl.client.auth,
    so they present theirs), and a client on EXTERNAL is told EXTERNAL's ports."""
    base = free_port_block(4)
    cluster = Cluster(tmp_path / "cluster", 2, "--listeners",
                      f"INTERNAL://127.0.0.1:{base},EXTERNAL://127.0.0.1:{base + 2}",
                      "--listener-security-protocol-map", "INTERNAL:SASL_SSL,EXTERNAL:SSL", "--tls-dev",
                      "--inter-broker-listener", "internal", "--inter-broker-user", "broker",
                      "--sasl-user", f"broker:{PASSWORD}", "--replication-factor", "2",
                      "--override", "listener.name.internal.ssl.client.auth=required",
                      "--override", "listener.name.internal.sasl.enabled.mechanisms=SCRAM-SHA-512",
                      base_port=base)
    with running(cluster):
        ca = dev_ca(cluster.process)
        external = settings(f"127.0.0.1:{base + 2}", "SSL", ca)
        assert sorted(brokers_listed(external)) == [f"127.0.0.1:{base + 2}", f"127.0.0.1:{base + 3}"]
        p = Producer({**external, "acks": "all"})
        for i in range(20):
            p.produce(topic_name, value=f"v{i}".encode())
        assert p.flush(60) == 0  # acks=all: the follower fetched them over INTERNAL
        wait_until(lambda: len(cluster.partition(topic_name)["isr"]) == 2, 60, message="a full ISR")
        internal = {**settings(f"127.0.0.1:{base}", "SASL_SSL", ca, "SCRAM-SHA-512"), "sasl.username": "broker"}
        refused(internal)  # no client certificate


def test_a_clusters_brokers_get_passwords_in_their_environment_not_on_their_command_lines(tmp_path, topic_name):
    """Command lines are world-readable (/proc/PID/cmdline, ps) and the supervisor logs each
    broker's: a keystore password from the config file and the SASL users reach the brokers
    through their environment (their owner's only). The brokers still use them: EXTERNAL serves
    its PKCS12 keystore and the follower replicates over INTERNAL as the SASL user."""
    ca, cert, key = dev_files(tmp_path / "other-ca")
    p12 = tmp_path / "external.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", serialization.load_pem_private_key(key.read_bytes(), None),
        x509.load_pem_x509_certificate(cert.read_bytes()), None,
        serialization.BestAvailableEncryption(b"p12-cluster-secret")))
    users = tmp_path / "users.txt"
    users.write_text(f"broker:{PASSWORD}\n")
    props = tmp_path / "server.properties"
    props.write_text("listener.name.external.ssl.keystore.type=PKCS12\n"
                     f"listener.name.external.ssl.keystore.location={p12}\n"
                     "listener.name.external.ssl.keystore.password=p12-cluster-secret\n")
    base = free_port_block(4)
    cluster = Cluster(tmp_path / "cluster", 2, "--listeners",
                      f"INTERNAL://127.0.0.1:{base},EXTERNAL://127.0.0.1:{base + 2}",
                      "--listener-security-protocol-map", "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SSL",
                      "--inter-broker-listener", "INTERNAL", "--inter-broker-user", "broker",
                      "--sasl-users", str(users), "--sasl-user", "extra:extra-secret",
                      "--config-file", str(props), "--replication-factor", "2", base_port=base)
    with running(cluster):
        external = settings(f"127.0.0.1:{base + 2}", "SSL", str(ca))
        p = Producer({**external, "acks": "all"})
        for i in range(10):
            p.produce(topic_name, value=f"v{i}".encode())
        assert p.flush(60) == 0  # acks=all on 2 replicas: the follower fetched over INTERNAL as `broker`
        children = cluster.children()
        assert len(children) == 3
        for pid in children:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"p12-cluster-secret" not in cmdline and b"extra-secret" not in cmdline, cmdline
        logs = [path.read_text(errors="replace") for path in (tmp_path / "cluster").rglob("*.log")]
        assert logs and not any("p12-cluster-secret" in text or "extra-secret" in text for text in logs)


# ---------------------------------------------------------------- refused at start
def start_fails(tmp_path, *argv: str) -> str:
    """`kshim serve` with these options exits at once with 2; its message."""
    out = subprocess.run([sys.executable, "-m", "kshim", "serve", "--port", "0", "--data-dir",
                          str(tmp_path / f"data-{uuid.uuid4().hex[:6]}"), *argv],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    return out.stderr


def test_a_jks_keystore_or_an_unmapped_name_is_refused_at_start(tmp_path):
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed")  # a JKS file's magic number
    message = start_fails(tmp_path, "--listeners", "SSL://127.0.0.1:0", "--override", "ssl.keystore.type=JKS",
                          "--override", f"ssl.keystore.location={jks}", "--override", "ssl.keystore.password=pw")
    assert "JKS" in message and "keytool" in message and "PKCS12" in message
    message = start_fails(tmp_path, "--listeners", "INTERNAL://127.0.0.1:0")
    assert "No security protocol defined for listener INTERNAL" in message
