"""Listeners, TLS and SASL with real clients (docs/security.md): one broker with PLAINTEXT,
SASL_PLAINTEXT, SASL_SSL and SSL (mTLS requested) listeners and the development CA, its authorizer
open to everyone where no ACL applies (so an ACL can show who a connection's principal is)."""
from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from cryptography import x509
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as KafkaPythonError

from compat_tests.kshim_process import KshimProcess, wait_until
from compat_tests.raw_kafka import METADATA, RawConnection
from kshim.ctl.faults import RequestLogClient
from kshim.security.tls import issue_client_files

pytestmark = pytest.mark.process

USER, PASSWORD = "alice", "alice-secret"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SecureBroker:
    def __init__(self, proc: KshimProcess, tmp) -> None:
        self.proc = proc
        self.listeners = {line.split("://")[0].split()[-1]: line.split("://")[1]
                          for line in proc.output if line.startswith("kshim listener ")}
        self.ca = next(line.split(" in ", 1)[1] for line in proc.output if line.startswith("kshim tls-dev:"))
        self.client_cert, self.client_key = issue_client_files(proc.data_dir, "client-1", tmp / "client-certs")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    users = tmp / "users.txt"
    users.write_text(f"# SASL users\n{USER}:{PASSWORD}\nbob:bob-secret\n")
    proc = KshimProcess(
        tmp / "data", "--partitions", "2", "--listeners",
        "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
        "--tls-dev", "--tls-client-auth", "requested", "--sasl-users", str(users),
        "--connection-failed-authentication-delay-ms", "300",
        "--authorizer", "--allow-everyone-if-no-acl-found").start()
    yield SecureBroker(proc, tmp)
    code = proc.proc.poll()
    proc.terminate()
    assert code is None, "kshim exited during the tests:\n" + proc.logs()
    assert PASSWORD not in proc.logs() and "bob-secret" not in proc.logs()


def confluent_settings(b: SecureBroker, listener: str, mechanism: str | None = None, **extra) -> dict:
    out = {"bootstrap.servers": b.listeners[listener], "security.protocol": listener}
    if listener.endswith("SSL"):
        out["ssl.ca.location"] = b.ca
    if mechanism == "OAUTHBEARER":
        out.update({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": f"principal={USER}",
                    "enable.sasl.oauthbearer.unsecure.jwt": True})
    elif mechanism:
        out.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
    out.update(extra)
    return out


def confluent_round_trip(settings: dict, topic: str, n: int = 20) -> None:
    """Produce n records, then consume them back in a consumer group, as a user would check."""
    p = Producer({**settings, "acks": "all"})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(n))


def test_confluent_sasl_plaintext_plain(broker, topic_name):
    confluent_round_trip(confluent_settings(broker, "SASL_PLAINTEXT", "PLAIN"), topic_name)


