"""Listeners and security settings, as `kshim serve` gives them (docs/security.md).

A listener has a name and a security protocol: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL
(SASL over TLS). listener.security.protocol.map gives each name its protocol; Kafka's default
map names each protocol's listener for it (PLAINTEXT:PLAINTEXT,SSL:SSL,...), and a map given
replaces it, so `INTERNAL://127.0.0.1:9094` needs `INTERNAL:SASL_SSL` in it. `--listeners` takes
Kafka's form, `PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093`; with none given the broker
has the one PLAINTEXT listener on --host/--port. Names are case-insensitive (kept upper-case, as
Kafka normalises them).

Per-listener settings (Kafka's `listener.name.<name>.<setting>`, kshim.security.properties) live
in `listener_settings`; the broker-wide Kafka ssl.* settings in `ssl`. What one listener uses is
the listener's value, else the broker-wide one (`setting`), but for ssl.client.auth, which
applies broker-wide to SSL listeners only (KIP-684): a SASL_SSL listener asks for client
certificates only with its own listener.name.<name>.ssl.client.auth.

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

DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}  # Kafka's default listener.security.protocol.map

_LISTENER = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_-]*)://(?P<host>\[[^\]]+\]|[^:/]*):(?P<port>\d+)$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


class SecurityConfigError(ValueError):
    """An unusable listener or security setting: `kshim serve` exits with this message."""


@dataclass(frozen=True)
class Listener:
    name: str  # upper-case, as Kafka normalises listener names
    host: str
    port: int  # 0: a free port, known once bound
    protocol: str = ""  # its security protocol; "": the name is one (Kafka's default map)

    def __post_init__(self) -> None:
        if not self.protocol:
            object.__setattr__(self, "protocol", self.name)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def prefix(self) -> str:
        """Kafka's prefix of this listener's own settings: listener.name.<name lower-case>."""
        return f"listener.name.{self.name.lower()}."

    def url(self, host: str | None = None, port: int | None = None) -> str:
        return f"{self.name}://{host or self.host}:{self.port if port is None else port}"


def parse_protocol_map(text: str, source: str = "listener.security.protocol.map") -> dict[str, str]:
    """Kafka's `NAME:PROTOCOL,...`; names upper-case."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = (x.strip() for x in item.partition(":"))
        if not sep or not _NAME.match(name):
            raise SecurityConfigError(f"{source}: {item!r} is not NAME:PROTOCOL")
        if protocol.upper() not in PROTOCOLS:
            raise SecurityConfigError(f"{source}: {item!r}: the protocol must be one of {', '.join(PROTOCOLS)}")
        if name.upper() in out:
            raise SecurityConfigError(f"{source}: listener {name.upper()} is given twice")
        out[name.upper()] = protocol.upper()
    if not out:
        raise SecurityConfigError(f"{source} names no listener")
    return out


def parse_listeners(text: str, protocol_map: dict[str, str] | None = None) -> list[Listener]:
    """Kafka's `listeners` form, each name at most once, its protocol from the map (Kafka's
    default map when none is given)."""
    protocols = DEFAULT_PROTOCOL_MAP if protocol_map is None else protocol_map
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        m = _LISTENER.match(item)
        if m is None:
            raise SecurityConfigError(f"listener {item!r} is not NAME://HOST:PORT")
        name, host, port = m["name"].upper(), m["host"].strip("[]"), int(m["port"])
        if name not in protocols:
            raise SecurityConfigError(f"No security protocol defined for listener {name}: give it one in "
                                      f"listener.security.protocol.map (--listener-security-protocol-map), "
                                      f"e.g. {name}:SASL_SSL")
        if port > 65535:
            raise SecurityConfigError(f"listener {item!r}: port {port} is past 65535")
        if any(existing.name == name for existing in out):
            raise SecurityConfigError(f"listener {name} is given twice")
        out.append(Listener(name, host or "127.0.0.1", port, protocols[name]))
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


# Kafka's TLS material and protocol settings, broker-wide (`ssl`) or per listener (listener.name.<l>.)
KEYSTORE = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
            "ssl.keystore.certificate.chain", "ssl.keystore.key")
TRUSTSTORE = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
              "ssl.truststore.certificates")
