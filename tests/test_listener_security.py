"""Kafka's per-listener security settings, in-process (kshim/security/config.py, properties.py,
tls.py; docs/security.md): listener.security.protocol.map and custom listener names,
ssl.client.auth on SSL listeners only (KIP-684), listener.name.<l>.* overrides, the TLS material
by Kafka's names (PEM files, inline PEM, PKCS12; JKS refused), one TLS context per listener."""
from __future__ import annotations

import argparse
import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12

from kshim.configs.options import (SECRETS_ENV, add_security_options, broker_secrets, security_argv, security_config,
                                   take_secrets)
from kshim.controller.process import ClusterSettings
from kshim.security import properties
from kshim.security.config import (
    Listener, SecurityConfig, SecurityConfigError, parse_listeners, parse_protocol_map)
from kshim.security.session import ConnectionSecurity, StaticCredentials
from kshim.security.tls import (
    certificate_principal, dev_files, issue_client_files, listener_contexts, normalise_pem, server_context)
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit

MAP = "INTERNAL:SASL_SSL,EXTERNAL:SSL"


def args(*argv: str, props: dict[str, str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_security_options(parser)
    parsed = parser.parse_args(list(argv))
    if props is not None:
        parsed.security_properties = props
    return parsed


def refused(*argv: str, props: dict[str, str] | None = None) -> str:
    with pytest.raises(SecurityConfigError) as e:
        security_config(args(*argv, props=props))
    return str(e.value)


# ---------------------------------------------------------------- names and protocols
def test_listener_names_get_their_protocol_from_the_map():
    assert parse_listeners("PLAINTEXT://h:1,SASL_SSL://h:2") == [
        Listener("PLAINTEXT", "h", 1, "PLAINTEXT"), Listener("SASL_SSL", "h", 2, "SASL_SSL")]  # Kafka's default map
    internal, external = parse_listeners("internal://127.0.0.1:9094,EXTERNAL://127.0.0.1:9093", parse_protocol_map(MAP))
    assert (internal.name, internal.protocol, internal.tls, internal.sasl) == ("INTERNAL", "SASL_SSL", True, True)
    assert (external.name, external.protocol, external.tls, external.sasl) == ("EXTERNAL", "SSL", True, False)
    assert internal.prefix == "listener.name.internal."
    # two listeners of one protocol, by name
    two = parse_listeners("A://h:1,B://h:2", parse_protocol_map("A:PLAINTEXT,B:PLAINTEXT"))
    assert [x.protocol for x in two] == ["PLAINTEXT", "PLAINTEXT"]


def test_a_name_without_a_protocol_is_refused_at_start():
    with pytest.raises(SecurityConfigError, match="No security protocol defined for listener INTERNAL"):
        parse_listeners("INTERNAL://127.0.0.1:9094")
    # a given map replaces Kafka's default: SSL is no longer known
    with pytest.raises(SecurityConfigError, match="No security protocol defined for listener SSL"):
        parse_listeners("SSL://h:1", parse_protocol_map(MAP))
    assert "No security protocol defined for listener INTERNAL" in refused("--listeners", "INTERNAL://127.0.0.1:0")
    for bad in ("INTERNAL", "INTERNAL:TLS", "A:SSL,A:SSL", ""):
        with pytest.raises(SecurityConfigError):
            parse_protocol_map(bad)


def test_the_map_comes_from_the_option_or_its_kafka_name_and_both_must_agree(tmp_path):
    listeners = "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0"
    by_option = security_config(args("--listeners", listeners, "--listener-security-protocol-map", MAP, "--tls-dev"))
    by_name = security_config(args("--listeners", listeners, "--tls-dev",
                                   props={"listener.security.protocol.map": MAP}))
    assert by_option.listeners == by_name.listeners
    assert [x.protocol for x in by_name.listeners] == ["SASL_SSL", "SSL"]
    assert "disagree" in refused("--listeners", listeners, "--tls-dev", "--listener-security-protocol-map",
                                 "INTERNAL:SSL,EXTERNAL:SSL", props={"listener.security.protocol.map": MAP})
    inter = security_config(args("--listeners", listeners, "--listener-security-protocol-map", MAP, "--tls-dev",
                                 "--inter-broker-listener", "external"))
    assert inter.inter_broker() == inter.listeners[1]  # picked by name
    assert inter.client_properties(tmp_path)["security.protocol"] == "SSL"  # ctl speaks its protocol


# ---------------------------------------------------------------- ssl.client.auth (KIP-684)
def test_broker_wide_client_auth_applies_to_ssl_listeners_only():
    config = security_config(args("--listeners", "SSL://h:0,SASL_SSL://h:0", "--tls-dev", "--tls-client-auth",
                                  "required"))
    ssl_listener, sasl_ssl = config.listeners
    assert config.client_auth(ssl_listener) == "required"
    assert config.client_auth(sasl_ssl) == "none"
    prefixed = security_config(args("--listeners", "SSL://h:0,SASL_SSL://h:0", "--tls-dev",
                                    props={"listener.name.sasl_ssl.ssl.client.auth": "required"}))
    assert [prefixed.client_auth(x) for x in prefixed.listeners] == ["none", "required"]
    # broker-wide client auth with no SSL listener would do nothing: refused, naming the prefixed form
    message = refused("--listeners", "SASL_SSL://h:0", "--tls-dev", "--tls-client-auth", "required")
    assert "listener.name.<listener>.ssl.client.auth" in message


def test_each_tls_listener_has_its_own_context(tmp_path):
    config = security_config(args("--listeners", "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,B://127.0.0.1:0",
                                  "--listener-security-protocol-map", "SSL:SSL,SASL_SSL:SASL_SSL,B:SASL_SSL",
                                  "--tls-dev", "--tls-client-auth", "required"))
    contexts, ca = listener_contexts(config, tmp_path)
    assert ca == dev_files(tmp_path)[0]
    assert contexts["SSL"].verify_mode == ssl.CERT_REQUIRED
    assert contexts["SASL_SSL"].verify_mode == ssl.CERT_NONE
    assert contexts["SASL_SSL"] is contexts["B"]  # equal settings, one context
    assert contexts["SSL"] is not contexts["SASL_SSL"]


# ---------------------------------------------------------------- per-listener SASL mechanisms
def test_sasl_mechanisms_per_listener():
    config = security_config(args(
        "--listeners", "INTERNAL://h:0,EXTERNAL://h:0", "--listener-security-protocol-map",
        "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SASL_PLAINTEXT", "--sasl-user", "alice:alice-secret",
        props={"listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-512"}))
    internal, external = config.listeners
    creds = StaticCredentials({"alice": "alice-secret"})
    outside = ConnectionSecurity(external, config, creds)
    assert outside.mechanisms == ("SCRAM-SHA-512",)
    assert outside.handshake("PLAIN", 1) == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    inside = ConnectionSecurity(internal, config, creds)
    assert inside.handshake("PLAIN", 1) == ErrorCode.NONE
    assert inside.authenticate(b"\0alice\0alice-secret").error == ErrorCode.NONE
    assert "sasl.enabled.mechanisms=GSSAPI: GSSAPI is not one of" in refused(
        "--listeners", "SASL_PLAINTEXT://h:0", props={"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "GSSAPI"})
    # the inter-broker mechanism must be one its listener offers
    message = refused("--listeners", "SASL_PLAINTEXT://h:0", "--sasl-user", "b:pw", "--inter-broker-user", "b",
                      props={"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN"})
    assert "--inter-broker-sasl-mechanism" in message


def test_settings_for_no_listener_or_one_that_cannot_use_them_are_refused():
    assert "there is no listener EXTERNAL" in refused(
        "--listeners", "SSL://h:0", "--tls-dev", props={"listener.name.external.ssl.client.auth": "required"})
    assert "does not use it" in refused(
        "--listeners", "PLAINTEXT://h:0", props={"listener.name.plaintext.ssl.client.auth": "required"})
    assert "does not use it" in refused(
        "--listeners", "SSL://h:0", "--tls-dev", props={"listener.name.ssl.sasl.enabled.mechanisms": "PLAIN"})
    assert "must be one of" in refused(
        "--listeners", "SSL://h:0", "--tls-dev", props={"listener.name.ssl.ssl.client.auth": "always"})
    # a password for a store the listener does not have would be ignored
    assert "has no ssl.keystore.location" in refused(
        "--listeners", "SSL://h:0", "--tls-dev", props={"listener.name.ssl.ssl.keystore.password": "pw"})
    with pytest.raises(SecurityConfigError, match="kshim takes no per-listener ssl.principal.mapping.rules"):
        properties.apply(SecurityConfig(), {"listener.name.ssl.ssl.principal.mapping.rules": "DEFAULT"})


def test_names_kshim_cannot_honour_are_refused_with_why():
    for name in ("ssl.engine.factory.class", "ssl.principal.mapping.rules", "ssl.keymanager.algorithm",
                 "ssl.trustmanager.algorithm", "sasl.jaas.config"):
        assert properties.REFUSED[name]
        assert name not in properties.SERVED
        with pytest.raises(SecurityConfigError, match=f"{name}=x: not supported"):
            properties.apply(SecurityConfig(), {name: "x"})
    assert "listener.security.protocol.map" in properties.SERVED and "ssl.keystore.location" in properties.SERVED
    assert {"ssl.client.auth", "sasl.enabled.mechanisms", "ssl.keystore.location"} <= properties.LISTENER_SERVED
    for name in properties.SERVED:
        assert properties.describe(name)


# ---------------------------------------------------------------- TLS material by Kafka's names
def handshake(server_ctx: ssl.SSLContext, ca: Path | str, client_cert: tuple[Path, Path] | None = None,
              maximum: ssl.TLSVersion | None = None) -> str:
    """A TLS handshake with the server context over a socket pair: the principal the server sees."""
    client_ctx = ssl.create_default_context(cafile=str(ca))
    if maximum is not None:
        client_ctx.maximum_version = maximum
    if client_cert is not None:
        client_ctx.load_cert_chain(*client_cert)
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    errors: list[BaseException] = []

    def client() -> None:
        try:
            with client_ctx.wrap_socket(b, server_hostname="localhost") as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as e:
            errors.append(e)

    with a, b:
        t = threading.Thread(target=client)
        t.start()
        try:
            with server_ctx.wrap_socket(a, server_side=True) as tls:
                principal = certificate_principal(tls)
                tls.send(b"x")
        except (ssl.SSLError, OSError) as e:
            errors.append(e)
        finally:
            a.close()  # the client's read ends, if the server gave up first
            t.join(10)
    if errors:
        raise HandshakeFailed(errors)
    return principal


class HandshakeFailed(Exception):
    pass


@pytest.fixture
def pki(tmp_path):
    """The dev CA with a broker certificate (as PEM, PKCS12, inline) and a client certificate."""
    ca, cert, key = dev_files(tmp_path / "ca")
    broker_key = serialization.load_pem_private_key(key.read_bytes(), None)
    assert isinstance(broker_key, ec.EllipticCurvePrivateKey)
    broker_cert = x509.load_pem_x509_certificate(cert.read_bytes())
    ca_cert = x509.load_pem_x509_certificate(ca.read_bytes())
    out = tmp_path / "stores"
    out.mkdir()
    # Kafka's PEM keystore: the (encrypted) key and the chain in one file
    pem_keystore = out / "broker-keystore.pem"
    pem_keystore.write_bytes(broker_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.BestAvailableEncryption(b"key-pw"))
                             + cert.read_bytes())
    p12 = out / "broker.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", broker_key, broker_cert, [ca_cert], serialization.BestAvailableEncryption(b"store-pw")))
    trust_p12 = out / "trust.p12"
    trust_p12.write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca_cert], serialization.BestAvailableEncryption(b"trust-pw")))
    client = issue_client_files(tmp_path / "ca", "alice", tmp_path / "client")
    return {"ca": ca, "cert": cert, "key": key, "pem_keystore": pem_keystore, "p12": p12, "trust_p12": trust_p12,
            "client": client, "data": tmp_path / "data"}