def test_confluent_sasl_ssl_scram_sha_512_with_transactions(broker, topic_name):
    settings = confluent_settings(broker, "SASL_SSL", "SCRAM-SHA-512")
    confluent_round_trip(settings, topic_name)
    p = Producer({**settings, "transactional.id": f"tx-{topic_name}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic_name, value=b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic_name, value=b"aborted")
    p.abort_transaction(30)
    c = Consumer({**settings, "group.id": f"rc-{topic_name}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})
    c.subscribe([topic_name])
    seen: list[bytes] = []
    wait_until(lambda: seen.extend(m.value() for m in c.consume(50, 0.5) if m.error() is None)
               or b"committed" in seen, 60, message="the committed transactional record")
    c.close()
    assert b"aborted" not in seen


def deliver(settings: dict, topic: str) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    outcome: list = []
    p = Producer({**settings, "message.timeout.ms": 10000})
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def test_confluent_ssl_with_client_certificate(broker, topic_name):
    """mTLS: the SSL listener asks for the client's certificate, verifies it against its CA and
    makes its subject the connection's principal. The topic's only ACL allows that principal (so
    it is closed to every other, User:ANONYMOUS included): the client with the certificate uses
    it, the same client without one is refused."""
    subject = x509.load_pem_x509_certificate(broker.client_cert.read_bytes()).subject.rfc4514_string()
    assert subject == "CN=client-1,O=kshim dev"
    probe = f"{topic_name}-probe"
    admin = AdminClient(confluent_settings(broker, "PLAINTEXT"))
    for future in admin.create_topics([NewTopic(topic_name, 2, 1), NewTopic(probe, 1, 1)]).values():
        future.result(30)
    acl = AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.PREFIXED, f"User:{subject}", "*",
                     AclOperation.ALL, AclPermissionType.ALLOW)  # both topics
    admin.create_acls([acl])[acl].result(30)
    with_certificate = confluent_settings(broker, "SSL", **{
        "ssl.certificate.location": str(broker.client_cert), "ssl.key.location": str(broker.client_key)})
    assert deliver(with_certificate, probe) is None
    refused = deliver(confluent_settings(broker, "SSL"), probe)  # TLS without a certificate: User:ANONYMOUS
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    confluent_round_trip(with_certificate, topic_name)


def test_confluent_oauthbearer_unsecured_jwt(broker, topic_name):
    confluent_round_trip(confluent_settings(broker, "SASL_SSL", "OAUTHBEARER"), topic_name)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_sasl_ssl(broker, topic_name, mechanism):
    settings = dict(bootstrap_servers=broker.listeners["SASL_SSL"], security_protocol="SASL_SSL",
                    ssl_cafile=broker.ca, sasl_mechanism=mechanism, sasl_plain_username=USER,
                    sasl_plain_password=PASSWORD)
    producer = KafkaProducer(acks="all", **settings)
    for i in range(10):
        producer.send(topic_name, value=f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic_name, group_id=f"kp-{topic_name}", auto_offset_reset="earliest",
                             consumer_timeout_ms=20000, **settings)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 10:
            break
    consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))


def test_each_listener_advertises_its_own_endpoints(broker):
    for name in ("PLAINTEXT", "SASL_PLAINTEXT"):
        with RawConnection(broker.listeners[name]) as conn:
            if name.startswith("SASL"):
                assert conn.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
                answer = conn.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{USER}\0{PASSWORD}".encode()})
                assert answer.error_code == 0, answer
            md = conn.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False})
        assert [f"{b.host}:{b.port}" for b in md.brokers] == [broker.listeners[name]]


def test_wrong_password_fails_and_is_delayed(broker, topic_name):
    with RawConnection(broker.listeners["SASL_PLAINTEXT"]) as conn:
        assert conn.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        started = time.monotonic()
        answer = conn.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{USER}\0wrong".encode()})
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 0.25  # connection.failed.authentication.delay.ms=300
        assert "wrong" not in (answer.error_message or "")
        assert conn.wait_closed()
    errors: list = []
    admin = AdminClient(confluent_settings(broker, "SASL_SSL", "SCRAM-SHA-512", **{
        "sasl.password": "nope", "error_cb": errors.append}))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    wait_until(lambda: admin.poll(0.1) >= 0 and any(e.code() == KafkaError._AUTHENTICATION for e in errors), 20,
               message="librdkafka's authentication error")
    del admin
    with pytest.raises(KafkaPythonError):
        KafkaProducer(bootstrap_servers=broker.listeners["SASL_PLAINTEXT"], security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username=USER, sasl_plain_password="nope")
    assert "wrong" not in broker.proc.logs() and "nope" not in broker.proc.logs()


def test_out_of_order_and_unauthenticated_requests_are_refused(broker):
    sasl = broker.listeners["SASL_PLAINTEXT"]
    with RawConnection(sasl) as conn:  # a request before authentication: closed, unanswered
        conn.send_request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        assert conn.wait_closed()
    with RawConnection(sasl) as conn:  # SaslAuthenticate before SaslHandshake
        assert conn.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"}).error_code == 34  # ILLEGAL_SASL_STATE
        assert conn.wait_closed()
    with RawConnection(sasl) as conn:  # a mechanism not enabled
        answer = conn.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == 33 and "SCRAM-SHA-512" in answer.mechanisms  # UNSUPPORTED_SASL_MECHANISM
        assert conn.wait_closed()
    with RawConnection(sasl) as conn:  # after the handshake, only SaslAuthenticate
        assert conn.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        conn.send_request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        assert conn.wait_closed()
    with RawConnection(broker.listeners["PLAINTEXT"]) as conn:  # no SASL here: answered, left open
        assert conn.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert conn.api_versions().error_code == 0


