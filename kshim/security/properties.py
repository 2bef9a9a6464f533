"""Kafka's listener and TLS configs by name (server.properties, --override), onto a SecurityConfig.

Served broker-wide (SERVED): listener.security.protocol.map (listeners named freely, each given its
security protocol), ssl.client.auth (SSL listeners only, KIP-684), sasl.enabled.mechanisms, and the
TLS material and protocol settings: ssl.keystore.type (PEM or PKCS12), ssl.keystore.location,
ssl.keystore.password, ssl.key.password, ssl.keystore.certificate.chain and ssl.keystore.key
(inline PEM), ssl.truststore.type, ssl.truststore.location, ssl.truststore.password,
ssl.truststore.certificates (inline PEM), ssl.enabled.protocols, ssl.protocol, ssl.cipher.suites.

Per listener (LISTENER_SERVED), as `listener.name.<listener lower-case>.<setting>`: ssl.client.auth,
sasl.enabled.mechanisms and every TLS setting above. A listener's own value wins over the
broker-wide one, name by name, as in Kafka; ssl.client.auth reaches a SASL_SSL listener only by its
own prefixed name.

REFUSED: security configs kshim cannot honour, with why (the config table accepts them at Kafka's
default value, which is what kshim does, and refuses any other).
"""
from __future__ import annotations

from typing import Mapping

from kshim.security.config import (
    CLIENT_AUTH, JKS_REFUSED, MECHANISMS, STORE_TYPES, TLS_SETTINGS, Listener, SecurityConfig, SecurityConfigError, parse_protocol_map)

PROTOCOL_MAP = "listener.security.protocol.map"
PREFIX = "listener.name."

_DESCRIBE = {
    PROTOCOL_MAP: "The security protocol of each listener name, NAME:PROTOCOL,... (a given map replaces Kafka's "
                  "default PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL).",
    "ssl.client.auth": "Client certificates on SSL listeners: none, requested or required (SASL_SSL listeners only "
                       "with listener.name.<listener>.ssl.client.auth, KIP-684).",
    "sasl.enabled.mechanisms": "SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
                               "OAUTHBEARER).",
    "ssl.keystore.type": "PEM or PKCS12 (JKS is refused: convert it to PKCS12 with keytool).",
    "ssl.keystore.location": "The broker's certificate chain and key: a PEM file (key and certificates) or a PKCS12 "
                             "file.",
    "ssl.keystore.password": "The PKCS12 keystore's password.",
    "ssl.key.password": "The password of an encrypted PEM key (for PKCS12: the store's password, if given).",
    "ssl.keystore.certificate.chain": "The broker's certificate chain as inline PEM (ssl.keystore.type=PEM).",
    "ssl.keystore.key": "The broker's private key as inline PEM (ssl.keystore.type=PEM).",
    "ssl.truststore.type": "PEM or PKCS12 (JKS is refused: convert it to PKCS12 with keytool).",
    "ssl.truststore.location": "The CA certificates client certificates must chain to: a PEM or PKCS12 file.",
    "ssl.truststore.password": "The PKCS12 truststore's password.",
    "ssl.truststore.certificates": "The CA certificates as inline PEM (ssl.truststore.type=PEM).",
    "ssl.enabled.protocols": "TLSv1.2, TLSv1.3 or both (the TLS versions offered).",
    "ssl.protocol": "TLS, TLSv1.2 or TLSv1.3; the versions offered are ssl.enabled.protocols', as on a Kafka "
                    "broker.",
    "ssl.cipher.suites": "TLS 1.2 suites by their IANA (Java) names; TLS 1.3 suites cannot be chosen (listed, they "
                         "must be all three of OpenSSL's).",
}

SERVED: frozenset[str] = frozenset(_DESCRIBE)
LISTENER_SERVED: frozenset[str] = frozenset(("ssl.client.auth", "sasl.enabled.mechanisms", *TLS_SETTINGS))

