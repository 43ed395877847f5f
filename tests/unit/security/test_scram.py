"""SASL PLAIN and SCRAM on the server side: RFC 7677's test vector byte for byte, full
exchanges driven by an independent client computation and by kafka-python's own SCRAM
client, and every refusal (wrong password, unknown user without telling, tampered
messages, unsupported features, oversize input, calls out of order)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import orjson
import pytest
from kafka.admin import UserScramCredentialUpsertion
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import ScramClient

from floe.errors import ErrorCode
from floe.security.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MAX_MESSAGE_BYTES,
    MAX_USER_BYTES,
    MECHANISMS,
    MIN_ITERATIONS,
    AuthenticationError,
    ScramCredential,
    ScramServer,
    check_password,
    derive,
    from_salted_password,
    parse_plain,
)

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
INVALID = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism"
)
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
PASSWORDS = {"alice": "secret", "a,b=c": "x"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Client:
    """The client side of SCRAM, computed here from RFC 5802 independently of the
    server's code."""

    def __init__(
        self, mechanism: str, user: str, password: str, *, gs2: str = "n,,", extensions: str = ""
    ) -> None:
        self.hash = MECHANISMS[mechanism]
        self.password = password.encode()
        self.gs2 = gs2
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={CLIENT_NONCE}{extensions}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(
        self, server_first: bytes, *, binding: bytes | None = None, nonce: str | None = None
    ) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        assert attrs["r"].startswith(CLIENT_NONCE) and len(attrs["r"]) > len(CLIENT_NONCE)
        salted = hashlib.pbkdf2_hmac(
            self.hash, self.password, base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        without_proof = f"c={b64(binding or self.gs2.encode())},r={nonce or attrs['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self.server_signature = hmac.digest(server_key, auth, self.hash)
        return f"{without_proof},p={b64(proof)}".encode()


def server(mechanism: str, creds: dict[str, ScramCredential]) -> ScramServer:
    return ScramServer(mechanism, creds.get)


@pytest.fixture(scope="module")
def users() -> dict[str, dict[str, ScramCredential]]:
    """By mechanism, then user: alice (password "secret") and "a,b=c" (password "x"), at
    the least iterations to keep the tests fast."""
    return {
        m: {
            user: derive(m, password, iterations=MIN_ITERATIONS)
            for user, password in PASSWORDS.items()
        }
        for m in MECHANISMS
    }


def test_rfc7677_scram_sha_256_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = derive(SHA256, "pencil", salt, 4096)
    s = ScramServer(SHA256, {"user": cred}.get, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert s.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert s.user == "user" and not s.done
    assert s.final(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    ) == (b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert s.done


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
@pytest.mark.parametrize(
    ("user", "gs2", "extensions"),
    [
        ("alice", "n,,", ""),
        ("alice", "n,a=alice,", ""),  # an authzid equal to the user
        ("alice", "n,,", ",tokenauth=false,foo=bar"),  # extensions ignored
        ("a,b=c", "n,,", ""),  # =2C and =3D escapes
        ("a,b=c", "n,a=a=2Cb=3Dc,", ""),
    ],
)
def test_full_exchange_with_an_independent_client(
    users: dict[str, dict[str, ScramCredential]],
    mechanism: str,
    user: str,
    gs2: str,
    extensions: str,
) -> None:
    password = PASSWORDS[user]
    s = server(mechanism, users[mechanism])
    c = Client(mechanism, user, password, gs2=gs2, extensions=extensions)
    server_first = s.first(c.first())
    assert re.fullmatch(rb"r=[!-+\--~]+,s=[A-Za-z0-9+/=]+,i=4096", server_first)
    server_final = s.final(c.final(server_first))
    assert server_final == b"v=" + b64(c.server_signature).encode()
    assert s.done and s.user == user


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_kafka_python_scram_client(
    users: dict[str, dict[str, ScramCredential]], mechanism: str
) -> None:
    client = ScramClient("alice", "secret", mechanism)
    s = server(mechanism, users[mechanism])
    client.process_server_first_message(s.first(client.first_message()))
    client.process_server_final_message(s.final(client.final_message()))  # checks v=
    assert s.done and s.user == "alice"


def test_kafka_python_scram_client_with_a_wrong_password(
    users: dict[str, dict[str, ScramCredential]],
) -> None:
    client = ScramClient("alice", "wrong", SHA512)
    s = server(SHA512, users[SHA512])
    client.process_server_first_message(s.first(client.first_message()))
    with pytest.raises(AuthenticationError, match=f"^{INVALID} {SHA512}$"):
        s.final(client.final_message())


def failing_final(s: ScramServer, c: Client) -> AuthenticationError:
    first = s.first(c.first())
    with pytest.raises(AuthenticationError) as info:
        s.final(c.final(first))
    assert not s.done
    return info.value


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_unknown_user_fails_like_a_wrong_password(
    users: dict[str, dict[str, ScramCredential]], mechanism: str
) -> None:
    creds = users[mechanism]
    wrong = failing_final(server(mechanism, creds), Client(mechanism, "alice", "nope"))
    unknown = failing_final(server(mechanism, creds), Client(mechanism, "bob", "secret"))
    assert str(wrong) == str(unknown) == f"{INVALID} {mechanism}"
    assert wrong.code == unknown.code == ErrorCode.sasl_authentication_failed

    def salt_and_iterations(user: str) -> tuple[bytes, int]:
        first = server(mechanism, creds).first(Client(mechanism, user, "").first()).decode()
        match = re.fullmatch(r"r=[!-+\--~]+,s=([A-Za-z0-9+/=]+),i=(\d+)", first)
        assert match is not None, first
        return base64.b64decode(match[1]), int(match[2])

    salt, iterations = salt_and_iterations("bob")
    assert len(salt) == len(derive(mechanism, "any").salt) and iterations == DEFAULT_ITERATIONS
    assert salt_and_iterations("bob") == (salt, iterations)  # stable across attempts
    assert salt_and_iterations("carol")[0] != salt


def test_a_credential_of_another_mechanism_is_no_credential(
    users: dict[str, dict[str, ScramCredential]],
) -> None:
    s = server(SHA256, users[SHA512])  # a lookup wired to the wrong mechanism
    assert str(failing_final(s, Client(SHA256, "alice", "secret"))) == f"{INVALID} {SHA256}"


def test_tampered_final_messages_fail(users: dict[str, dict[str, ScramCredential]]) -> None:
    creds = users[SHA256]
    cases = [
        ({"nonce": CLIENT_NONCE + "forged"}, "wrong nonce"),
        ({"binding": b"y,,"}, "wrong channel binding"),
        ({"binding": b"n,a=alice,"}, "wrong channel binding"),
    ]
    for kwargs, message in cases:
        s = server(SHA256, creds)
        c = Client(SHA256, "alice", "secret")
        first = s.first(c.first())
        with pytest.raises(AuthenticationError, match=message):
            s.final(c.final(first, **kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "final",
    [
        b"",
        b"r=x,c=biws,p=AAAA",
        b"c=biws,r=x",
        b"c=biws,p=AAAA",
        b"c=!!!!,r=x,p=AAAA",
        b"c=biws,r=x,p=not base64",
        b"c=biws,r=x,bad ext,p=AAAA",
        b"c=biws,r=x,p=\xff",
    ],
)
def test_malformed_final_messages_fail(
    users: dict[str, dict[str, ScramCredential]], final: bytes
) -> None:
    s = server(SHA256, users[SHA256])
    s.first(Client(SHA256, "alice", "secret").first())
    with pytest.raises(AuthenticationError):
        s.final(final)


def test_a_proof_of_the_wrong_length_is_invalid_credentials(
    users: dict[str, dict[str, ScramCredential]],
) -> None:
    s = server(SHA256, users[SHA256])
    first = s.first(Client(SHA256, "alice", "secret").first()).decode()
    nonce = first.split(",")[0]
    with pytest.raises(AuthenticationError, match=f"^{INVALID} {SHA256}$"):
        s.final(f"c=biws,{nonce},p={b64(b'short')}".encode())


@pytest.mark.parametrize(
    ("first", "message"),
    [
        (b"y,,n=alice,r=abc", "channel binding"),
        (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
        (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
        (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation tokens"),
        (b"n,a=bob,n=alice,r=abc", "authorization id that is different"),
        (b"n,,n=a=41b,r=abc", "user name"),  # only =2C and =3D are escapes
        (b"n,,n=a=,r=abc", "user name"),
        (b"n,,n=,r=abc", "user name"),
        (b"n,,n=a\x00b,r=abc", "user name"),
        (b"n,a=a=41,n=a,r=abc", "user name"),
        (b"n,,m=ext,n=alice,r=abc", "format"),  # reserved mandatory extension
        (b"n,,n=alice,r=", "nonce"),
        (b"n,,n=alice,r=a b", "nonce"),
        (b"n,,n=alice", "format"),
        (b"n,,r=abc,n=alice", "format"),
        (b"n,x,n=alice,r=abc", "format"),
        (b"n,,n=alice,r=abc,=x", "format"),
        (b"n,n=alice,r=abc", "format"),
        (b"n,,n=\xffalice,r=abc", "UTF-8"),
        (b"", "format"),
    ],
)
def test_refused_first_messages(
    users: dict[str, dict[str, ScramCredential]], first: bytes, message: str
) -> None:
    s = server(SHA256, users[SHA256])
    with pytest.raises(AuthenticationError, match=message) as info:
        s.first(first)
    assert info.value.code == ErrorCode.sasl_authentication_failed
    with pytest.raises(AuthenticationError, match="out of order"):  # the exchange is over
        s.final(b"c=biws,r=abc,p=AAAA")


def test_oversize_input_is_refused(users: dict[str, dict[str, ScramCredential]]) -> None:
    creds = users[SHA256]
    pad = "x" * MAX_MESSAGE_BYTES
    with pytest.raises(AuthenticationError, match="bytes"):
        server(SHA256, creds).first(f"n,,n=alice,r=abc,pad={pad}".encode())
    s = server(SHA256, creds)
    s.first(f"n,,n=alice,r={'a' * (MAX_MESSAGE_BYTES - 20)}".encode())  # at the bound
    with pytest.raises(AuthenticationError, match="bytes"):
        s.final(f"c=biws,r=abc,pad={pad},p=AAAA".encode())
    longest = "é" * (MAX_USER_BYTES // 2)
    assert server(SHA256, creds).first(f"n,,n={longest},r=abc".encode())
    with pytest.raises(AuthenticationError, match="user name over"):
        server(SHA256, creds).first(f"n,,n={longest}é,r=abc".encode())


def test_calls_out_of_order_are_refused(users: dict[str, dict[str, ScramCredential]]) -> None:
    creds = users[SHA256]
    with pytest.raises(AuthenticationError, match="out of order"):
        server(SHA256, creds).final(b"c=biws,r=abc,p=AAAA")
    s = server(SHA256, creds)
    c = Client(SHA256, "alice", "secret")
    first = s.first(c.first())
    with pytest.raises(AuthenticationError, match="out of order"):
        s.first(c.first())
    final = c.final(first)
    with pytest.raises(AuthenticationError, match="out of order"):
        s.final(final)  # the failed call above ended the exchange
    s = server(SHA256, creds)
    s.final(c.final(s.first(c.first())))
    for call in (s.first, s.final):
        with pytest.raises(AuthenticationError, match="out of order"):
            call(b"n,,n=alice,r=abc")
    assert s.done  # a refused extra message does not undo a finished exchange


def test_failed_final_ends_the_exchange(users: dict[str, dict[str, ScramCredential]]) -> None:
    s = server(SHA256, users[SHA256])
    c = Client(SHA256, "alice", "nope")
    first = s.first(c.first())
    with pytest.raises(AuthenticationError, match=INVALID):
        s.final(c.final(first))
    with pytest.raises(AuthenticationError, match="out of order"):
        s.final(Client(SHA256, "alice", "secret").final(first))


def test_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        ScramServer("SCRAM-SHA-1", lambda user: None)
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        derive("PLAIN", "x")


# -- PLAIN --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b"\x00alice\x00secret", ("alice", "secret")),
        (b"alice\x00alice\x00secret", ("alice", "secret")),
        ("\x00zoë\x00pâss word".encode(), ("zoë", "pâss word")),
        (b"\x00a,b=c\x00x", ("a,b=c", "x")),  # no escaping in PLAIN
    ],
)
def test_plain_parses(message: bytes, expected: tuple[str, str]) -> None:
    assert parse_plain(message) == expected


def test_plain_from_kafka_python() -> None:
    mechanism = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="secret")
    assert parse_plain(mechanism.auth_bytes()) == ("alice", "secret")


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (b"alice\x00secret", "expected 3 tokens, got 2"),
        (b"\x00alice\x00sec\x00ret", "expected 3 tokens, got 4"),
        (b"", "expected 3 tokens, got 1"),
        (b"\x00\x00secret", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"bob\x00alice\x00secret", "authorization id that is different"),
        (b"\x00al\xffice\x00secret", "UTF-8"),
        (b"\x00" + b"u" * (MAX_USER_BYTES + 1) + b"\x00secret", "user name over"),
        (b"\x00alice\x00" + b"p" * MAX_MESSAGE_BYTES, "bytes"),
    ],
)
def test_plain_refuses(message: bytes, error: str) -> None:
    with pytest.raises(AuthenticationError, match=error) as info:
        parse_plain(message)
    assert info.value.code == ErrorCode.sasl_authentication_failed


def test_check_password() -> None:
    for mechanism in MECHANISMS:
        cred = derive(mechanism, "pâssword", iterations=MIN_ITERATIONS)
        assert check_password(cred, "pâssword")
        assert not check_password(cred, "password")
        assert not check_password(cred, "")


# -- credentials --------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_derive_and_from_salted_password_agree(mechanism: str) -> None:
    upsertion = UserScramCredentialUpsertion("alice", mechanism, "secret", iterations=4096)
    from_wire = from_salted_password(
        mechanism, upsertion.salt, upsertion.iterations, upsertion.salted_password
    )
    assert from_wire == derive(mechanism, "secret", upsertion.salt, 4096)
    assert check_password(from_wire, "secret")
    fresh = derive(mechanism, "secret")
    assert len(fresh.salt) == 32 and fresh.iterations == DEFAULT_ITERATIONS
    assert fresh.salt != derive(mechanism, "secret").salt  # a random salt each time
    with pytest.raises(ValueError, match="digest's length"):
        from_salted_password(mechanism, b"salt", 4096, upsertion.salted_password[:-1])


def test_json_round_trip() -> None:
    for mechanism in MECHANISMS:
        cred = derive(mechanism, "secret", iterations=MIN_ITERATIONS)
        assert ScramCredential.from_json(orjson.loads(orjson.dumps(cred.to_json()))) == cred


def good_json() -> dict[str, object]:
    return derive(SHA256, "secret", iterations=MIN_ITERATIONS).to_json()


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"mechanism": "SCRAM-SHA-1"}, "unknown SCRAM mechanism"),
        ({"mechanism": 256}, "wrong type"),
        ({"salt": "not base64!"}, "bad base64"),
        ({"salt": "QUJD"[:3]}, "bad base64"),  # unpadded
        ({"salt": ""}, "salt of 0 bytes"),
        ({"salt": b64(b"s" * 1025)}, "salt of 1025 bytes"),
        ({"stored_key": "é"}, "bad base64"),
        ({"server_key": 7}, "wrong type"),
        ({"iterations": MIN_ITERATIONS - 1}, "outside"),
        ({"iterations": MAX_ITERATIONS + 1}, "outside"),
        ({"iterations": "8192"}, "outside"),
        ({"iterations": True}, "outside"),
        ({"stored_key": b64(b"k" * 31)}, "must be 32 bytes"),
        ({"server_key": b64(b"k" * 64)}, "must be 32 bytes"),
        ({"mechanism": SHA512}, "must be 64 bytes"),  # SHA-256 keys under SHA-512
    ],
)
def test_from_json_rejects(changes: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ScramCredential.from_json({**good_json(), **changes})


def test_from_json_rejects_missing_fields_and_non_objects() -> None:
    for field in ("mechanism", "salt", "iterations", "stored_key", "server_key"):
        d = good_json()
        del d[field]
        with pytest.raises(ValueError, match=f"without '{field}'"):
            ScramCredential.from_json(d)
    values: list[object] = [None, [], "x", 1]
    for value in values:
        with pytest.raises(ValueError, match="JSON object"):
            ScramCredential.from_json(value)


def test_derive_checks_bounds() -> None:
    for iterations in (MIN_ITERATIONS - 1, MAX_ITERATIONS + 1):
        with pytest.raises(ValueError, match="outside"):
            derive(SHA256, "secret", iterations=iterations)
    with pytest.raises(ValueError, match="salt of 0 bytes"):
        derive(SHA256, "secret", salt=b"", iterations=MIN_ITERATIONS)


def test_a_final_nonce_prefixed_by_the_client_nonce_is_accepted_as_kafka_does(
    users: dict[str, dict[str, ScramCredential]],
) -> None:
    """Cyrus SASL's client (kcat's librdkafka) sends its nonce before the server-first
    nonce; Kafka accepts a final nonce that ends with the server-first one, so does Floe
    (the proof still covers the message as sent)."""
    s = server(SHA256, users[SHA256])
    c = Client(SHA256, "alice", "secret")
    first = s.first(c.first())
    full = dict(a.split("=", 1) for a in first.decode().split(","))["r"]
    s.final(c.final(first, nonce=CLIENT_NONCE + full))
    assert s.done
    wrong = Client(SHA256, "alice", "wrong")
    s = server(SHA256, users[SHA256])
    first = s.first(wrong.first())
    full = dict(a.split("=", 1) for a in first.decode().split(","))["r"]
    with pytest.raises(AuthenticationError, match=INVALID):
        s.final(wrong.final(first, nonce=CLIENT_NONCE + full))
