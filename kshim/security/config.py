"""Listeners and security settings, as `kshim serve` gives them (docs/security.md).

A listener is named for its security protocol, as Kafka's default listener.security.protocol.map
names them: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT and SASL_SSL (SASL over TLS). `--listeners`
takes Kafka's form, `PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093`; with none given the
broker has the one PLAINTEXT listener on --host/--port, as before.

Users come from a file or options as name and password; passwords stay in this object (never in
logs, DescribeConfigs or reprs): SCRAM credentials are derived from them at start.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
CLIENT_AUTH = ("none", "requested", "required")  # Kafka's ssl.client.auth
ANONYMOUS = "User:ANONYMOUS"

_LISTENER = re.compile(r"^(?P<name>[A-Z_]+)://(?P<host>\[[^\]]+\]|[^:/]*):(?P<port>\d+)$")


class SecurityConfigError(ValueError):
    """An unusable listener or security setting: `kshim serve` exits with this message."""


@dataclass(frozen=True)
class Listener:
    name: str  # also its security protocol
    host: str
    port: int  # 0: a free port, known once bound

    @property
    def tls(self) -> bool:
        return self.name in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.name.startswith("SASL_")

    def url(self, host: str | None = None, port: int | None = None) -> str:
        return f"{self.name}://{host or self.host}:{self.port if port is None else port}"


def parse_listeners(text: str) -> list[Listener]:
    """Kafka's `listeners` form; each protocol at most once (names are the protocols)."""
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        m = _LISTENER.match(item)
        if m is None:
            raise SecurityConfigError(f"listener {item!r} is not NAME://HOST:PORT")
        name, host, port = m["name"], m["host"].strip("[]"), int(m["port"])
        if name not in PROTOCOLS:
            raise SecurityConfigError(f"listener {item!r}: the name must be one of {', '.join(PROTOCOLS)}")
        if port > 65535:
            raise SecurityConfigError(f"listener {item!r}: port {port} is past 65535")
        if any(existing.name == name for existing in out):
            raise SecurityConfigError(f"listener {name} is given twice")
        out.append(Listener(name, host or "127.0.0.1", port))
    if not out:
        raise SecurityConfigError("--listeners names no listener")
    return out


def parse_users(lines: list[str], source: str) -> dict[str, str]:
    """`name:password` per line (blank lines and # comments skipped)."""
    users: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, password = line.partition(":")
        if not sep or not name or not password:
            # never echo the line: it may hold a password
            raise SecurityConfigError(f"{source} line {n}: expected name:password")
        users[name] = password
    return users


