"""The SASL mechanisms' server exchanges, behind one ``step(token)`` shape
(``floe.security.session.Exchange``): PLAIN checked against the user's SCRAM
credentials, and SCRAM-SHA-256/512 (``floe.security.scram``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import secrets
from collections import OrderedDict

from floe.security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    AuthenticationError,
    ScramCredential,
    ScramServer,
    check_password,
    derive,
    invalid_credentials,
    parse_plain,
)
from floe.security.session import Exchange
from floe.security.users import Users

PLAIN = "PLAIN"


class PlainExchange:
    """SASL/PLAIN (RFC 4616): one token, the password checked against the user's
    strongest SCRAM credential (Floe stores no password, only SCRAM's salted keys)."""

    def __init__(self, passwords: PasswordCheck) -> None:
        self._passwords = passwords
        self._user = ""
        self.done = False

    @property
    def user(self) -> str:
        return self._user

    def step(self, token: bytes) -> bytes:
        """Raises: AuthenticationError: malformed, unknown user or wrong password (one
        message for both, as Kafka's)."""
        if self.done:
            raise AuthenticationError("the PLAIN exchange is over")
        user, password = parse_plain(token)
        if not self._passwords.check(user, password):
            raise invalid_credentials(PLAIN)
        self._user, self.done = user, True
        return b""


def verify_password(users: Users, user: str, password: str) -> bool:
    """Whether ``password`` is ``user``'s, checked against the user's strongest SCRAM
    credential (Floe stores no password). SASL/PLAIN and the Schema Registry's HTTP
    Basic authentication both ask this.

    An unknown user costs the same PBKDF2 as a wrong password (a decoy credential is
    checked), so the answer's timing does not tell whether the user exists.
    """
    cred = strongest(users, user)
    known = cred is not None
    return check_password(cred or _decoy(), password) and known


def strongest(users: Users, user: str) -> ScramCredential | None:
    """``user``'s strongest SCRAM credential (SHA-512 before SHA-256), None for none."""
    for mechanism in sorted(MECHANISMS, reverse=True):  # SHA-512 first
        cred = users.get(user, mechanism)
        if cred is not None:
            return cred
    return None


class PasswordCheck:
    """:func:`verify_password` that remembers the last ``SIZE`` successes, so a client
    that sends its password with every request (HTTP Basic) or logs in again and again
    (PLAIN) costs one PBKDF2 per password, not per request.

    A remembered success holds only a keyed digest of the user and password (the key is
    random per process) and the credential it matched: it stops counting the moment the
    user's credential changes or the user is deleted. Failures are never remembered.

    Ownership: one per broker, built by the composition root over its users; used on the
    event loop (:meth:`check_async` runs the PBKDF2 of a miss in a worker thread).
    """

    SIZE = 1024

    def __init__(self, users: Users) -> None:
        self.users = users
        self._key = secrets.token_bytes(32)
        self._ok: OrderedDict[bytes, bytes] = OrderedDict()

    def _digest(self, user: str, password: str) -> bytes:
        message = user.encode() + b"\0" + password.encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def _remembered(self, digest: bytes, user: str) -> bool:
        cred = strongest(self.users, user)
        stored = self._ok.get(digest)
        if cred is None or stored is None or not hmac.compare_digest(stored, cred.stored_key):
            return False
        self._ok.move_to_end(digest)
        return True

    def _settled(self, digest: bytes, user: str, verified: bool) -> bool:
        """``verified``, remembered when it is a success."""
        cred = strongest(self.users, user) if verified else None
        if cred is None:
            return verified
        self._ok[digest] = cred.stored_key
        self._ok.move_to_end(digest)
        while len(self._ok) > self.SIZE:
            self._ok.popitem(last=False)
        return True

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (PBKDF2 on this thread when not
        remembered)."""
        digest = self._digest(user, password)
        if self._remembered(digest, user):
            return True
        return self._settled(digest, user, verify_password(self.users, user, password))

    async def check_async(self, user: str, password: str) -> bool:
        """:meth:`check`, with the PBKDF2 of a password not remembered in a worker
        thread, so the event loop goes on serving."""
        digest = self._digest(user, password)
        if self._remembered(digest, user):
            return True
        verified = await asyncio.to_thread(verify_password, self.users, user, password)
        return self._settled(digest, user, verified)


@functools.cache
def _decoy() -> ScramCredential:
    """A credential no password matches in practice, checked for unknown users."""
    return derive("SCRAM-SHA-512", secrets.token_urlsafe(32), iterations=DEFAULT_ITERATIONS)


class ScramExchange:
    """SCRAM-SHA-256/512: the client's first and final messages, in turn."""

    def __init__(self, mechanism: str, users: Users) -> None:
        self._server = ScramServer(mechanism, lambda user: users.get(user, mechanism))
        self._sent_first = False

    @property
    def done(self) -> bool:
        return bool(self._server.done)

    @property
    def user(self) -> str:
        return str(self._server.user)

    def step(self, token: bytes) -> bytes:
        """Raises: AuthenticationError: as :class:`ScramServer`."""
        if not self._sent_first:
            self._sent_first = True
            return self._server.first(token)
        return self._server.final(token)


def exchange(mechanism: str, passwords: PasswordCheck) -> Exchange:
    """A new server exchange of ``mechanism`` (one of ``sasl.enabled.mechanisms``) over
    the users ``passwords`` checks."""
    if mechanism == PLAIN:
        return PlainExchange(passwords)
    return ScramExchange(mechanism, passwords.users)
