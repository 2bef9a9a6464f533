"""Command-line options shared by `kshim serve`, `kshim broker` and `kshim controller`: the
connection budgets (the cluster's supervisor hands them on to its broker processes) and the
argument types."""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import TypedDict, cast

from kshim.configs.broker import BrokerConfig
from kshim.configs.groups import GroupSettings
from kshim.configs.kafka43 import KAFKA_BROKER_CONFIGS
from kshim.errors import BrokerError
from kshim.security import properties
from kshim.security.acls import AuthorizerConfig, InvalidAcl, parse_super_users
from kshim.security.config import (
    CLIENT_AUTH, MECHANISMS, SecurityConfig, SecurityConfigError, parse_listeners, parse_users)

# (option, BrokerConfig field, help); defaults come from BrokerConfig
OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("--queued-max-request-bytes", "queued_max_request_bytes",
     "bytes of large requests received or being handled across all connections before reading pauses "
     "(Kafka's queued.max.request.bytes); at least --max-request-bytes"),
    ("--max-connections", "max_connections", "connections open at once; more are closed on accept"),
    ("--max-connections-per-ip", "max_connections_per_ip", "connections open at once from one address"),
    ("--connections-max-idle-ms", "connections_max_idle_ms", "close a connection quiet for this long"),
    ("--request-stall-timeout-ms", "request_stall_timeout_ms",
     "close a connection that stops sending halfway through a request for this long"),
    ("--log-cleaner-io-max-bytes-per-second", "log_cleaner_io_max_bytes_per_second",
     "bytes per second the log cleaner reads and writes, all compacted partitions together "
     "(Kafka's log.cleaner.io.max.bytes.per.second)"),
    ("--log-cleaner-dedupe-buffer-size", "log_cleaner_dedupe_buffer_size",
     "memory for the cleaner's key -> offset map (Kafka's log.cleaner.dedupe.buffer.size); a larger "
     "dirty section is cleaned over several rounds"),
    ("--log-cleaner-backoff-ms", "log_cleaner_backoff_ms",
     "pause between the cleaner's looks at the compacted partitions (Kafka's log.cleaner.backoff.ms)"),
    ("--max-incremental-fetch-session-cache-slots", "max_incremental_fetch_session_cache_slots",
     "incremental fetch sessions (KIP-227) kept at once, evicted by Kafka's rules when full; 0 disables "
     "them (Kafka's max.incremental.fetch.session.cache.slots)"),
    ("--group-initial-rebalance-delay-ms", "group_initial_rebalance_delay_ms",
     "how long a classic consumer group's first rebalance waits for more members to join, extended while "
     "they keep arriving (Kafka's group.initial.rebalance.delay.ms); 0 forms the group at once"),
    ("--request-log-entries", "request_log_entries",
     "requests the broker keeps in its request log, the oldest dropped first (`kshim ctl requests`); 0 turns it off"),
    ("--quota-window-num", "quota_window_num",
     "samples over which client quota rates are measured (Kafka's quota.window.num)"),
    ("--quota-window-size-seconds", "quota_window_size_seconds",
     "length of one client quota sample (Kafka's quota.window.size.seconds)"),
)
# kshim serve's options that need --brokers (a cluster)
CLUSTER_ONLY = ("replication_factor", "broker_session_timeout_ms", "replica_lag_time_max_ms")
# the others must be at least 1
_MINIMUM = {"max_incremental_fetch_session_cache_slots": 0, "group_initial_rebalance_delay_ms": 0,
            "request_log_entries": 0}
_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig)}


class ConnectionSettings(TypedDict):
    queued_max_request_bytes: int
    max_connections: int
    max_connections_per_ip: int
    connections_max_idle_ms: int
    request_stall_timeout_ms: int
    log_cleaner_io_max_bytes_per_second: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_backoff_ms: int
    max_incremental_fetch_session_cache_slots: int
    group_initial_rebalance_delay_ms: int
    request_log_entries: int
    quota_window_num: int
    quota_window_size_seconds: int
    group_settings: GroupSettings


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection budgets (docs/robustness.md), cleaner, fetch-session, group, "
                                      "request-log and quota settings")
    for option, name, text in OPTIONS:
        group.add_argument(option, dest=name, type=non_negative if _MINIMUM.get(name) == 0 else positive,
                           default=_DEFAULTS[name],
                           help=f"{text} (default {_DEFAULTS[name]})")
    group.add_argument("--group-setting", dest="group_setting", action="append", default=[], metavar="NAME=VALUE",
                       help="a group coordinator setting by its Kafka broker config name, repeatable: "
                            "group.share.session.timeout.ms, group.share.min.record.lock.duration.ms, "
                            "group.share.max.size, group.consumer.heartbeat.interval.ms, ... (docs/configs.md, "
                            "Group configs); each default must lie within its min and max")