def test_plaintext_client_on_a_tls_port_is_closed(broker):
    for name in ("SSL", "SASL_SSL"):
        with RawConnection(broker.listeners[name]) as conn:
            conn.send_request(18, 3, {"client_software_name": "x", "client_software_version": "1"})
            assert conn.wait_closed()
    # a TLS client that does not trust the broker's CA fails its handshake; the broker serves on
    host, port = broker.listeners["SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises(ssl.SSLError):
            ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")
    admin = AdminClient(confluent_settings(broker, "SASL_SSL", "PLAIN"))
    assert admin.list_topics(timeout=20).brokers


def test_scram_credentials_set_with_the_admin_api_authenticate(broker, topic_name):
    from confluent_kafka.admin import (
        ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion)
    admin = AdminClient(confluent_settings(broker, "SASL_SSL", "SCRAM-SHA-512"))
    carol = f"carol-{uuid.uuid4().hex[:6]}"
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(carol, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-pw")])
    futures[carol].result(30)
    described = admin.describe_user_scram_credentials([carol])[carol].result(30)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    carol_settings = confluent_settings(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", **{
        "sasl.username": carol, "sasl.password": "carol-pw"})
    confluent_round_trip(carol_settings, topic_name, n=5)
    # Kafka's answers to bad alterations, one per user
    bad = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"pw"),
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)])
    for user, code in (("dave", "UNACCEPTABLE_CREDENTIAL"), ("nobody", "RESOURCE_NOT_FOUND")):
        with pytest.raises(KafkaException) as e:
            bad[user].result(30)
        assert e.value.args[0].name() == code
    with pytest.raises(KafkaException) as e:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(30)
    assert e.value.args[0].name() == "RESOURCE_NOT_FOUND"
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(carol, ScramMechanism.SCRAM_SHA_256)])[carol].result(30)
    errors: list = []
    gone = AdminClient({**carol_settings, "error_cb": errors.append})
    wait_until(lambda: gone.poll(0.1) >= 0 and any(e.code() == KafkaError._AUTHENTICATION for e in errors), 30,
               message="the deleted credential to fail authentication")


# -- the Apache Kafka Java client ------------------------------------------------------------------
@pytest.fixture(scope="module")
def java(tmp_path_factory):
    from compat_tests.java_client import build
    return build(tmp_path_factory.mktemp("java-client"))


def java_props(b: SecureBroker, listener: str, mechanism: str | None = None) -> dict:
    props = {"security.protocol": listener}
    if listener.endswith("SSL"):
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": b.ca})
    if mechanism == "OAUTHBEARER":
        props.update({"sasl.mechanism": mechanism, "sasl.jaas.config":
                      "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                      f'unsecuredLoginStringClaim_sub="{USER}";'})
    elif mechanism:
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        props.update({"sasl.mechanism": mechanism, "sasl.jaas.config":
                      f'org.apache.kafka.common.security.{module} required username="{USER}" password="{PASSWORD}";'})
    return props


@pytest.mark.java
@pytest.mark.parametrize("listener,mechanism", [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                                ("SASL_SSL", "OAUTHBEARER"), ("SSL", None)])
def test_java_client_produces_consumes_and_commits_transactions(broker, java, topic_name, listener, mechanism,
                                                                tmp_path):
    props = java_props(broker, listener, mechanism)
    if listener == "SSL":  # mTLS: the client's key and certificate in one PEM keystore
        keystore = tmp_path / "client-keystore.pem"
        keystore.write_text(broker.client_key.read_text() + broker.client_cert.read_text())
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)})
    bootstrap = broker.listeners[listener]
    sent = java.run("produce", bootstrap, topic_name, 50, props=props).of("sent")
    assert len(sent) == 50
    consumed = java.run("consume", bootstrap, topic_name, f"g-{topic_name}", 50, props=props).of("record")
    assert sorted(r["value"] for r in consumed) == sorted(s["value"] for s in sent)
    java.run("txn", bootstrap, f"tx-{topic_name}", topic_name, "commit:5,abort:3", props=props)
    committed = java.run("consume", bootstrap, topic_name, f"rc-{topic_name}", 55, "--isolation", "read_committed",
                         "--extra-ms", 1000, props=props)
    assert len(committed.of("record")) == 55 and committed.of("extra") == []


