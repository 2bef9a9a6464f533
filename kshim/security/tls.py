"""TLS for SSL and SASL_SSL listeners: one server context per TLS listener, the development CA, and
the principal of a client certificate.

- Each TLS listener's context is made of its own settings (kshim.security.config: its keystore,
  truststore, ssl.client.auth, ssl.enabled.protocols and ssl.cipher.suites); listeners whose
  settings are equal share one context.
- The certificate and key come from PEM files (--tls-cert, --tls-key; --tls-ca checks client
  certificates), Kafka's ssl.keystore.* / ssl.truststore.* (a PEM file, a PKCS12 file, or inline
  PEM), or `--tls-dev` makes a CA and a broker certificate for 127.0.0.1 and localhost in DATA/tls
  on first start (kept, so clients keep trusting the same CA across restarts). Python's ssl loads
  a key from a file only: a PKCS12 or inline key goes through a private temporary file (mode 0600)
  deleted once loaded.
- TLS 1.2 and 1.3 (ssl.enabled.protocols picks), no renegotiation (a renegotiating read would need
  the socket writable, and the writer task owns that). ssl.cipher.suites sets the TLS 1.2 suites
  (IANA names mapped to OpenSSL's); Python's ssl cannot choose TLS 1.3 suites, so a list naming
  any must name all three of OpenSSL's defaults.
- The principal of a client certificate is "User:" + its subject as an RFC 2253 string
  ("User:CN=alice,O=kshim"), Kafka's default ssl.principal.mapping.rules.
"""
from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kshim.security.config import ANONYMOUS, Listener, SecurityConfig, SecurityConfigError, Store

log = logging.getLogger("kshim.tls")

DEV_DIR = "tls"
DEV_VALID_DAYS = 825


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, common_name: str, *,
          server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate signed by the CA: for the broker (127.0.0.1, localhost) or a client (mTLS)."""
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kshim dev"),
                                        x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=DEV_VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               # a broker's certificate also authenticates it to the other brokers (mTLS between them)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                   else [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def dev_files(data_dir: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, broker.pem, broker-key.pem) under DATA/tls, made on first use."""
    d = data_dir / DEV_DIR
    ca_path, cert_path, key_path = d / "ca.pem", d / "broker.pem", d / "broker-key.pem"
    if ca_path.exists() and cert_path.exists() and key_path.exists():
        return ca_path, cert_path, key_path
    d.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kshim dev"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "kshim development CA")])
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=DEV_VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert, key = issue(ca, ca_key, "localhost", server=True)
    _write_key(d / "ca-key.pem", ca_key)
    _write_key(key_path, key)
    _write_cert(cert_path, cert)
    _write_cert(ca_path, ca)  # last: its presence says the set is complete
    log.info("generated a development CA and broker certificate in %s", d)
    return ca_path, cert_path, key_path


