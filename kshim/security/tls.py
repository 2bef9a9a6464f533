"""TLS for SSL and SASL_SSL listeners: the server context, the development CA, and the principal of
a client certificate.

- The certificate and key come from PEM files (--tls-cert, --tls-key; --tls-ca checks client
  certificates), or `--tls-dev` makes a CA and a broker certificate for 127.0.0.1 and localhost in
  DATA/tls on first start (kept, so clients keep trusting the same CA across restarts).
- TLS 1.2 or later, no renegotiation (a renegotiating read would need the socket writable, and the
  writer task owns that).
- The principal of a client certificate is "User:" + its subject as an RFC 2253 string
  ("User:CN=alice,O=kshim"), Kafka's default ssl.principal.mapping.rules.
"""
from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kshim.security.config import ANONYMOUS, SecurityConfig

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


def server_context(config: SecurityConfig, data_dir: Path) -> tuple[ssl.SSLContext, Path | None]:
    """The listeners' TLS context, and the dev CA file clients should trust (with --tls-dev)."""
    dev_ca: Path | None = None
    ca_file: Path | None
    if config.tls_dev:
        dev_ca, cert, key = dev_files(data_dir)
        ca_file = config.tls_ca_file or dev_ca
    else:
        assert config.tls_cert_file and config.tls_key_file
        cert, key, ca_file = config.tls_cert_file, config.tls_key_file, config.tls_ca_file
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    ctx.load_cert_chain(cert, key)
    if config.tls_client_auth != "none":
        assert ca_file is not None
        ctx.load_verify_locations(cafile=str(ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED if config.tls_client_auth == "required" else ssl.CERT_OPTIONAL
    return ctx, dev_ca


def certificate_principal(sock: ssl.SSLSocket) -> str:
    """Kafka's default mapping: "User:" + the subject in RFC 2253 form; ANONYMOUS without one."""
    der = sock.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