_JAVA_ONLY = "a Java class or provider; kshim's TLS is Python's ssl module over OpenSSL"
REFUSED: dict[str, str] = {
    "ssl.engine.factory.class": _JAVA_ONLY + ", which no SslEngineFactory can replace",
    "ssl.provider": _JAVA_ONLY,
    "security.providers": _JAVA_ONLY,
    "ssl.secure.random.implementation": "a Java SecureRandom; OpenSSL draws its own randomness",
    "ssl.keymanager.algorithm": "a Java KeyManagerFactory algorithm; OpenSSL has none to choose (the default, "
                                "SunX509, is what kshim does)",
    "ssl.trustmanager.algorithm": "a Java TrustManagerFactory algorithm; OpenSSL verifies chains as PKIX (the "
                                  "default) does",
    "ssl.principal.mapping.rules": "kshim maps a client certificate's subject by the DEFAULT rule only "
                                   "(User:<subject in RFC 2253 form>)",
    "principal.builder.class": "kshim builds principals as Kafka's DefaultKafkaPrincipalBuilder (the default) does; "
                               "no other class can be loaded",
    "ssl.endpoint.identification.algorithm": "brokers verify each other's host names (https, the default); "
                                             "turning it off is not served",
    "ssl.allow.dn.changes": "kshim does not reload keystores at runtime (false, the default, is what it does)",
    "ssl.allow.san.changes": "kshim does not reload keystores at runtime (false, the default, is what it does)",
    "sasl.jaas.config": "SASL users come from --sasl-users/--sasl-user and stored SCRAM credentials; no JAAS "
                        "login module is loaded",
    "sasl.server.callback.handler.class": "a Java class; PLAIN and SCRAM check kshim's users, OAUTHBEARER takes "
                                          "unsecured JWTs",
    "sasl.client.callback.handler.class": "a Java class; brokers authenticate to each other as --inter-broker-user",
    "sasl.login.class": "a Java login class; no JAAS login is done",
    "sasl.login.callback.handler.class": "a Java class; no JAAS login is done",
    "sasl.kerberos.service.name": "GSSAPI (Kerberos) is not served",
    "sasl.kerberos.principal.to.local.rules": "GSSAPI (Kerberos) is not served",
    "sasl.kerberos.kinit.cmd": "GSSAPI (Kerberos) is not served",
    "sasl.oauthbearer.jwks.endpoint.url": "OAUTHBEARER takes unsecured JWTs only (no JWKS validation)",
    "sasl.oauthbearer.expected.audience": "OAUTHBEARER takes unsecured JWTs only (no claims checked but sub, exp, "
                                          "iat)",
    "sasl.oauthbearer.expected.issuer": "OAUTHBEARER takes unsecured JWTs only (no claims checked but sub, exp, iat)",
    "sasl.server.max.receive.size": "kshim bounds a frame before authentication at Kafka's default, 524288 bytes",
    "sasl.mechanism.controller.protocol": "brokers reach kshim's controller over a local socket, not a Kafka "
                                          "listener",
    **{name: "GSSAPI (Kerberos) is not served" for name in (
        "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor")},
    **{name: "no JAAS login is done: brokers authenticate to each other as --inter-broker-user" for name in (
        "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
        "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms", "sasl.login.retry.backoff.ms")},
    **{name: "OAUTHBEARER takes unsecured JWTs only: no token endpoint, JWKS or assertion is used" for name in (
        "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.claim.aud",
        "sasl.oauthbearer.assertion.claim.exp.seconds", "sasl.oauthbearer.assertion.claim.iss",
        "sasl.oauthbearer.assertion.claim.jti.include", "sasl.oauthbearer.assertion.claim.nbf.seconds",
        "sasl.oauthbearer.assertion.claim.sub", "sasl.oauthbearer.assertion.file",
        "sasl.oauthbearer.assertion.private.key.file", "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.template.file", "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.clock.skew.seconds",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.jwt.retriever.class",
        "sasl.oauthbearer.jwt.validator.class", "sasl.oauthbearer.scope", "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.token.endpoint.url")},
}


