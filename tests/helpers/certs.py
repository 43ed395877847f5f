"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost,
client certificates on demand, and a second CA whose client nobody trusts, built with
:mod:`floe.testing.pki` (which the security benchmark uses too).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from floe.testing import pki

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
    ca, ca_key = pki.ca("Floe Test CA", ORGANIZATION)
    other_ca, other_ca_key = pki.ca("Floe Untrusted CA", ORGANIZATION)
    server, server_key = pki.server(ca, ca_key, ORGANIZATION)
    password = secrets.token_urlsafe(12)
    other_cert, other_key = _client(directory / "other-client", other_ca, other_ca_key, "alice")
    return Pki(
        directory=directory,
        ca_cert=pki.write_cert(directory / "ca.pem", ca),
        ca_key=pki.write_key(directory / "ca.key", ca_key),
        server_cert=pki.write_cert(directory / "server.pem", server),
        server_key=pki.write_key(directory / "server.key", server_key),
        server_key_encrypted=pki.write_key(
            directory / "server-encrypted.key", server_key, password
        ),
        server_key_password=password,
        other_ca_cert=pki.write_cert(directory / "other-ca.pem", other_ca),
        other_ca_key=pki.write_key(directory / "other-ca.key", other_ca_key),
        other_client_cert=other_cert,
        other_client_key=other_key,
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
    cert, key = pki.client(ca, ca_key, pki.name(cn, ORGANIZATION, ou))
    return (
        pki.write_cert(stem.with_suffix(".pem"), cert),
        pki.write_key(stem.with_suffix(".key"), key),
    )