def test_pkcs12_keystore_and_truststore(pki):
    config = security_config(args("--listeners", "SSL://127.0.0.1:0", "--tls-client-auth", "required", props={
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki["p12"]), "ssl.keystore.password": "store-pw",
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki["trust_p12"]),
        "ssl.truststore.password": "trust-pw"}))
    ctx, _ = server_context(config, pki["data"])
    assert handshake(ctx, pki["ca"], pki["client"]) == "User:CN=alice,O=kshim dev"
    assert not pki["data"].exists()  # no dev files made: the stores are the listener's
    wrong = refused("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki["p12"]), "ssl.keystore.password": "nope"})
    assert "ssl.keystore.location: cannot load" in wrong and "nope" not in wrong


def test_pem_keystore_location_with_an_encrypted_key(pki):
    config = security_config(args("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem_keystore"]), "ssl.key.password": "key-pw"}))
    assert handshake(server_context(config, pki["data"])[0], pki["ca"]) == "User:ANONYMOUS"
    assert "a PEM store has no store password" in refused("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem_keystore"]),
        "ssl.keystore.password": "key-pw"})
    assert "cannot load" in refused("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem_keystore"]), "ssl.key.password": "bad"})


def test_inline_pem_as_a_properties_file_joins_its_lines(pki):
    def joined(path: Path) -> str:  # `key=-----BEGIN ...\` continuation lines: no newlines left
        return " ".join(line.strip() for line in path.read_text().splitlines())
    config = security_config(args("--listeners", "SASL_SSL://127.0.0.1:0", "--sasl-user", "a:b", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": joined(pki["cert"]),
        "ssl.keystore.key": joined(pki["key"]), "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": joined(pki["ca"]),
        "listener.name.sasl_ssl.ssl.client.auth": "required"}))
    assert handshake(server_context(config, pki["data"])[0], pki["ca"], pki["client"]) == "User:CN=alice,O=kshim dev"
    assert normalise_pem(joined(pki["ca"])) == pki["ca"].read_text()
    assert "go together" in refused("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": joined(pki["cert"])})
    assert "give one of them" in refused("--listeners", "SSL://127.0.0.1:0", props={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem_keystore"]),
        "ssl.keystore.key": joined(pki["key"]), "ssl.keystore.certificate.chain": joined(pki["cert"])})