def connection_settings(args: argparse.Namespace) -> ConnectionSettings:
    """The budgets given on the command line, as BrokerConfig keyword arguments."""
    settings = cast(ConnectionSettings, {name: getattr(args, name) for _, name, _ in OPTIONS})
    given = {}
    for item in getattr(args, "group_setting", None) or []:
        name, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"kshim: --group-setting wants NAME=VALUE, got {item!r}")
        given[name.strip()] = value.strip()
    try:
        settings["group_settings"] = GroupSettings.from_broker_configs(given)
    except BrokerError as e:
        raise SystemExit(f"kshim: --group-setting: {e.message}") from None
    if settings["queued_max_request_bytes"] < args.max_request_bytes:
        raise SystemExit(f"kshim: --queued-max-request-bytes {settings['queued_max_request_bytes']} is less than "
                         f"--max-request-bytes {args.max_request_bytes}: a largest request could never be read")
    return settings


def connection_argv(settings: ConnectionSettings | None) -> list[str]:
    """The same budgets as options for a broker process (none: the broker's defaults)."""
    given: dict = dict(settings or {})
    argv = [arg for option, name, _ in OPTIONS if name in given for arg in (option, str(given[name]))]
    group_settings = given.get("group_settings")
    if group_settings is not None:
        defaults = GroupSettings().broker_configs()
        for name, value in group_settings.broker_configs().items():
            if value != defaults[name]:
                argv += ["--group-setting", f"{name}={value}"]
    return argv


def add_authorizer_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("authorization (docs/security.md)")
    group.add_argument("--authorizer", action="store_true",
                       help="enforce ACLs on every request (Kafka's StandardAuthorizer as authorizer.class.name); "
                            "without it every request is allowed and the ACL APIs answer SECURITY_DISABLED")
    group.add_argument("--super-users", default=None, metavar="PRINCIPALS",
                       help="principals allowed everything, separated by semicolons: 'User:admin;User:ops' "
                            "(Kafka's super.users; needs --authorizer)")
    group.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                       help="a resource no ACL applies to is open to everyone (Kafka's "
                            "allow.everyone.if.no.acl.found; needs --authorizer)")


def authorizer_config(args: argparse.Namespace) -> AuthorizerConfig:
    """The authorizer the command line asks for; SystemExit for options given without --authorizer
    (they would otherwise be ignored) or a super user that is no principal."""
    if not args.authorizer and (args.super_users is not None or args.allow_everyone_if_no_acl_found):
        raise SystemExit("kshim: --super-users and --allow-everyone-if-no-acl-found need --authorizer")
    try:
        users = parse_super_users(args.super_users or "")
    except InvalidAcl as e:
        raise SystemExit(f"kshim: --super-users: {e}") from None
    return AuthorizerConfig(args.authorizer, users, args.allow_everyone_if_no_acl_found)


def authorizer_argv(config: AuthorizerConfig) -> list[str]:
    """The same authorizer as options for a broker process."""
    if not config.enabled:
        return []
    argv = ["--authorizer"]
    if config.super_users:
        argv += ["--super-users", ";".join(sorted(config.super_users))]
    if config.allow_everyone_if_no_acl_found:
        argv.append("--allow-everyone-if-no-acl-found")
    return argv
