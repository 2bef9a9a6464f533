"""The credentials of `kshim ctl groups/txns` (kshim/ctl/security.py): Kafka client properties from
a --command-config file, and the inter-broker identity a broker hands out
(SecurityConfig.client_properties), turned into the client's TLS and SASL settings."""
from __future__ import annotations

import ssl

import pytest

from kshim.ctl.common import CtlError
from kshim.ctl.security import client_security, from_command_config, parse_properties
from kshim.security.config import SecurityConfig, parse_listeners
from kshim.security.tls import dev_files

pytestmark = pytest.mark.unit

USERS = {"broker": "broker-secret", "alice": "alice-secret"}


def test_properties_parse_as_java_writes_them():
    text = ("# a comment\n! another\n\nsecurity.protocol = SASL_SSL\nsasl.mechanism: PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            "    username=\"alice\" \\\n    password=\"a=b:c\";\n")
    props = parse_properties(text, "f")
    assert props == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                     "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                         'username="alice" password="a=b:c";'}
    with pytest.raises(CtlError):
        parse_properties("no separator here\n", "f")


def test_sasl_settings_from_username_or_jaas_config():
    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "scram-sha-256",
                           "sasl.username": "alice", "sasl.password": "alice-secret"}, "f")
    assert sec is not None and sec.tls is None
    assert (sec.mechanism, sec.username, sec.password) == ("SCRAM-SHA-256", "alice", "alice-secret")
    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                           "sasl.jaas.config": 'x required username="bob" password="q\\"uote";'}, "f")
    assert sec is not None and (sec.username, sec.password) == ("bob", 'q"uote')
    assert client_security({}, "f") is None and client_security({"security.protocol": "plaintext"}, "f") is None
    assert "alice-secret" not in repr(client_security({"security.protocol": "SASL_PLAINTEXT",
                                                       "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                                       "sasl.password": "alice-secret"}, "f"))


@pytest.mark.parametrize("props, words", [
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a",
      "sasl.password": "p-secret", "client.id": "x"}, "client.id not used"),
    ({"security.protocol": "PLAINTEXT", "ssl.ca.location": "/ca.pem"}, "need security.protocol SSL"),
    ({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}, "need security.protocol SASL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "p-secret"}, "GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a"}, "sasl.password"),
    ({"security.protocol": "KERBEROS"}, "not one of"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "cannot load"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "ssl.truststore.type=PEM"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "https or none"),
])
def test_properties_that_cannot_be_used_are_refused(props, words):
    with pytest.raises(CtlError) as e:
        client_security(props, "f")
    assert words in str(e.value) and "p-secret" not in str(e.value)


def test_command_config_gives_the_bootstrap_unless_one_is_given(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=127.0.0.1:9093\nsecurity.protocol=PLAINTEXT\n")
    assert from_command_config(path, None) == ("127.0.0.1:9093", None)
    assert from_command_config(path, "127.0.0.1:1") == ("127.0.0.1:1", None)
    with pytest.raises(CtlError):
        from_command_config(tmp_path / "missing.properties", None)


def test_inter_broker_identity_as_client_properties(tmp_path):
    assert SecurityConfig().client_properties(tmp_path) == {}
    assert SecurityConfig(listeners=parse_listeners("PLAINTEXT://h:1,SASL_SSL://h:2")).client_properties(tmp_path) == {}
    ca, cert, key = dev_files(tmp_path)
    config = SecurityConfig(listeners=parse_listeners("PLAINTEXT://h:1,SASL_SSL://h:2"), users=USERS, tls_dev=True,
                            inter_broker_listener="SASL_SSL", inter_broker_user="broker",
                            inter_broker_mechanism="SCRAM-SHA-256")
    props = config.client_properties(tmp_path)
    assert props == {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.resolve()),
                     "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "broker", "sasl.password": "broker-secret"}
    sec = client_security(props, "the inter-broker identity")
    assert sec is not None and isinstance(sec.tls, ssl.SSLContext) and sec.username == "broker"
    # brokers that demand client certificates are shown the broker's own
    mtls = SecurityConfig(listeners=parse_listeners("SSL://h:1"), tls_cert_file=cert, tls_key_file=key,
                          tls_ca_file=ca, tls_client_auth="required")
    props = mtls.client_properties(tmp_path)
    assert props["ssl.certificate.location"] == str(cert.resolve()) and props["ssl.key.location"] == str(key.resolve())
    assert client_security(props, "f") is not None
    # a single serve without --inter-broker-user: no SASL identity to hand out
    assert "sasl.username" not in SecurityConfig(listeners=parse_listeners("SASL_PLAINTEXT://h:1"),
                                                 users=USERS).client_properties(tmp_path)