def issue_client_files(data_dir: Path, common_name: str, out_dir: Path) -> tuple[Path, Path]:
    """A client certificate and key signed by the development CA (for mTLS), as PEM files."""
    d = data_dir / DEV_DIR
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((d / "ca-key.pem").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    cert, key = issue(ca, ca_key, common_name, server=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out_dir / f"{common_name}.pem", out_dir / f"{common_name}-key.pem"
    _write_cert(cert_path, cert)
    _write_key(key_path, key)
    return cert_path, key_path


def server_context(config: SecurityConfig, data_dir: Path,
                   listener: Listener | None = None) -> tuple[ssl.SSLContext, Path | None]:
    """A TLS listener's context (default: the first TLS listener's), and the dev CA file clients
    should trust (with --tls-dev)."""
    contexts, dev_ca = listener_contexts(config, data_dir)
    if listener is None:
        listener = next(x for x in config.listeners if x.tls)
    return contexts[listener.name], dev_ca


def listener_contexts(config: SecurityConfig, data_dir: Path | None) -> tuple[dict[str, ssl.SSLContext], Path | None]:
    """{listener name: its server context} for every TLS listener, listeners with equal settings
    sharing one, and the dev CA file (with --tls-dev). data_dir None: a check before anything
    starts, whose contexts lack the --tls-dev files (made in the data dir)."""
    dev: tuple[Path, Path, Path] | None = None
    built: dict[tuple, ssl.SSLContext] = {}
    out: dict[str, ssl.SSLContext] = {}
    for listener in config.listeners:
        if not listener.tls:
            continue
        auth = config.client_auth(listener)
        keystore = config.keystore(listener)
        truststore = config.truststore(listener) if auth != "none" else None
        assert keystore is not None, "SecurityConfig.check() refuses a TLS listener without a certificate"
        if "dev" in (keystore.kind, truststore.kind if truststore else None) and data_dir is not None:
            dev = dev or dev_files(data_dir)
        versions = config.tls_versions(listener)
        ciphers = config.tls_setting(listener, "ssl.cipher.suites")
        key = (keystore, truststore, auth, versions, ciphers)  # the dev files are one for all
        if key not in built:
            built[key] = _context(listener, keystore, truststore, auth, versions, ciphers, dev)
        out[listener.name] = built[key]
    return out, dev[0] if dev is not None and config.tls_dev else None


def _context(listener: Listener, keystore: Store, truststore: Store | None, auth: str, versions: tuple[str, ...],
             ciphers: str | None, dev: tuple[Path, Path, Path] | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if "TLSv1.2" not in versions else ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3 if "TLSv1.3" in versions else ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _load_keystore(ctx, keystore, dev)
    if auth != "none":
        assert truststore is not None, "SecurityConfig.check() refuses client auth without a CA"
        _load_truststore(ctx, truststore, dev)
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    if ciphers is not None:
        _set_ciphers(ctx, listener, ciphers, versions)
    return ctx


def _load_keystore(ctx: ssl.SSLContext, store: Store, dev: tuple[Path, Path, Path] | None) -> None:
    try:
        if store.kind == "dev":
            if dev is not None:  # None: a check before the data dir is known
                ctx.load_cert_chain(dev[1], dev[2])
        elif store.kind == "files":
            assert store.location is not None
            ctx.load_cert_chain(store.location, store.key_location, store.password)
        elif store.kind == "pem":
            assert store.pem is not None and store.key_pem is not None
            _load_via_file(ctx, normalise_pem(store.key_pem) + normalise_pem(store.pem), store.password)
        else:
            assert store.location is not None
            key, cert, extra = pkcs12.load_key_and_certificates(store.location.read_bytes(), _password(store))
            if key is None or cert is None:
                raise ValueError("the PKCS12 file holds no private key with its certificate")
            pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
            pem += "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in [cert, *extra])
            _load_via_file(ctx, pem, None)
    except (OSError, ValueError, TypeError, ssl.SSLError) as e:
        raise SecurityConfigError(f"{store.source}: cannot load the broker's certificate and key: {_why(e)}") from None


def _load_truststore(ctx: ssl.SSLContext, store: Store, dev: tuple[Path, Path, Path] | None) -> None:
    try:
        if store.kind == "dev":
            if dev is not None:
                ctx.load_verify_locations(cafile=str(dev[0]))
        elif store.kind == "files":
            ctx.load_verify_locations(cafile=str(store.location))
        elif store.kind == "pem":
            assert store.pem is not None
            ctx.load_verify_locations(cadata=normalise_pem(store.pem))
        else:
            assert store.location is not None
            loaded = pkcs12.load_pkcs12(store.location.read_bytes(), _password(store))
            certs = ([loaded.cert] if loaded.cert is not None else []) + list(loaded.additional_certs)
            if not certs:
                raise ValueError("the PKCS12 file holds no certificate")
            ctx.load_verify_locations(cadata="".join(
                c.certificate.public_bytes(serialization.Encoding.PEM).decode() for c in certs))
    except (OSError, ValueError, TypeError, ssl.SSLError) as e:
        raise SecurityConfigError(f"{store.source}: cannot load the CA certificates: {_why(e)}") from None


def _password(store: Store) -> bytes | None:
    return store.password.encode() if store.password else None


def _why(e: Exception) -> str:
    text = str(getattr(e, "reason", None) or e)
    return "wrong password, or not a PKCS12 file" if "Could not deserialize" in text or "Invalid password" in text \
        else text


def _load_via_file(ctx: ssl.SSLContext, pem: str, password: str | None) -> None:
    """ssl loads certificate chains and keys from files only: a private one, gone once loaded."""
    fd, name = tempfile.mkstemp(prefix="kshim-tls-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        ctx.load_cert_chain(name, password=password)
    finally:
        os.unlink(name)


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalise_pem(text: str) -> str:
    """Inline PEM as Kafka reads it: a properties file's line continuations join the lines, so the
    base64 between the markers may come without its newlines (or with spaces); each block is
    written out again in PEM's own form."""
    blocks = _PEM_BLOCK.findall(text)
    if not blocks:
        raise ValueError("no PEM block (-----BEGIN ...-----) in the text")
    out = []
    for label, body in blocks:
        data = re.sub(r"\s+", "", body)
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        out.append(f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n")
    return "".join(out)


# TLS 1.2 suites by their IANA (Java) names, to OpenSSL's names; TLS 1.3's names are the same in both
TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
TLS13_SUITES = frozenset(("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"))


def _set_ciphers(ctx: ssl.SSLContext, listener: Listener, text: str, versions: tuple[str, ...]) -> None:
    name = "ssl.cipher.suites"
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        return  # Kafka's default: the TLS library's own suites
    tls13 = [n for n in names if n in TLS13_SUITES]
    unknown = [n for n in names if n not in TLS13_SUITES and n not in TLS12_SUITES]
    if unknown:
        raise SecurityConfigError(f"{name} (listener {listener.name}): {', '.join(unknown)}: not a TLS 1.2 or 1.3 suite "
                                  f"kshim knows (TLS 1.2: {', '.join(TLS12_SUITES)}; TLS 1.3: "
                                  f"{', '.join(sorted(TLS13_SUITES))})")
    tls12 = [TLS12_SUITES[n] for n in names if n in TLS12_SUITES]
    if tls13 and set(tls13) != TLS13_SUITES:
        raise SecurityConfigError(f"{name} (listener {listener.name}): Python's ssl cannot choose TLS 1.3 suites: "
                                  f"name all three ({', '.join(sorted(TLS13_SUITES))}) or none")
    if "TLSv1.3" in versions and not tls13:
        raise SecurityConfigError(f"{name} (listener {listener.name}) names no TLS 1.3 suite, but Python's ssl "
                                  "cannot turn them off: leave TLSv1.3 out of ssl.enabled.protocols, or name all "
                                  f"three ({', '.join(sorted(TLS13_SUITES))})")
    if "TLSv1.2" in versions:
        if not tls12:
            raise SecurityConfigError(f"{name} (listener {listener.name}) names no TLS 1.2 suite: leave TLSv1.2 out "
                                      "of ssl.enabled.protocols, or name some")
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise SecurityConfigError(f"{name} (listener {listener.name}): none of these TLS 1.2 suites is available "
                                      "in this OpenSSL") from None
        available = {c["name"] for c in ctx.get_ciphers()}
        missing = [n for n in names if n in TLS12_SUITES and TLS12_SUITES[n] not in available]
        if missing:
            raise SecurityConfigError(f"{name} (listener {listener.name}): {', '.join(missing)}: not available in "
                                      "this OpenSSL")


def client_context(config: SecurityConfig, listener: Listener, data_dir: Path | None) -> ssl.SSLContext:
    """How a broker reaches the others' `listener` (a TLS one): it trusts the listener's CAs and,
    when the listener asks for client certificates, presents its own keystore, as a Kafka broker
    uses its inter-broker listener's settings as a client."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the certificate and the host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    truststore = config.truststore(listener)
    dev = dev_files(data_dir) if data_dir is not None and config.tls_dev else None
    if truststore is not None and (truststore.kind != "dev" or dev is not None):
        _load_truststore(ctx, truststore, dev)
    else:
        ctx.load_default_certs()
    keystore = config.keystore(listener)
    if config.client_auth(listener) != "none" and keystore is not None and (keystore.kind != "dev" or dev is not None):
        _load_keystore(ctx, keystore, dev)
    return ctx


def certificate_principal(sock: ssl.SSLSocket) -> str:
    """Kafka's default mapping: "User:" + the subject in RFC 2253 form; ANONYMOUS without one."""
    der = sock.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