@dataclass
class SecurityConfig:
    listeners: list[Listener] = field(default_factory=list)  # empty: PLAINTEXT on the broker's host:port
    sasl_mechanisms: tuple[str, ...] = MECHANISMS  # sasl.enabled.mechanisms
    users: dict[str, str] = field(default_factory=dict, repr=False)  # name -> password
    scram_iterations: int = 4096
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None  # client certificates are checked against it (mTLS)
    tls_dev: bool = False  # a CA and broker certificate generated into DATA/tls on first start
    tls_client_auth: str = "none"
    failed_auth_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    max_reauth_ms: int = 0  # connections.max.reauth.ms: 0 = sessions do not expire
    oauth_allowed_skew_s: int = 0  # unsecured OAUTHBEARER: clock skew allowed on exp/iat
    # a cluster: the listener replication and transaction markers use, and its SASL identity
    inter_broker_listener: str | None = None  # default: the first listener
    inter_broker_user: str | None = None
    inter_broker_mechanism: str = "SCRAM-SHA-512"

    def inter_broker(self) -> Listener | None:
        if not self.listeners:
            return None
        name = self.inter_broker_listener or self.listeners[0].name
        return next(listener for listener in self.listeners if listener.name == name)

    def client_properties(self, data_dir: Path) -> dict[str, str]:
        """The inter-broker identity as Kafka client properties (`kshim ctl groups/txns` and the
        console connect with them, as brokers connect to each other): the inter-broker listener's
        security protocol, its SASL user and password, the CA that signs the brokers' certificates
        and, when brokers demand client certificates, this broker's own. {} for PLAINTEXT."""
        listener = self.inter_broker()
        if listener is None or listener.name == "PLAINTEXT":
            return {}
        props = {"security.protocol": listener.name}
        if listener.tls:
            dev = data_dir / "tls"  # kshim.security.tls.DEV_DIR (not imported: it loads cryptography)
            ca = dev / "ca.pem" if self.tls_dev else self.tls_ca_file
            if ca is not None:
                props["ssl.ca.location"] = str(Path(ca).resolve())
            if self.tls_client_auth != "none":
                cert = dev / "broker.pem" if self.tls_dev else self.tls_cert_file
                key = dev / "broker-key.pem" if self.tls_dev else self.tls_key_file
                if cert is not None and key is not None:
                    props["ssl.certificate.location"] = str(Path(cert).resolve())
                    props["ssl.key.location"] = str(Path(key).resolve())
        if listener.sasl and self.inter_broker_user is not None:  # checked: one of the users
            props.update({"sasl.mechanism": self.inter_broker_mechanism, "sasl.username": self.inter_broker_user,
                          "sasl.password": self.users.get(self.inter_broker_user, "")})
        return props

    @property
    def needs_tls(self) -> bool:
        return any(listener.tls for listener in self.listeners)

    @property
    def needs_sasl(self) -> bool:
        return any(listener.sasl for listener in self.listeners)

    def check(self) -> None:
        """Refuse settings that would be ignored or cannot work, before anything starts."""
        for mech in self.sasl_mechanisms:
            if mech not in MECHANISMS:
                raise SecurityConfigError(f"SASL mechanism {mech} is not one of {', '.join(MECHANISMS)}")
        if self.tls_client_auth not in CLIENT_AUTH:
            raise SecurityConfigError(f"--tls-client-auth must be one of {', '.join(CLIENT_AUTH)}")
        tls_given = self.tls_dev or self.tls_cert_file or self.tls_key_file or self.tls_ca_file \
            or self.tls_client_auth != "none"
        if tls_given and not self.needs_tls:
            raise SecurityConfigError("TLS options need an SSL or SASL_SSL listener in --listeners")
        if self.needs_tls:
            if self.tls_dev and (self.tls_cert_file or self.tls_key_file):
                raise SecurityConfigError("--tls-dev generates the certificate: give it or --tls-cert/--tls-key")
            if not self.tls_dev and not (self.tls_cert_file and self.tls_key_file):
                raise SecurityConfigError("an SSL or SASL_SSL listener needs --tls-cert and --tls-key, or --tls-dev")
            if self.tls_client_auth != "none" and not (self.tls_ca_file or self.tls_dev):
                raise SecurityConfigError("--tls-client-auth needs --tls-ca (the CA of client certificates)")
        if self.inter_broker_listener is not None and \
                all(listener.name != self.inter_broker_listener for listener in self.listeners):
            raise SecurityConfigError(f"--inter-broker-listener {self.inter_broker_listener} is not in --listeners")
        inter = self.inter_broker()
        if inter is not None and inter.sasl and self.inter_broker_user is not None:
            if self.inter_broker_user not in self.users:
                raise SecurityConfigError(f"--inter-broker-user {self.inter_broker_user} is not a SASL user")
            if self.inter_broker_mechanism not in self.sasl_mechanisms or self.inter_broker_mechanism == "OAUTHBEARER":
                raise SecurityConfigError("--inter-broker-sasl-mechanism must be an enabled PLAIN or SCRAM mechanism")
        if self.users and not self.needs_sasl:
            raise SecurityConfigError("SASL users need a SASL_PLAINTEXT or SASL_SSL listener in --listeners")
