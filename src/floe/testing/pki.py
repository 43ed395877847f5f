"""A throwaway PKI for the TLS tests and the security benchmark: a CA, leaf
certificates it signs (a server's for 127.0.0.1 and localhost, clients' on demand),
and the PEM files.

EC P-256 keys (fast to make), SHA-256 signatures, everything valid from an hour ago to
a day from now, keys written 0600. Certificates carry the extensions strict verifiers
(Python 3.13's default ``VERIFY_X509_STRICT``) insist on: a critical basicConstraints
on CAs, key identifiers, key usage and extended key usage.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey


def name(cn: str, organization: str, ou: str | None = None) -> x509.Name:
    """``CN=<cn>[,OU=<ou>],O=<organization>`` as Java prints it (most general first in
    DER)."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def ca(cn: str, organization: str) -> tuple[x509.Certificate, Key]:
    """A self-signed CA that may sign leaf certificates only, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(cn, organization))
        .issuer_name(name(cn, organization))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def leaf(subject: x509.Name, issuer: x509.Certificate, key: Key) -> x509.CertificateBuilder:
    """A leaf certificate of ``key`` issued by ``issuer``, extended key usage (and any
    subject alternative names) left to add, then to sign with the issuer's key."""
    now = dt.datetime.now(dt.UTC)
    issuer_ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski),
            critical=False,
        )
    )


def server(
    issuer: x509.Certificate, issuer_key: Key, organization: str
) -> tuple[x509.Certificate, Key]:
    """A serverAuth certificate for ``localhost`` and ``127.0.0.1``, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        leaf(name("localhost", organization), issuer, key)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )
    return cert, key


def client(
    issuer: x509.Certificate, issuer_key: Key, subject: x509.Name
) -> tuple[x509.Certificate, Key]:
    """A clientAuth certificate for ``subject``, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        leaf(subject, issuer, key)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )
    return cert, key


def write_cert(path: Path, cert: x509.Certificate) -> Path:
    """``cert`` as PEM at ``path``."""
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def write_key(path: Path, key: Key, password: str | None = None) -> Path:
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