TLS_PROTOCOL = ("ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites")
TLS_SETTINGS = KEYSTORE + TRUSTSTORE + TLS_PROTOCOL
STORE_TYPES = ("PEM", "PKCS12")
JKS_REFUSED = ("JKS keystores cannot be read by kshim: convert it to PKCS12 with keytool "
               "(keytool -importkeystore -srckeystore FILE.jks -destkeystore FILE.p12 -deststoretype PKCS12) "
               "and set {name}=PKCS12, or give PEM with {name}=PEM")
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")


@dataclass(frozen=True)
class Store:
    """A keystore (the certificate chain and key a TLS listener presents) or a truststore (the CAs
    client certificates must chain to), resolved for one listener. kind: "dev" (the --tls-dev
    files), "files" (PEM files: --tls-cert/--tls-key/--tls-ca or a PEM ssl.*.location),
    "pem" (inline PEM text) or "pkcs12" (a PKCS12 file)."""
    kind: str
    location: Path | None = None
    key_location: Path | None = None  # "files" keystore: the key, when not in `location`
    pem: str | None = field(default=None, repr=False)  # "pem": certificates (and key) as text
    key_pem: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)  # PKCS12 store password, or a PEM key's
    source: str = field(default="", compare=False)  # the settings it came from, for messages


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
    tls_client_auth: str = "none"  # ssl.client.auth: SSL listeners only (KIP-684)
    failed_auth_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    max_reauth_ms: int = 0  # connections.max.reauth.ms: 0 = sessions do not expire
    oauth_allowed_skew_s: int = 0  # unsecured OAUTHBEARER: clock skew allowed on exp/iat
    # a cluster: the listener replication and transaction markers use, and its SASL identity
    inter_broker_listener: str | None = None  # default: the first listener
    inter_broker_user: str | None = None
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    protocol_map: dict[str, str] | None = None  # listener.security.protocol.map; None: Kafka's default
    ssl: dict[str, str] = field(default_factory=dict, repr=False)  # broker-wide TLS_SETTINGS by Kafka name
    # listener name (upper-case) -> {setting without the listener.name.<l>. prefix: value}
    listener_settings: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    # advertised.listeners: the host Metadata names on each listener (listener name -> host;
    # absent: the host it listens on); the ports are always the ones listened on
    advertised_hosts: dict[str, str] = field(default_factory=dict)

    def inter_broker(self) -> Listener | None:
        if not self.listeners:
            return None
        name = (self.inter_broker_listener or self.listeners[0].name).upper()
        return next(listener for listener in self.listeners if listener.name == name)

    # ------------------------------------------------------------ what one listener uses
    def own(self, listener: Listener, setting: str) -> str | None:
        """The listener's own value of a setting (listener.name.<l>.<setting>), if given."""
        return self.listener_settings.get(listener.name, {}).get(setting)

    def mechanisms(self, listener: Listener) -> tuple[str, ...]:
        """The SASL mechanisms the listener offers: its own sasl.enabled.mechanisms, else the broker's."""
        own = self.own(listener, "sasl.enabled.mechanisms")
        if own is None:
            return self.sasl_mechanisms
        return tuple(m.strip() for m in own.split(",") if m.strip())

    def client_auth(self, listener: Listener) -> str:
        """ssl.client.auth on this listener (KIP-684): its own value; else the broker-wide one on an
        SSL listener, and none on SASL_SSL (the broker-wide value does not reach SASL_SSL)."""
        if not listener.tls:
            return "none"
        own = self.own(listener, "ssl.client.auth")
        if own is not None:
            return own.strip().lower()
        return self.tls_client_auth if listener.protocol == "SSL" else "none"

    def tls_setting(self, listener: Listener, name: str) -> str | None:
        """A TLS_SETTINGS value for the listener: its own, else the broker-wide one (Kafka's
        per-name override of listener-prefixed configs)."""
        own = self.own(listener, name)
        return own if own is not None else self.ssl.get(name)

    def keystore(self, listener: Listener) -> Store | None:
        """What the listener presents; None if nothing is given (check() refuses that)."""
        get = lambda name: self.tls_setting(listener, name)  # noqa: E731
        if get("ssl.keystore.location") is not None or get("ssl.keystore.certificate.chain") is not None \
                or get("ssl.keystore.key") is not None:
            return _store("ssl.keystore", self, listener)
        if self.tls_dev:
            return Store("dev", source="--tls-dev")
        if self.tls_cert_file and self.tls_key_file:
            return Store("files", self.tls_cert_file, self.tls_key_file, source="--tls-cert/--tls-key")
        return None

    def truststore(self, listener: Listener) -> Store | None:
        """The CAs client certificates on this listener must chain to; None if none is given."""
        get = lambda name: self.tls_setting(listener, name)  # noqa: E731
        if get("ssl.truststore.location") is not None or get("ssl.truststore.certificates") is not None:
            return _store("ssl.truststore", self, listener)
        if self.tls_ca_file is not None:
            return Store("files", self.tls_ca_file, source="--tls-ca")
        if self.tls_dev:
            return Store("dev", source="--tls-dev")
        return None

    def tls_versions(self, listener: Listener) -> tuple[str, ...]:
        """ssl.enabled.protocols for the listener (Kafka's default TLSv1.2,TLSv1.3)."""
        given = self.tls_setting(listener, "ssl.enabled.protocols")
        if given is None:
            return TLS_VERSIONS
        return tuple(v.strip() for v in given.split(",") if v.strip())

    def client_properties(self, data_dir: Path) -> dict[str, str]:
        """The inter-broker identity as Kafka client properties (`kshim ctl groups/txns` and the
        console connect with them, as brokers connect to each other): the inter-broker listener's
        security protocol, its SASL user and password, the CA that signs the brokers' certificates
        and, when brokers demand client certificates, this broker's own. {} for PLAINTEXT. TLS
        material that is no PEM file (PKCS12, inline PEM) is left out: ctl then needs --bootstrap
        and --command-config."""
        listener = self.inter_broker()
        if listener is None or listener.protocol == "PLAINTEXT":
            return {}
        props = {"security.protocol": listener.protocol}
        if listener.tls:
            dev = data_dir / "tls"  # kshim.security.tls.DEV_DIR (not imported: it loads cryptography)
            trust = self.truststore(listener)
            if trust is not None and trust.kind == "dev":
                props["ssl.ca.location"] = str((dev / "ca.pem").resolve())
            elif trust is not None and trust.kind == "files" and trust.location is not None:
                props["ssl.ca.location"] = str(Path(trust.location).resolve())
            own = self.keystore(listener)
            if self.client_auth(listener) != "none" and own is not None:
                if own.kind == "dev":
                    props["ssl.certificate.location"] = str((dev / "broker.pem").resolve())
                    props["ssl.key.location"] = str((dev / "broker-key.pem").resolve())
                elif own.kind == "files" and own.location is not None:
                    props["ssl.certificate.location"] = str(Path(own.location).resolve())
                    props["ssl.key.location"] = str(Path(own.key_location or own.location).resolve())
                    if own.password is not None:
                        props["ssl.key.password"] = own.password
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
        self._check_listeners()
        for listener in self.listeners:
            for mech in self.mechanisms(listener) if listener.sasl else ():
                if mech not in MECHANISMS:
                    raise SecurityConfigError(f"SASL mechanism {mech} is not one of {', '.join(MECHANISMS)}")
        for mech in self.sasl_mechanisms:
            if mech not in MECHANISMS:
                raise SecurityConfigError(f"SASL mechanism {mech} is not one of {', '.join(MECHANISMS)}")
        if self.tls_client_auth not in CLIENT_AUTH:
            raise SecurityConfigError(f"--tls-client-auth (ssl.client.auth) must be one of {', '.join(CLIENT_AUTH)}")
        tls_given = self.tls_dev or self.tls_cert_file or self.tls_key_file or self.tls_ca_file \
            or self.tls_client_auth != "none" or self.ssl
        if tls_given and not self.needs_tls:
            raise SecurityConfigError("TLS options need an SSL or SASL_SSL listener in --listeners")
        if self.tls_client_auth != "none" and not any(x.protocol == "SSL" for x in self.listeners):
            raise SecurityConfigError(
                "--tls-client-auth (ssl.client.auth) applies to SSL listeners only, and there is none; for a "
                "SASL_SSL listener give listener.name.<listener>.ssl.client.auth (KIP-684)")
        if self.tls_dev and (self.tls_cert_file or self.tls_key_file):
            raise SecurityConfigError("--tls-dev generates the certificate: give it or --tls-cert/--tls-key")
        wide_keystore = sorted(k for k in KEYSTORE if k in self.ssl)
        if wide_keystore and (self.tls_dev or self.tls_cert_file or self.tls_key_file):
            raise SecurityConfigError(f"{', '.join(wide_keystore)} and --tls-cert/--tls-key/--tls-dev both give the "
                                      "broker's certificate: give one of them")
        wide_truststore = sorted(k for k in TRUSTSTORE if k in self.ssl)
        if wide_truststore and self.tls_ca_file:
            raise SecurityConfigError(f"{', '.join(wide_truststore)} and --tls-ca both give the CA of client "
                                      "certificates: give one of them")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SecurityConfigError("--tls-cert and --tls-key go together")
        for listener in self.listeners:
            if listener.tls:
                self._check_tls_listener(listener)
        if self.inter_broker_listener is not None and \
                all(listener.name != self.inter_broker_listener.upper() for listener in self.listeners):
            raise SecurityConfigError(f"--inter-broker-listener {self.inter_broker_listener} is not in --listeners")
        inter = self.inter_broker()
        if inter is not None and inter.sasl and self.inter_broker_user is not None:
            if self.inter_broker_user not in self.users:
                raise SecurityConfigError(f"--inter-broker-user {self.inter_broker_user} is not a SASL user")
            if self.inter_broker_mechanism not in self.mechanisms(inter) or self.inter_broker_mechanism == "OAUTHBEARER":
                raise SecurityConfigError("--inter-broker-sasl-mechanism must be an enabled PLAIN or SCRAM mechanism "
                                          f"of the inter-broker listener {inter.name}")
        if self.users and not self.needs_sasl:
            raise SecurityConfigError("SASL users need a SASL_PLAINTEXT or SASL_SSL listener in --listeners")

    def _check_listeners(self) -> None:
        protocols = DEFAULT_PROTOCOL_MAP if self.protocol_map is None else self.protocol_map
        if not self.listeners and protocols.get("PLAINTEXT") != "PLAINTEXT":
            raise SecurityConfigError("No security protocol defined for listener PLAINTEXT (the one on --host/--port): "
                                      "give --listeners, or PLAINTEXT:PLAINTEXT in listener.security.protocol.map")
        for listener in self.listeners:
            if protocols.get(listener.name) != listener.protocol:
                raise SecurityConfigError(f"No security protocol defined for listener {listener.name}"
                                          if listener.name not in protocols else
                                          f"listener {listener.name} is {listener.protocol}, but "
                                          f"listener.security.protocol.map makes it {protocols[listener.name]}")
        names = {listener.name for listener in self.listeners}
        for name, settings in self.listener_settings.items():
            if name not in names:
                first = next(iter(settings))
                raise SecurityConfigError(f"listener.name.{name.lower()}.{first}: there is no listener {name} "
                                          f"(listeners: {', '.join(sorted(names)) or 'PLAINTEXT on --host/--port'})")
            listener = next(x for x in self.listeners if x.name == name)
            needs = {"sasl.enabled.mechanisms": listener.sasl}
            for setting in settings:
                usable = needs.get(setting, listener.tls)
                if not usable:
                    raise SecurityConfigError(f"{listener.prefix}{setting}: listener {name} is {listener.protocol}, "
                                              "which does not use it")
            auth = settings.get("ssl.client.auth")
            if auth is not None and auth.strip().lower() not in CLIENT_AUTH:
                raise SecurityConfigError(f"{listener.prefix}ssl.client.auth={auth}: must be one of "
                                          f"{', '.join(CLIENT_AUTH)}")
            if settings.get("sasl.enabled.mechanisms") is not None and not self.mechanisms(listener):
                raise SecurityConfigError(f"{listener.prefix}sasl.enabled.mechanisms names no mechanism")

    def _check_tls_listener(self, listener: Listener) -> None:
        where = f"listener {listener.name}"
        for names, store in ((KEYSTORE, self.keystore(listener)), (TRUSTSTORE, self.truststore(listener))):
            if store is not None and store.source not in ("--tls-cert/--tls-key", "--tls-ca", "--tls-dev"):
                continue  # a store given by Kafka's names: its settings apply
            orphans = [listener.prefix + n for n in names if self.own(listener, n) is not None]
            if orphans:  # a password or type with no store of the listener's own to go with: it would be ignored
                raise SecurityConfigError(f"{', '.join(orphans)}: {where} has no {names[1]} (or inline PEM) for "
                                          "it to apply to")
        if self.keystore(listener) is None:
            raise SecurityConfigError(f"{where} ({listener.protocol}) needs a certificate: --tls-cert and --tls-key, "
                                      "--tls-dev, or ssl.keystore.location (or ssl.keystore.certificate.chain and "
                                      "ssl.keystore.key), broker-wide or as "
                                      f"{listener.prefix}ssl.keystore.*")
        if self.client_auth(listener) != "none" and self.truststore(listener) is None:
            raise SecurityConfigError(f"{where}: ssl.client.auth={self.client_auth(listener)} needs the CA of client "
                                      "certificates: --tls-ca, or ssl.truststore.location (or "
                                      "ssl.truststore.certificates)")
        versions = self.tls_versions(listener)
        if not versions:
            raise SecurityConfigError(f"{where}: ssl.enabled.protocols names no protocol")
        for version in versions:
            if version not in TLS_VERSIONS:
                raise SecurityConfigError(f"{where}: ssl.enabled.protocols names {version}: kshim serves "
                                          f"{' and '.join(TLS_VERSIONS)} only")
        protocol = self.tls_setting(listener, "ssl.protocol")
        if protocol is not None and protocol.strip() not in ("TLS", *TLS_VERSIONS):
            raise SecurityConfigError(f"{where}: ssl.protocol={protocol}: kshim takes TLS, TLSv1.2 or TLSv1.3")


