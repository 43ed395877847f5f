"""A Kafka connection's security state: who the client is, and what it may send yet.

Ownership: one :class:`Session` per connection, created by the server when it accepts
the socket and changed only by the SASL handlers (``floe.broker.sasl``) that the
connection's reader task runs, in request order. It ends with its connection.

The states follow Kafka's SASL server (KIP-43, KIP-152, KIP-368):

- a PLAINTEXT or SSL listener's session is authenticated from the start (principal
  ``User:ANONYMOUS``, or on SSL the client certificate's mapped subject);
- a SASL listener's session accepts only ApiVersions and SaslHandshake until a
  handshake picked a mechanism, then SaslAuthenticate until the exchange succeeds;
  after SaslHandshake v0 the next frames are bare SASL tokens, not Kafka requests;
- with ``connections.max.reauth.ms`` an authenticated session expires: the client may
  re-authenticate on the same connection (SaslHandshake v1+ and SaslAuthenticate, as
  the same principal), and any other request after the expiry closes the connection.
"""

from __future__ import annotations

import time
from typing import Protocol

from floe.config.security import ListenerSpec

ANONYMOUS = "User:ANONYMOUS"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


class Exchange(Protocol):
    """One SASL mechanism's server side (``floe.security.scram``)."""

    def step(self, token: bytes) -> bytes:
        """The answer to the client's next token.

        Raises:
            AuthenticationError: the client failed (or broke) the exchange.
        """
        ...

    @property
    def done(self) -> bool: ...

    @property
    def user(self) -> str: ...


class Session:
    """One connection's principal and SASL state (module docstring)."""

    def __init__(self, listener: ListenerSpec, principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.principal = principal
        """``User:<name>``: the certificate's on SSL, the SASL user once authenticated."""
        self.authenticated = not listener.sasl
        self.mechanism: str | None = None
        """The mechanism the last SaslHandshake chose (None before one)."""
        self.exchange: Exchange | None = None
        """The exchange in progress (None outside one)."""
        self.raw_tokens = False
        """SaslHandshake v0 was used: the next frames are bare SASL tokens."""
        self.expires_at: float | None = None
        """``time.monotonic()`` after which only re-authentication is accepted."""
        self.close_after_reply = False
        """The reply being sent is the last (a failed authentication, as Kafka does)."""
        self.refused_leadership: dict[tuple[str, int], float] = {}
        """Not security state but the connection's own: the partitions a produce request
        of this connection was refused NOT_LEADER_OR_FOLLOWER for, with when
        (``time.monotonic()``), until one of its batches there is appended
        (floe.broker.produce)."""

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def refuses(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be handled now (the connection closes,
        as Kafka's does), or None."""
        if api_key == API_VERSIONS:
            return None
        if api_key == SASL_HANDSHAKE:
            return None  # answered ILLEGAL_SASL_STATE on a non-SASL listener, as Kafka
        if api_key == SASL_AUTHENTICATE:
            if self.listener.sasl and self.exchange is None:
                return "SaslAuthenticate before a SaslHandshake"
            return None
        if self.exchange is not None:
            return "a request in the middle of a SASL exchange"
        if not self.authenticated:
            return "a request before SASL authentication"
        if self.expired:
            return "the SASL session expired and the client did not re-authenticate"
        return None

    def begin(self, mechanism: str, exchange: Exchange, version: int) -> None:
        """A handshake chose ``mechanism``: its exchange starts (v0: bare tokens)."""
        self.mechanism = mechanism
        self.exchange = exchange
        self.raw_tokens = version == 0

    def authenticated_as(self, user: str, lifetime_ms: int) -> None:
        """The exchange succeeded for ``user``; the session lasts ``lifetime_ms`` (0:
        for ever).

        Raises:
            ValueError: a re-authentication as another user (Kafka refuses a change of
                principal on a connection).
        """
        principal = f"User:{user}"
        if self.authenticated and self.listener.sasl and principal != self.principal:
            raise ValueError("a re-authentication cannot change the principal")
        self.principal = principal
        self.authenticated = True
        self.exchange = None
        self.raw_tokens = False
        self.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