def add_security_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("listeners, TLS and SASL (docs/security.md)")
    group.add_argument("--listeners", default=None,
                       help="NAME://HOST:PORT,... with NAME one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, or a "
                            "name --listener-security-protocol-map gives a protocol (port 0: a free one); replaces "
                            "--host/--port; the first is the bootstrap the ready line names (default: PLAINTEXT on "
                            "--host/--port)")
    group.add_argument("--listener-security-protocol-map", default=None, metavar="NAME:PROTOCOL,...",
                       help="each listener name's security protocol, e.g. INTERNAL:SASL_SSL,EXTERNAL:SSL (Kafka's "
                            "listener.security.protocol.map; given, it replaces the default "
                            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL)")
    group.add_argument("--sasl-mechanisms", default=",".join(MECHANISMS),
                       help=f"SASL mechanisms enabled on SASL listeners (default {','.join(MECHANISMS)})")
    group.add_argument("--sasl-users", type=Path, default=None, metavar="FILE",
                       help="SASL users, one NAME:PASSWORD per line, for PLAIN and SCRAM")
    group.add_argument("--sasl-user", action="append", default=[], metavar="NAME:PASSWORD",
                       help="a SASL user (repeatable); visible to other local users in the process list: "
                            "prefer --sasl-users")
    group.add_argument("--tls-cert", type=Path, default=None, help="the broker's certificate chain (PEM)")
    group.add_argument("--tls-key", type=Path, default=None, help="the broker's private key (PEM, unencrypted)")
    group.add_argument("--tls-ca", type=Path, default=None, help="CA certificates that client certificates must chain to")
    group.add_argument("--tls-dev", action="store_true",
                       help="generate a CA and a certificate for 127.0.0.1/localhost into DATA_DIR/tls on first "
                            "start (development only); the CA file for clients is printed at start")
    group.add_argument("--tls-client-auth", choices=CLIENT_AUTH, default="none",
                       help="client certificates (mTLS) on SSL listeners: none, requested or required (Kafka's "
                            "ssl.client.auth; a SASL_SSL listener asks for them only with its own "
                            "listener.name.<listener>.ssl.client.auth, KIP-684); the principal is User:<subject DN>")
    group.add_argument("--connection-failed-authentication-delay-ms", type=int, default=100,
                       help="a failed authentication is answered, and its connection closed, after this delay "
                            "(Kafka's connection.failed.authentication.delay.ms, default 100)")
    group.add_argument("--inter-broker-listener", default=None, metavar="NAME",
                       help="the listener replication and transaction markers use (default the first), and "
                            "`kshim ctl groups/txns --data-dir`; on a SASL one, they authenticate as "
                            "--inter-broker-user")
    group.add_argument("--inter-broker-user", default=None, metavar="NAME",
                       help="the SASL user brokers (and `kshim ctl groups/txns`) authenticate as to each other "
                            "(one of the SASL users)")
    group.add_argument("--inter-broker-sasl-mechanism", default="SCRAM-SHA-512",
                       choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                       help="the mechanism brokers use with each other (Kafka's sasl.mechanism.inter.broker.protocol)")
    group.add_argument("--connections-max-reauth-ms", type=int, default=0,
                       help="SASL sessions last this long; clients re-authenticate before the end (KIP-368); "
                            "0: no end (default)")


def security_config(args: argparse.Namespace) -> SecurityConfig:
    """The security options, with Kafka's listener and TLS configs by name over them
    (args.security_properties, from --config-file/--override: kshim.security.properties), as a
    checked SecurityConfig whose TLS material loads; SecurityConfigError if unusable."""
    props = dict(getattr(args, "security_properties", None) or {})
    protocol_map = properties.protocol_map(getattr(args, "listener_security_protocol_map", None), props)
    users: dict[str, str] = {}
    if args.sasl_users is not None:
        try:
            lines = args.sasl_users.read_text().splitlines()
        except OSError as e:
            raise SecurityConfigError(f"cannot read --sasl-users: {e}") from None
        users.update(parse_users(lines, str(args.sasl_users)))
    users.update(parse_users(args.sasl_user, "--sasl-user"))
    if args.connection_failed_authentication_delay_ms < 0 or args.connections_max_reauth_ms < 0:
        raise SecurityConfigError("authentication delays and session lifetimes cannot be negative")
    config = SecurityConfig(
        listeners=parse_listeners(args.listeners, protocol_map) if args.listeners else [], protocol_map=protocol_map,
        sasl_mechanisms=tuple(m.strip() for m in args.sasl_mechanisms.split(",") if m.strip()),
        users=users, tls_cert_file=args.tls_cert, tls_key_file=args.tls_key, tls_ca_file=args.tls_ca,
        tls_dev=args.tls_dev, tls_client_auth=args.tls_client_auth,
        failed_auth_delay_ms=args.connection_failed_authentication_delay_ms,
        max_reauth_ms=args.connections_max_reauth_ms, inter_broker_listener=args.inter_broker_listener,
        inter_broker_user=args.inter_broker_user, inter_broker_mechanism=args.inter_broker_sasl_mechanism,
        advertised_hosts=dict(getattr(args, "advertised_hosts", None) or {}))
    properties.apply(config, {name: value for name, value in props.items() if name != properties.PROTOCOL_MAP})
    config.check()
    if config.needs_tls:  # a keystore that does not load, a wrong password: refused before anything starts
        from kshim.security.tls import listener_contexts  # start-up: cryptography loads only for TLS listeners
        listener_contexts(config, None)
    return config


# A cluster's brokers get the supervisor's secrets (passwords, inline keys, --sasl-user) in this
# environment variable, never on their command lines: those are world-readable in /proc and the
# supervisor logs them; a process's environment is its owner's only
SECRETS_ENV = "KSHIM_BROKER_SECRETS"


