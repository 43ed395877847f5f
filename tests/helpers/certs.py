"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost,
client certificates on demand, and a second CA whose client nobody trusts.

EC P-256 keys (fast to make), PEM files, keys written 0600, everything valid from an
hour ago to a day from now. Certificates carry the extensions strict verifiers
(Python 3.13's default ``VERIFY_X509_STRICT``) insist on: a critical basicConstraints
on CAs, key identifiers, key usage and extended key usage.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "Floe Tests"


@dataclass(frozen=True)
class Pki:
    """The files of one test PKI (see :func:`make_pki`).

    ``server_key_encrypted`` is ``server_key`` encrypted with ``server_key_password``;
    ``other_client_cert`` (CN=alice,O=Floe Tests, like a real client) is signed by
    ``other_ca_cert``, which the server does not trust.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path
    server_key_password: str
    other_ca_cert: Path
    other_ca_key: Path
    other_client_cert: Path
    other_client_key: Path

    def client(self, cn: str, *, ou: str | None = None) -> tuple[Path, Path]:
        """A client certificate and key signed by the CA, subject
        ``CN=<cn>[,OU=<ou>],O=Floe Tests`` (clientAuth): (cert file, key file)."""
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        stem = re.sub(r"[^A-Za-z0-9-]+", "_", f"client-{cn}" + (f"-{ou}" if ou else ""))
        return _client(self.directory / stem, ca, ca_key, cn, ou)


def make_pki(directory: Path) -> Pki:
    """Create a PKI's files in ``directory`` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("Floe Test CA")
    other_ca, other_ca_key = _ca("Floe Untrusted CA")
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        _builder(_name("localhost"), ca, server_key)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    password = secrets.token_urlsafe(12)
    other_cert, other_key = _client(directory / "other-client", other_ca, other_ca_key, "alice")
    return Pki(
        directory=directory,
        ca_cert=_write_cert(directory / "ca.pem", ca),
        ca_key=_write_key(directory / "ca.key", ca_key),
        server_cert=_write_cert(directory / "server.pem", server),
        server_key=_write_key(directory / "server.key", server_key),
        server_key_encrypted=_write_key(directory / "server-encrypted.key", server_key, password),
        server_key_password=password,
        other_ca_cert=_write_cert(directory / "other-ca.pem", other_ca),
        other_ca_key=_write_key(directory / "other-ca.key", other_ca_key),
        other_client_cert=other_cert,
        other_client_key=other_key,
    )


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)  # most general first in DER: prints as CN=..,OU=..,O=..


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA that may sign leaf certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _builder(
    subject: x509.Name, ca: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    """A leaf certificate of ``key`` issued by ``ca``, extended key usage left to add."""
    now = dt.datetime.now(dt.UTC)
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )


def _client(
    stem: Path,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    cn: str,
    ou: str | None = None,
) -> tuple[Path, Path]:
    """A clientAuth certificate for ``CN=<cn>[,OU=<ou>],O=Floe Tests`` written to
    ``<stem>.pem`` and its key to ``<stem>.key``."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(_name(cn, ou), ca, key)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        _write_cert(stem.with_suffix(".pem"), cert),
        _write_key(stem.with_suffix(".key"), key),
    )


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None = None) -> Path:
    """``key`` as PKCS#8 PEM (encrypted with ``password`` when given), mode 0600."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier run keeps its mode otherwise
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path
