"""SASL PLAIN and SCRAM (RFC 5802, RFC 7677), sans-I/O: the server side, and the
client the broker's own table pipeline authenticates with (:class:`ScramClient`).

A connection feeds the client's SASL tokens in and sends back what comes out; nothing
here touches a socket, the event loop or the store (credentials come through a
``lookup`` callable). Kafka's behaviour is the reference: SCRAM-SHA-256 and
SCRAM-SHA-512, no channel binding (``n`` only), no delegation tokens, no SASLprep (Kafka
encodes passwords as plain UTF-8), iteration counts within Kafka's bounds.

Invariants:

- A failed exchange never says whether the user exists: an unknown user gets a
  server-first message shaped like a real one (a salt stable per user, the default
  iteration count) and fails at the final message with the very error of a wrong
  password, after the same computation.
- Every input is bounded before it is parsed (:data:`MAX_MESSAGE_BYTES`,
  :data:`MAX_USER_BYTES`); anything malformed raises :class:`AuthenticationError`.
- A :class:`ScramCredential` is valid by construction (known mechanism, iterations in
  bounds, keys of the digest's length), whether derived, upserted or read back.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from floe.errors import ErrorCode, KafkaError

MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""SCRAM mechanism name -> :mod:`hashlib` digest name."""
MIN_ITERATIONS = 4096
"""Kafka's minimum iteration count for both mechanisms (also the least it accepts in
AlterUserScramCredentials)."""
MAX_ITERATIONS = 16384
"""The most iterations Kafka's AlterUserScramCredentials accepts."""
DEFAULT_ITERATIONS = 8192
"""What :func:`derive` uses, and what an unknown user's server-first message says."""
SALT_BYTES = 32
"""The length of a salt :func:`derive` draws (and of an unknown user's fake salt)."""
MAX_SALT_BYTES = 1024
"""Real salts are 16 to 32 bytes; the bound keeps a stored credential and the
server-first message small."""
MAX_MESSAGE_BYTES = 16 * 1024
"""The longest SASL token accepted from a client."""
MAX_USER_BYTES = 255
"""The longest user name accepted (UTF-8 bytes)."""

_FAKE_SECRET = secrets.token_bytes(32)
"""Keys the unknown users' fake salts and keys: stable within this process, so two
attempts for one unknown user see the same salt, and unguessable from outside."""
_SASLNAME = re.compile(r"(?:[^=,\x00]|=2C|=3D)+")
_ESCAPE = re.compile(r"=2C|=3D")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_EXTENSION = re.compile(r"([A-Za-z]+)=([^,\x00]+)")


class AuthenticationError(KafkaError):
    """A SASL exchange failed: bad credentials, or a malformed or unsupported message.

    The message goes to the client as the SaslAuthenticate error message, so it never
    says whether the user exists (see :func:`invalid_credentials`).
    """

    code = ErrorCode.sasl_authentication_failed