def test_jks_is_refused_with_how_to_convert_it(pki):
    for props in ({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(pki["p12"])},
                  {"ssl.keystore.location": str(pki["p12"])}):  # Kafka's default type is JKS
        message = refused("--listeners", "SSL://127.0.0.1:0", props=props)
        assert "JKS" in message and "keytool" in message and "PKCS12" in message
    message = refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev",
                      props={"listener.name.ssl.ssl.truststore.type": "JKS"})
    assert message.startswith("listener.name.ssl.ssl.truststore.type=JKS") and "keytool" in message


def test_a_listener_material_overrides_the_broker_wide(pki):
    """The broker-wide --tls-dev certificate on one listener, a PKCS12 keystore on another."""
    config = security_config(args(
        "--listeners", "SSL://127.0.0.1:0,OTHER://127.0.0.1:0", "--listener-security-protocol-map",
        "SSL:SSL,OTHER:SSL", "--tls-dev", props={
            "listener.name.other.ssl.keystore.type": "PKCS12",
            "listener.name.other.ssl.keystore.location": str(pki["p12"]),
            "listener.name.other.ssl.keystore.password": "store-pw"}))
    contexts, dev_ca = listener_contexts(config, pki["data"])
    assert dev_ca is not None and dev_ca.read_bytes() != pki["ca"].read_bytes()
    handshake(contexts["SSL"], dev_ca)
    handshake(contexts["OTHER"], pki["ca"])
    with pytest.raises(HandshakeFailed):
        handshake(contexts["OTHER"], dev_ca)  # not the dev certificate: the client does not trust it