def secret(name: str) -> bool:
    """A Kafka PASSWORD config (ssl.keystore.password, ssl.keystore.key, sasl.jaas.config...) by
    its name, bare or prefixed (listener.name.<listener>.[<mechanism>.])."""
    parts = name.split(".")
    return any(getattr(KAFKA_BROKER_CONFIGS.get(".".join(parts[i:])), "type", None) == "PASSWORD"
               for i in range(len(parts)))


def broker_secrets(args: argparse.Namespace, overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """`overrides` (NAME=VALUE, as --override) split for a cluster's brokers: those that go on
    their command lines, and what they get through SECRETS_ENV: the secret Kafka configs among
    the security settings and `overrides`, and the --sasl-user entries."""
    props = dict(getattr(args, "security_properties", None) or {})
    secrets = [f"{name}={value}" for name, value in props.items() if secret(name)]
    plain: list[str] = []
    for item in overrides:
        (secrets if secret(item.partition("=")[0]) else plain).append(item)
    return plain, {"override": secrets, "sasl_user": list(args.sasl_user)}


def secrets_environment(secrets: dict[str, list[str]]) -> dict[str, str]:
    """The environment of a broker process: this one's, with SECRETS_ENV set to `secrets`."""
    return {**os.environ, SECRETS_ENV: json.dumps(secrets)}


def take_secrets(args: argparse.Namespace) -> None:
    """In a broker process: the secrets its supervisor put in SECRETS_ENV, added to its --override
    and --sasl-user options and removed from its environment (nothing it starts inherits them)."""
    given = os.environ.pop(SECRETS_ENV, None)
    if not given:
        return
    secrets = json.loads(given)
    args.override = [*(getattr(args, "override", None) or []), *secrets.get("override", [])]
    args.sasl_user = [*(getattr(args, "sasl_user", None) or []), *secrets.get("sasl_user", [])]


def security_argv(args: argparse.Namespace, offset: int, tls_files: tuple[Path, Path, Path] | None) -> list[str]:
    """The security options again, for broker process `offset` of a cluster: every listener's port
    moved by the offset, and the cluster's TLS files in place of --tls-dev (one CA for the cluster).
    Secrets stay out (`broker_secrets`)."""
    out: list[str] = []
    props = dict(getattr(args, "security_properties", None) or {})
    protocol_map = properties.protocol_map(getattr(args, "listener_security_protocol_map", None), props)
    if protocol_map is not None:
        out += ["--listener-security-protocol-map", ",".join(f"{name}:{p}" for name, p in protocol_map.items())]
    if args.listeners:
        out += ["--listeners", ",".join(x.url(port=x.port + offset)
                                        for x in parse_listeners(args.listeners, protocol_map))]
    out += ["--sasl-mechanisms", args.sasl_mechanisms]
    if args.sasl_users is not None:
        out += ["--sasl-users", str(args.sasl_users.resolve())]
    cert, key, ca = tls_files or (args.tls_cert, args.tls_key, args.tls_ca)
    if tls_files is not None and args.tls_ca is None and any(n.startswith("ssl.truststore.") for n in props):
        ca = None  # the broker-wide truststore given by name is the CA of client certificates, not the dev CA
    for option, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca)):
        if path is not None:
            out += [option, str(Path(path).resolve())]
    out += ["--tls-client-auth", args.tls_client_auth,
            "--connection-failed-authentication-delay-ms", str(args.connection_failed_authentication_delay_ms),
            "--connections-max-reauth-ms", str(args.connections_max_reauth_ms),
            "--inter-broker-sasl-mechanism", args.inter_broker_sasl_mechanism]
    if args.inter_broker_listener:
        out += ["--inter-broker-listener", args.inter_broker_listener]
    if args.inter_broker_user:
        out += ["--inter-broker-user", args.inter_broker_user]
    advertised = getattr(args, "advertised_hosts", None) or {}
    if advertised and args.listeners:  # each broker advertises its own (offset) ports
        out += ["--override", "advertised.listeners=" + ",".join(
            f"{x.name}://{advertised[x.name]}:{x.port + offset}"
            for x in parse_listeners(args.listeners, protocol_map) if x.name in advertised)]
    # Kafka's listener and TLS configs by name, as the broker's --override (file paths made absolute:
    # the broker runs in its own directory); the protocol map went as its option above
    for name, value in props.items():
        if name == properties.PROTOCOL_MAP or secret(name):
            continue
        if name.endswith(".location") and value.strip():
            value = str(Path(value.strip()).resolve())
        out += ["--override", f"{name}={value}"]
    return out