def describe(name: str) -> str:
    """What a served name sets (for the config table and docs)."""
    return _DESCRIBE[name]


def protocol_map(option: str | None, props: Mapping[str, str]) -> dict[str, str] | None:
    """listener.security.protocol.map from the --listener-security-protocol-map option or by its
    Kafka name in props (both given must agree); None: Kafka's default."""
    named = props.get(PROTOCOL_MAP)
    given = parse_protocol_map(option, "--listener-security-protocol-map") if option else None
    by_name = parse_protocol_map(named) if named else None
    if given is not None and by_name is not None and given != by_name:
        raise SecurityConfigError(f"--listener-security-protocol-map {option} and {PROTOCOL_MAP}={named} disagree: "
                                  "give one of them")
    return given if given is not None else by_name


def split(name: str) -> tuple[str, str] | None:
    """(LISTENER, setting) of a `listener.name.<listener>.<setting>` name, else None."""
    if not name.startswith(PREFIX):
        return None
    listener, dot, setting = name[len(PREFIX):].partition(".")
    if not listener or not dot or not setting:
        return None
    return listener.upper(), setting


def apply(config: SecurityConfig, props: Mapping[str, str]) -> None:
    """props holds only names in SERVED or listener.name.<l>.<suffix in LISTENER_SERVED>; sets them on
    config (SecurityConfigError with a message naming the config on a bad value). The protocol map
    re-resolves the listeners already on config; config.check() does the checks that need
    everything (the listener a prefixed name names exists, stores load, ...)."""
    for name, raw in props.items():
        value = raw.strip()
        per_listener = split(name)
        if per_listener is not None:
            listener, setting = per_listener
            if setting not in LISTENER_SERVED:
                raise SecurityConfigError(f"{name}: kshim takes no per-listener {setting} (per listener: "
                                          f"{', '.join(sorted(LISTENER_SERVED))})")
            _check_value(name, setting, value)
            config.listener_settings.setdefault(listener, {})[setting] = value
        elif name == PROTOCOL_MAP:
            protocols = parse_protocol_map(value, name)
            config.protocol_map = protocols
            resolved = []
            for x in config.listeners:
                if x.name not in protocols:
                    raise SecurityConfigError(f"No security protocol defined for listener {x.name}: "
                                              f"{name}={value} does not name it")
                resolved.append(Listener(x.name, x.host, x.port, protocols[x.name]))
            config.listeners = resolved
        elif name == "ssl.client.auth":
            _check_value(name, name, value)
            config.tls_client_auth = value.lower()
        elif name == "sasl.enabled.mechanisms":
            _check_value(name, name, value)
            config.sasl_mechanisms = tuple(m.strip() for m in value.split(",") if m.strip())
        elif name in TLS_SETTINGS:
            _check_value(name, name, value)
            config.ssl[name] = value
        elif name in REFUSED:
            raise SecurityConfigError(f"{name}={value}: not supported: {REFUSED[name]}")
        else:
            raise SecurityConfigError(f"{name}: not a listener or TLS setting kshim serves")


def _check_value(name: str, setting: str, value: str) -> None:
    if setting == "ssl.client.auth" and value.lower() not in CLIENT_AUTH:
        raise SecurityConfigError(f"{name}={value}: must be one of {', '.join(CLIENT_AUTH)}")
    if setting == "sasl.enabled.mechanisms":
        mechanisms = [m.strip() for m in value.split(",") if m.strip()]
        if not mechanisms:
            raise SecurityConfigError(f"{name} names no mechanism")
        for mech in mechanisms:
            if mech not in MECHANISMS:
                raise SecurityConfigError(f"{name}={value}: {mech} is not one of {', '.join(MECHANISMS)}")
    if setting.endswith(".type") and value.upper() not in STORE_TYPES:
        if value.upper() == "JKS":
            raise SecurityConfigError(f"{name}=JKS: " + JKS_REFUSED.format(name=name))
        raise SecurityConfigError(f"{name}={value}: kshim reads {' and '.join(STORE_TYPES)}")