def _store(kind: str, config: SecurityConfig, listener: Listener) -> Store:
    """A keystore or truststore from Kafka's settings (kind: "ssl.keystore" or "ssl.truststore");
    messages name each setting as it was given (listener-prefixed or broker-wide)."""
    def get(name: str) -> str | None:
        return config.tls_setting(listener, name)

    def named(*names: str) -> str:
        return " and ".join(listener.prefix + n if config.own(listener, n) is not None else n for n in names)

    keystore = kind == "ssl.keystore"
    type_name = f"{kind}.type"
    store_type = (get(type_name) or "JKS").strip().upper()  # Kafka's default type is JKS
    location = get(f"{kind}.location")
    inline_names = ("ssl.keystore.certificate.chain", "ssl.keystore.key") if keystore else ("ssl.truststore.certificates",)
    inline = [get(n) for n in inline_names]
    password = get(f"{kind}.password")
    key_password = get("ssl.key.password") if keystore else None
    if store_type == "JKS":
        shown = f"{named(type_name)}=JKS" if get(type_name) is not None else \
            f"{named(type_name)} (Kafka's default JKS, with {named(kind + '.location')})"
        raise SecurityConfigError(f"{shown}: " + JKS_REFUSED.format(name=named(type_name)))
    if store_type not in STORE_TYPES:
        raise SecurityConfigError(f"{named(type_name)}={store_type}: kshim reads {' and '.join(STORE_TYPES)}")
    if location is not None and any(x is not None for x in inline):
        given = [n for n, x in zip(inline_names, inline) if x is not None]
        raise SecurityConfigError(f"{named(kind + '.location')} and {named(*given)}: give one of them")
    if location is None:
        if store_type != "PEM":
            raise SecurityConfigError(f"{named(type_name)} must be PEM with {named(inline_names[0])}")
        if password is not None:
            raise SecurityConfigError(f"{named(kind + '.password')}: inline PEM has no store password")
        if keystore and (inline[0] is None or inline[1] is None):
            raise SecurityConfigError(f"{named(*inline_names)} go together")
        return Store("pem", pem=inline[0], key_pem=inline[1] if keystore else None, password=key_password,
                     source=named(*inline_names))
    path = Path(location.strip())
    if not path.is_file():
        raise SecurityConfigError(f"{named(kind + '.location')}={location}: no such file")
    if store_type == "PEM":
        if password is not None:
            raise SecurityConfigError(f"{named(kind + '.password')}: a PEM store has no store password"
                                      + (" (an encrypted key's is ssl.key.password)" if keystore else ""))
        return Store("files", path, password=key_password, source=named(kind + ".location"))
    if keystore and key_password is not None and key_password != password:
        raise SecurityConfigError(f"{named('ssl.key.password')}: kshim reads PKCS12 keystores whose key has the "
                                  "store's password (ssl.keystore.password)")
    return Store("pkcs12", path, password=password, source=named(kind + ".location"))
