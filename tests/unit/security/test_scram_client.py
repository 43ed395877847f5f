"""The SCRAM client the table pipeline authenticates with: RFC 7677's vector byte for
byte, and whole exchanges with the broker's ScramServer (right and wrong passwords, a
server that does not know the password, a server nonce that is not ours)."""

from __future__ import annotations

import base64

import pytest

from floe.security.scram import (
    MECHANISMS,
    AuthenticationError,
    ScramClient,
    ScramServer,
    derive,
)

NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_rfc7677_scram_sha_256_vector() -> None:
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=NONCE)
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.final(f"r={NONCE}{SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode())
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    c.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
@pytest.mark.parametrize("user", ["__floe_pipeline", "a,b=c"])
def test_an_exchange_with_the_server(mechanism: str, user: str) -> None:
    s = ScramServer(mechanism, {user: derive(mechanism, "secret", iterations=4096)}.get)
    c = ScramClient(mechanism, user, "secret")
    c.verify(s.final(c.final(s.first(c.first()))))
    assert s.done and s.user == user


def test_a_wrong_password_is_refused_by_the_server() -> None:
    s = ScramServer("SCRAM-SHA-512", {"u": derive("SCRAM-SHA-512", "secret")}.get)
    c = ScramClient("SCRAM-SHA-512", "u", "wrong")
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        s.final(c.final(s.first(c.first())))


def test_a_server_that_does_not_know_the_password_is_not_believed() -> None:
    c = ScramClient("SCRAM-SHA-256", "u", "secret", nonce=NONCE)
    c.final(f"r={NONCE}x,s={base64.b64encode(b'salt').decode()},i=4096".encode())
    with pytest.raises(AuthenticationError, match="signature"):
        c.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someone-elses-nonce,s=c2FsdA==,i=4096",
        f"r={NONCE}x,s=c2FsdA==,i=many".encode(),
        f"r={NONCE}x,s=!!!,i=4096".encode(),
        b"garbage",
    ],
)
def test_a_malformed_server_first_message_is_refused(server_first: bytes) -> None:
    c = ScramClient("SCRAM-SHA-256", "u", "secret", nonce=NONCE)
    with pytest.raises(AuthenticationError):
        c.final(server_first)


def test_verify_before_final_is_refused() -> None:
    with pytest.raises(AuthenticationError):
        ScramClient("SCRAM-SHA-256", "u", "secret").verify(b"v=")