def invalid_credentials(mechanism: str) -> AuthenticationError:
    """The one error for a wrong user or a wrong password, in Kafka's words."""
    return AuthenticationError(
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a user's password for one mechanism (RFC 5802 §3).

    Raises:
        ValueError: unknown mechanism, iterations out of bounds, an empty or oversize
            salt, or keys that are not of the digest's length.
    """

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __post_init__(self) -> None:
        name = MECHANISMS.get(self.mechanism)
        if name is None:
            raise ValueError(f"unknown SCRAM mechanism {self.mechanism!r}")
        if type(self.iterations) is not int or not (
            MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS
        ):
            raise ValueError(
                f"iterations {self.iterations!r} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
            )
        if not 0 < len(self.salt) <= MAX_SALT_BYTES:
            raise ValueError(f"salt of {len(self.salt)} bytes (1 to {MAX_SALT_BYTES})")
        size = hashlib.new(name).digest_size
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise ValueError(f"{self.mechanism} keys must be {size} bytes")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes in base64): the value stored in the journal."""
        return {
            "mechanism": self.mechanism,
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, d: Any) -> ScramCredential:
        """The credential :meth:`to_json` gave.

        Raises:
            ValueError: ``d`` is not such a dict, a field is missing, of the wrong type
                or bad base64, or the credential is not valid.
        """
        if not isinstance(d, dict):
            raise ValueError("a SCRAM credential must be a JSON object")
        try:
            mechanism, iterations = d["mechanism"], d["iterations"]
            fields = [d["salt"], d["stored_key"], d["server_key"]]
        except KeyError as exc:
            raise ValueError(f"SCRAM credential without {exc.args[0]!r}") from None
        if not isinstance(mechanism, str) or not all(isinstance(f, str) for f in fields):
            raise ValueError("SCRAM credential fields of the wrong type")
        salt, stored_key, server_key = (_unb64(f) for f in fields)
        return cls(mechanism, salt, iterations, stored_key, server_key)


def derive(
    mechanism: str,
    password: str,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramCredential:
    """The credential of ``password`` (a random :data:`SALT_BYTES` salt when None).

    Raises:
        ValueError: unknown mechanism, or iterations or salt out of bounds.
    """
    name = _digest(mechanism)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    return from_salted_password(mechanism, salt, iterations, salted)


def from_salted_password(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The credential of a salted password, as AlterUserScramCredentials carries it
    (the client derives it; the password never reaches the broker).

    Raises:
        ValueError: unknown mechanism, iterations or salt out of bounds, or a salted
            password that is not of the digest's length.
    """
    name = _digest(mechanism)
    if len(salted_password) != hashlib.new(name).digest_size:
        raise ValueError(f"a {mechanism} salted password has the digest's length")
    client_key = hmac.digest(salted_password, b"Client Key", name)
    return ScramCredential(
        mechanism,
        salt,
        iterations,
        hashlib.new(name, client_key).digest(),
        hmac.digest(salted_password, b"Server Key", name),
    )


def check_password(cred: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``cred`` was derived from (SASL/PLAIN checks
    against the SCRAM credentials). Compares in constant time."""
    other = derive(cred.mechanism, password, cred.salt, cred.iterations)
    return hmac.compare_digest(other.stored_key, cred.stored_key)


def parse_plain(message: bytes) -> tuple[str, str]:
    """The (user, password) of a SASL/PLAIN token, RFC 4616:
    ``[authzid] NUL authcid NUL passwd`` in UTF-8.

    Raises:
        AuthenticationError: oversize, not UTF-8, not three fields, an empty user or
            password, a user over :data:`MAX_USER_BYTES`, or an authorization id other
            than the user.
    """
    parts = _text(message).split("\x00")
    if len(parts) != 3:
        raise AuthenticationError(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
        )
    authzid, user, password = parts
    if not user:
        raise AuthenticationError("Authentication failed: username not specified")
    if not password:
        raise AuthenticationError("Authentication failed: password not specified")
    _check_user(user)
    if authzid and authzid != user:
        raise _authzid_mismatch()
    return user, password


class ScramServer:
    """The server side of one SCRAM exchange: :meth:`first`, then :meth:`final`.

    Ownership: one per authenticating connection, used by that connection only and
    dropped when the exchange ends. Any failure ends the exchange: every later call
    raises :class:`AuthenticationError`.

    Attributes:
        user: the user named in the client-first message ("" before it).
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] | None = None,
    ) -> None:
        """Start an exchange for ``mechanism``; ``lookup`` gives a user's credential for
        it (None when there is none), ``nonce`` the server's part of the nonce (random
        by default; tests pass a fixed one).

        Raises:
            ValueError: ``mechanism`` is not one of :data:`MECHANISMS`.
        """
        self.mechanism = mechanism
        self._hash = _digest(mechanism)
        self._lookup = lookup
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self.user = ""
        self._state = "first"
        self._cred: ScramCredential | None = None
        self._known = False
        self._gs2_header = b""
        self._nonce_full = ""
        self._auth_prefix = b""

    @property
    def done(self) -> bool:
        """Whether the client proved its password (the exchange succeeded)."""
        return self._state == "done"

    def first(self, client_first: bytes) -> bytes:
        """Parse the client-first message and answer the server-first message.

        Raises:
            AuthenticationError: out of order, malformed, channel binding asked for, a
                delegation token, or an authorization id other than the user.
        """
        self._expect("first")
        self._state = "failed"  # until this step succeeds
        text = _text(client_first)
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise AuthenticationError("Invalid SCRAM client first message format")
        flag, authz, bare = parts
        if flag != "n":
            raise AuthenticationError(
                "Invalid SCRAM client first message format: channel binding is not supported"
            )
        if authz and not authz.startswith("a="):
            raise AuthenticationError("Invalid SCRAM client first message format")
        attrs = bare.split(",")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise AuthenticationError("Invalid SCRAM client first message format")
        user = _saslname(attrs[0][2:])
        client_nonce = attrs[1][2:]
        if not _NONCE.fullmatch(client_nonce):
            raise AuthenticationError("Invalid SCRAM client first message format: bad nonce")
        for attr in attrs[2:]:
            ext = _EXTENSION.fullmatch(attr)
            if ext is None:
                raise AuthenticationError("Invalid SCRAM client first message format")
            if ext[1] == "tokenauth" and ext[2].lower() == "true":
                raise AuthenticationError(
                    "Authentication failed: delegation tokens are not supported"
                )
            # Other extensions are ignored, as Kafka ignores unsupported ones.
        if authz and _saslname(authz[2:]) != user:
            raise _authzid_mismatch()
        self.user = user
        cred = self._lookup(user)
        self._known = cred is not None and cred.mechanism == self.mechanism
        self._cred = cred if cred is not None and self._known else self._fake(user)
        self._gs2_header = f"{flag},{authz},".encode()
        self._nonce_full = client_nonce + self._nonce()
        server_first = (
            f"r={self._nonce_full},s={_b64(self._cred.salt)},i={self._cred.iterations}"
        ).encode()
        self._auth_prefix = bare.encode() + b"," + server_first + b","
        self._state = "final"
        return server_first

    def final(self, client_final: bytes) -> bytes:
        """Check the client's proof and answer the server-final message.

        Raises:
            AuthenticationError: out of order, malformed, a wrong channel binding or
                nonce, or invalid credentials (wrong password or unknown user alike).
        """
        self._expect("final")
        self._state = "failed"
        cred = self._cred
        assert cred is not None  # set by first()
        text = _text(client_final)
        head, sep, proof_b64 = text.rpartition(",p=")
        attrs = head.split(",")
        if not sep or len(attrs) < 2 or not attrs[0].startswith("c="):
            raise AuthenticationError("Invalid SCRAM client final message format")
        if not attrs[1].startswith("r=") or any(_EXTENSION.fullmatch(a) is None for a in attrs[2:]):
            raise AuthenticationError("Invalid SCRAM client final message format")
        try:
            binding = _unb64(attrs[0][2:])
            proof = _unb64(proof_b64)
        except ValueError:
            raise AuthenticationError("Invalid SCRAM client final message format") from None
        if binding != self._gs2_header:
            raise AuthenticationError("Invalid SCRAM client final message: wrong channel binding")
        # Kafka checks only that the nonce ends with the server-first one: Cyrus SASL's
        # SCRAM client (librdkafka built with GSSAPI, as kcat is) sends its own nonce
        # before the server's whole one
        if not attrs[1][2:].endswith(self._nonce_full):
            raise AuthenticationError("Invalid SCRAM client final message: wrong nonce")
        auth_message = self._auth_prefix + head.encode()
        signature = hmac.digest(cred.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise invalid_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        stored_key = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(stored_key, cred.stored_key) or not self._known:
            raise invalid_credentials(self.mechanism)
        self._state = "done"
        return b"v=" + _b64(hmac.digest(cred.server_key, auth_message, self._hash)).encode()

    def _expect(self, state: str) -> None:
        if self._state != state:
            current = self._state
            if current != "done":  # a finished exchange stays finished
                self._state = "failed"
            raise AuthenticationError(
                f"SCRAM exchange out of order: {state} message received in state {current}"
            )

    def _fake(self, user: str) -> ScramCredential:
        """An unknown user's credential: a stable salt, keys no password matches."""
        seed = self.mechanism.encode() + b"\x00" + user.encode()

        def mac(label: bytes) -> bytes:
            return hmac.digest(_FAKE_SECRET, label + seed, self._hash)

        return ScramCredential(
            self.mechanism,
            mac(b"salt")[:SALT_BYTES],
            DEFAULT_ITERATIONS,
            mac(b"stored"),
            mac(b"server"),
        )


class ScramClient:
    """The client side of one SCRAM exchange: :meth:`first`, :meth:`final` with the
    server-first message, then :meth:`verify` with the server-final one. Used by the
    table pipeline's fetch connections (the broker's internal user); Kafka clients
    bring their own.

    Raises (each step):
        AuthenticationError: a malformed or out-of-order server message, a server nonce
            that does not extend ours, or a server signature that does not match (the
            server does not know the password).
    """

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        """``nonce``: the client nonce (random by default; tests pass RFC 7677's)."""
        self.mechanism = mechanism
        self._hash = _digest(mechanism)
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        escaped = user.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={escaped},r={self._nonce}"
        self._server_key = b""
        self._auth_message = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(a.split("=", 1) for a in _text(server_first).split(",") if "=" in a)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or not iterations.isdigit():
            raise AuthenticationError("Invalid SCRAM server first message")
        try:
            salted = hashlib.pbkdf2_hmac(self._hash, self._password, _unb64(salt), int(iterations))
        except ValueError:
            raise AuthenticationError("Invalid SCRAM server first message") from None
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._bare},{_text(server_first)},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = hmac.digest(stored_key, self._auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = hmac.digest(salted, b"Server Key", self._hash)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        expected = hmac.digest(self._server_key, self._auth_message, self._hash)
        if not self._auth_message or not hmac.compare_digest(
            server_final, b"v=" + _b64(expected).encode()
        ):
            raise AuthenticationError("the server's SCRAM signature does not match")


def _digest(mechanism: str) -> str:
    name = MECHANISMS.get(mechanism)
    if name is None:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    """Strict base64 (standard alphabet, padded).

    Raises:
        ValueError: anything else.
    """
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"bad base64: {exc}") from None


def _text(message: bytes) -> str:
    """A client's SASL token as text, bounded before it is decoded.

    Raises:
        AuthenticationError: over :data:`MAX_MESSAGE_BYTES`, or not UTF-8.
    """
    if len(message) > MAX_MESSAGE_BYTES:
        raise AuthenticationError(
            f"SASL message of {len(message)} bytes (at most {MAX_MESSAGE_BYTES})"
        )
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError("SASL message is not valid UTF-8") from None


def _saslname(text: str) -> str:
    """A SCRAM saslname unescaped (``=2C`` -> ``,``, ``=3D`` -> ``=``).

    Raises:
        AuthenticationError: empty, another ``=`` escape, a NUL, or too long.
    """
    if not _SASLNAME.fullmatch(text):
        raise AuthenticationError(f"Invalid SCRAM user name {text[:64]!r}")
    user = _ESCAPE.sub(lambda m: "," if m[0] == "=2C" else "=", text)
    _check_user(user)
    return user


def _check_user(user: str) -> None:
    if len(user.encode()) > MAX_USER_BYTES:
        raise AuthenticationError(f"user name over {MAX_USER_BYTES} bytes")


def _authzid_mismatch() -> AuthenticationError:
    return AuthenticationError(
        "Authentication failed: Client requested an authorization id that is different "
        "from username"
    )