def test_the_same_material_twice_is_refused(pki):
    assert "give one of them" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-cert", str(pki["cert"]),
                                         "--tls-key", str(pki["key"]), props={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["pem_keystore"])})
    assert "give one of them" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev", "--tls-ca", str(pki["ca"]),
                                         props={"ssl.truststore.type": "PEM",
                                                "ssl.truststore.location": str(pki["ca"])})
    assert "TLS options need" in refused("--listeners", "PLAINTEXT://h:0", props={"ssl.enabled.protocols": "TLSv1.3"})


def test_enabled_protocols_and_cipher_suites(pki):
    only13 = security_config(args("--listeners", "SSL://127.0.0.1:0", "--tls-dev",
                                  props={"ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.3"}))
    ctx, ca = server_context(only13, pki["data"])
    assert ca is not None
    handshake(ctx, ca)
    with pytest.raises(HandshakeFailed):
        handshake(ctx, ca, maximum=ssl.TLSVersion.TLSv1_2)  # a TLS 1.2 client is refused
    assert "TLSv1.2 and TLSv1.3 only" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev",
                                                props={"ssl.enabled.protocols": "TLSv1.1"})
    suites = security_config(args("--listeners", "SSL://127.0.0.1:0", "--tls-dev", props={
        "ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}))
    ctx, ca = server_context(suites, pki["data"])
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"} == {"ECDHE-ECDSA-AES256-GCM-SHA384"}
    handshake(ctx, ca)
    assert "cannot choose TLS 1.3 suites" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev", props={
        "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    assert "names no TLS 1.3 suite" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev", props={
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    assert "TLS_FOO" in refused("--listeners", "SSL://127.0.0.1:0", "--tls-dev", props={
        "ssl.enabled.protocols": "TLSv1.2", "ssl.cipher.suites": "TLS_FOO"})


# ---------------------------------------------------------------- a cluster's broker processes
def test_a_cluster_broker_gets_the_settings_as_overrides(pki, tmp_path, monkeypatch):
    monkeypatch.chdir(pki["p12"].parent)
    given = args("--listeners", "INTERNAL://127.0.0.1:9094,EXTERNAL://127.0.0.1:9093", "--tls-dev", props={
        "listener.security.protocol.map": MAP, "listener.name.external.ssl.keystore.type": "PKCS12",
        "listener.name.external.ssl.keystore.location": "broker.p12",
        "listener.name.external.ssl.keystore.password": "store-pw",
        "listener.name.internal.ssl.client.auth": "required"})
    argv = security_argv(given, 2, (pki["cert"], pki["key"], pki["ca"]))
    assert argv[argv.index("--listener-security-protocol-map") + 1] == MAP
    assert argv[argv.index("--listeners") + 1] == "INTERNAL://127.0.0.1:9096,EXTERNAL://127.0.0.1:9095"
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    assert f"listener.name.external.ssl.keystore.location={pki['p12']}" in overrides  # absolute
    assert "listener.name.internal.ssl.client.auth=required" in overrides
    # secrets go through the broker's environment, never its command line (world-readable in /proc)
    given.sasl_user = ["alice:alice-pw"]
    plain, secrets = broker_secrets(given, ["log.retention.ms=1000", "delegation.token.secret.key=k"])
    assert secrets == {"override": ["listener.name.external.ssl.keystore.password=store-pw",
                                    "delegation.token.secret.key=k"], "sasl_user": ["alice:alice-pw"]}
    assert not any("store-pw" in a for a in argv)
    settings = ClusterSettings(brokers=2, port=9092, data_dir=tmp_path, secrets=secrets, overrides=plain)
    command = settings.broker_command(1)
    assert "log.retention.ms=1000" in command and not any("secret.key" in a for a in command)
    monkeypatch.setattr(os, "environ", settings.broker_environment())
    # what the broker process makes of them (its --override lands in security_properties)
    parser = argparse.ArgumentParser()
    add_security_options(parser)
    parser.add_argument("--override", action="append", default=[])
    known, rest = parser.parse_known_args(argv)
    take_secrets(known)
    assert SECRETS_ENV not in os.environ and known.sasl_user == ["alice:alice-pw"]
    known.security_properties = dict(item.split("=", 1) for item in overrides + known.override
                                     if not item.startswith("delegation."))
    broker = security_config(known)
    internal, external = broker.listeners
    assert (internal.port, internal.protocol, broker.client_auth(internal)) == (9096, "SASL_SSL", "required")
    assert broker.keystore(external) is not None and broker.keystore(external).kind == "pkcs12"
