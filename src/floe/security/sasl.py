"""The SASL mechanisms' server exchanges, behind one ``step(token)`` shape
(``floe.security.session.Exchange``): PLAIN checked against the user's SCRAM
credentials, and SCRAM-SHA-256/512 (``floe.security.scram``).
"""

from __future__ import annotations

import functools
import secrets

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

    def __init__(self, users: Users) -> None:
        self._users = users
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
        if not verify_password(self._users, user, password):
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
    cred: ScramCredential | None = None
    for mechanism in sorted(MECHANISMS, reverse=True):  # SHA-512 first
        cred = users.get(user, mechanism)
        if cred is not None:
            break
    known = cred is not None
    return check_password(cred or _decoy(), password) and known


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


def exchange(mechanism: str, users: Users) -> Exchange:
    """A new server exchange of ``mechanism`` (one of ``sasl.enabled.mechanisms``)."""
    if mechanism == PLAIN:
        return PlainExchange(users)
    return ScramExchange(mechanism, users)
