"""The credentials `kshim ctl groups` and `txns` (and the console) connect to brokers with, as Kafka
client properties (docs/security.md):

- `--command-config FILE`: a Kafka client properties file, as Kafka's tools take
  (`security.protocol`, `sasl.mechanism`, `sasl.username`/`sasl.password` or `sasl.jaas.config`,
  `ssl.ca.location` or a PEM `ssl.truststore.location`, ...); a property ctl does not use is
  refused, not ignored;
- else, for a cluster (or single `kshim serve`) found through --data-dir: the inter-broker identity,
  which each broker hands out on its admin socket (ClientProperties; owner-only), so ctl connects
  over the inter-broker listener as the brokers connect to each other;
- else (--bootstrap alone): PLAINTEXT.

The client speaks TLS and SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
(kshim.replication.client). Passwords never appear in an error."""
from __future__ import annotations

import argparse
import json
import re
import ssl
from pathlib import Path
from typing import Iterable, Mapping

from kshim.controller import messages as m
from kshim.ctl import brokers_admin
from kshim.ctl.brokers import addresses_from_cluster, brokers_down, parse_addresses
from kshim.ctl.common import CtlError
from kshim.replication.client import ClientSecurity
from kshim.security.config import PROTOCOLS

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # what kshim.replication.client authenticates with
PROPERTIES = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
              "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.type", "ssl.truststore.location",
              "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
              "ssl.endpoint.identification.algorithm")
ADMIN_TIMEOUT_S = 5.0
_JAAS_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
MAX_LINES = 10_000


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Java's properties form, as far as client configs use it: `key=value` or `key: value`, `#`
    and `!` comments, a trailing backslash continues the line."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise CtlError(f"{source}: more than {MAX_LINES} lines")
    logical, pending = [], ""
    for raw in lines:
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for n, line in enumerate(logical, 1):
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise CtlError(f"{source}: entry {n} is not key=value")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def read_properties(path: Path) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CtlError(f"cannot read --command-config {path}: {e}") from None
    return parse_properties(text, f"--command-config {path}")


def client_security(props: Mapping[str, str], source: str) -> ClientSecurity | None:
    """The connection settings the properties describe; None for PLAINTEXT. CtlError for a property
    ctl does not use, a protocol or mechanism it cannot speak, or a certificate file it cannot load."""
    unknown = sorted(set(props) - set(PROPERTIES))
    if unknown:
        raise CtlError(f"{source}: {', '.join(unknown)} not used by kshim ctl (it uses {', '.join(PROPERTIES)})")
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise CtlError(f"{source}: security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}")
    tls, sasl = protocol in ("SSL", "SASL_SSL"), protocol.startswith("SASL_")
    given_ssl = sorted(k for k in props if k.startswith("ssl."))
    if given_ssl and not tls:
        raise CtlError(f"{source}: {', '.join(given_ssl)} need security.protocol SSL or SASL_SSL")
    given_sasl = sorted(k for k in props if k.startswith("sasl."))
    if given_sasl and not sasl:
        raise CtlError(f"{source}: {', '.join(given_sasl)} need security.protocol SASL_PLAINTEXT or SASL_SSL")
    context = _tls_context(props, source) if tls else None
    if not sasl:
        return ClientSecurity(context) if context is not None else None
    mechanism = props.get("sasl.mechanism", "GSSAPI").upper()  # Kafka's default, which ctl cannot speak
    if mechanism not in MECHANISMS:
        raise CtlError(f"{source}: sasl.mechanism {mechanism}: kshim ctl speaks {', '.join(MECHANISMS)}")
    username, password = props.get("sasl.username"), props.get("sasl.password")
    if "sasl.jaas.config" in props:
        options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(props["sasl.jaas.config"])}
        username, password = options.get("username", username), options.get("password", password)
    if not username or password is None:
        raise CtlError(f"{source}: SASL needs sasl.username and sasl.password (or sasl.jaas.config with "
                       "username=\"...\" password=\"...\")")
    return ClientSecurity(context, mechanism, username, password)