# -- session lifetime and re-authentication (KIP-368) ---------------------------------------------
@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reauth")
    proc = KshimProcess(tmp / "data", "--listeners", "SASL_PLAINTEXT://127.0.0.1:0", "--sasl-user",
                        f"{USER}:{PASSWORD}", "--connections-max-reauth-ms", "1500").start()
    yield proc
    proc.terminate()


def test_clients_reauthenticate_before_their_session_ends(reauth_broker, topic_name):
    settings = {"bootstrap.servers": reauth_broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": PASSWORD}
    p = Producer(settings)
    c = Consumer({**settings, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"})
    c.subscribe([topic_name])
    got: list[bytes] = []
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 6:  # four session lifetimes, on the same connections
        p.produce(topic_name, value=f"r{i}".encode())
        p.poll(0)
        i += 1
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    assert p.flush(20) == 0
    wait_until(lambda: [got.append(m.value()) for m in c.consume(100, 0.5) if m.error() is None] is not None
               and len(got) >= i, 30, message="every record")
    c.close()
    assert sorted(got) == sorted(f"r{k}".encode() for k in range(i))
    assert "session expired" not in reauth_broker.logs()  # librdkafka re-authenticated in time
    # ... on the same connections: the broker's request log holds each connection's SaslHandshake
    # and SaslAuthenticate requests, several per connection (one would mean it never re-authenticated)
    requests = RequestLogClient(reauth_broker.data_dir)
    handshakes = Counter(e["peer"] for e in requests.read(api="SaslHandshake") if e["outcome"] == "answered")
    authenticated = requests.read(api="SaslAuthenticate")
    assert handshakes and max(handshakes.values()) >= 3, handshakes  # a connection of the 6 s: 4 session lifetimes
    assert authenticated and all(e["errors"] == [] for e in authenticated)


def test_a_connection_that_does_not_reauthenticate_is_closed(reauth_broker):
    with RawConnection(reauth_broker.bootstrap) as conn:
        assert conn.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        answer = conn.request(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{USER}\0{PASSWORD}".encode()})
        assert answer.error_code == 0 and answer.session_lifetime_ms == 1500
        assert conn.api_versions().error_code == 0
        time.sleep(1.6)  # past the session's end, which the broker told the client
        conn.send_request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        assert conn.wait_closed()


def test_describe_configs_reports_listeners_and_no_password(broker):
    from confluent_kafka.admin import ConfigResource
    admin = AdminClient(confluent_settings(broker, "SASL_SSL", "SCRAM-SHA-256"))
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    listeners = configs["listeners"].value.split(",")
    assert sorted(listeners) == sorted(f"{name}://{addr}" for name, addr in broker.listeners.items())
    assert configs["sasl.enabled.mechanisms"].value == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
    assert configs["connection.failed.authentication.delay.ms"].value == "300"
    everything = " ".join(f"{k}={c.value}" for k, c in configs.items())
    assert PASSWORD not in everything and "bob-secret" not in everything


def test_kafka_python_oauthbearer_unsecured_jwt(broker, topic_name):
    import base64
    import json

    from kafka.net.sasl.oauth import AbstractTokenProvider

    class UnsecuredToken(AbstractTokenProvider):
        def token(self) -> str:
            def enc(d: dict) -> str:
                return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
            return f"{enc({'alg': 'none'})}.{enc({'sub': USER, 'exp': time.time() + 3600, 'iat': time.time()})}."

        def extensions(self) -> dict:
            return {}

    settings = dict(bootstrap_servers=broker.listeners["SASL_SSL"], security_protocol="SASL_SSL",
                    ssl_cafile=broker.ca, sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=UnsecuredToken())
    producer = KafkaProducer(acks="all", **settings)
    producer.send(topic_name, value=b"oauth").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic_name, group_id=None, auto_offset_reset="earliest", consumer_timeout_ms=20000,
                             **settings)
    assert [r.value for r in consumer][:1] == [b"oauth"]
    consumer.close()