def _tls_context(props: Mapping[str, str], source: str) -> ssl.SSLContext:
    ca = props.get("ssl.ca.location")
    if "ssl.truststore.location" in props:
        if props.get("ssl.truststore.type", "JKS").upper() != "PEM":
            raise CtlError(f"{source}: ssl.truststore.location needs ssl.truststore.type=PEM (or use ssl.ca.location)")
        ca = ca or props["ssl.truststore.location"]
    elif "ssl.truststore.type" in props:
        raise CtlError(f"{source}: ssl.truststore.type without ssl.truststore.location")
    try:
        context = ssl.create_default_context(cafile=ca)  # None: the system's CAs
        cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
        if (cert is None) != (key is None):
            raise CtlError(f"{source}: a client certificate needs both ssl.certificate.location and ssl.key.location")
        if cert is not None:
            context.load_cert_chain(cert, key, props.get("ssl.key.password"))
        elif "ssl.key.password" in props:
            raise CtlError(f"{source}: ssl.key.password without a client certificate")
    except (OSError, ssl.SSLError) as e:
        raise CtlError(f"{source}: cannot load the TLS files: {e}") from None
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm in ("", "none"):
        context.check_hostname = False  # the certificate is still checked against the CA
    elif algorithm != "https":
        raise CtlError(f"{source}: ssl.endpoint.identification.algorithm is https or none, not {algorithm}")
    return context


def inter_broker_properties(data_dir: Path, skip: Iterable[int] = ()) -> dict[str, str]:
    """The inter-broker identity of the cluster (or single serve) in data_dir, from the first
    broker's admin socket that answers (brokers in `skip` are known not to: paused, killed).
    {} when data_dir holds no broker socket (nothing to ask: PLAINTEXT, as before)."""
    sockets = {n: p for n, p in brokers_admin.broker_sockets(Path(data_dir)).items() if n not in set(skip)}
    failures = []
    for node, path in sockets.items():
        try:
            answer = json.loads(brokers_admin.call(path, m.ClientProperties(), ADMIN_TIMEOUT_S, node))
        except CtlError as e:
            failures.append(str(e))
            continue
        if not isinstance(answer, dict):
            raise CtlError(f"broker {node} answered client properties that are not an object")
        return {str(k): str(v) for k, v in answer.items()}
    if failures:
        raise CtlError("no broker told the inter-broker identity to connect with (" + "; ".join(failures) +
                       "); give --bootstrap, with --command-config for a listener that needs credentials")
    return {}


def from_command_config(path: Path, bootstrap: str | None) -> tuple[str | None, ClientSecurity | None]:
    """(bootstrap, security) from --command-config: its bootstrap.servers serves when --bootstrap
    is not given."""
    props = read_properties(path)
    found = props.pop("bootstrap.servers", None)
    return bootstrap or found, client_security(props, f"--command-config {path}")


def from_data_dir(data_dir: Path, skip: Iterable[int] = ()) -> ClientSecurity | None:
    """The cluster's inter-broker identity, for brokers found through --data-dir."""
    props = inter_broker_properties(data_dir, skip)
    protocol = props.get("security.protocol", "")
    if protocol.startswith("SASL_") and "sasl.username" not in props:  # a single serve may have none
        raise CtlError(f"the brokers' inter-broker listener {protocol} has no user to authenticate as "
                       "(kshim serve --inter-broker-user NAME); or give --bootstrap with --command-config")
    return client_security(props, f"the inter-broker identity of {data_dir}")


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--command-config", type=Path, metavar="FILE",
                        help="Kafka client properties to connect with (security.protocol, sasl.mechanism, "
                             "sasl.username/sasl.password or sasl.jaas.config, ssl.ca.location, ...; "
                             "docs/security.md). Without it: over --data-dir, the cluster's inter-broker "
                             "listener and user; with --bootstrap, PLAINTEXT")


def targets(data_dir: Path | None, bootstrap: str | None,
            command_config: Path | None) -> tuple[list[tuple[str, int]], ClientSecurity | None]:
    """The addresses to bootstrap from and the credentials to connect with: --bootstrap (and a
    --command-config's credentials), else the `kshim serve` in --data-dir over its inter-broker
    listener as the inter-broker user."""
    security = None
    if command_config is not None:
        bootstrap, security = from_command_config(command_config, bootstrap)
    if bootstrap:
        return parse_addresses(bootstrap), security
    if data_dir is None:
        raise CtlError("give --bootstrap HOST:PORT, or the --data-dir of a running `kshim serve`")
    addresses = addresses_from_cluster(data_dir)
    if command_config is None:
        security = from_data_dir(data_dir, brokers_down(data_dir))  # the inter-broker listener's identity
    return addresses, security
