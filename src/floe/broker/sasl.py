"""SaslHandshake (17) and SaslAuthenticate (36): a SASL listener's authentication, and
its re-authentication on the same connection (KIP-368).

The handlers change the connection's :class:`floe.security.session.Session`; the
connection lets nothing else through until it is authenticated (``Session.refuses``).
A failed authentication is answered with SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` and the connection then closes, as
Kafka's broker does; bare-token exchanges (after SaslHandshake v0) go through
:func:`raw_token`.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.config import security as sec
from floe.errors import ErrorCode
from floe.security.sasl import exchange
from floe.security.scram import AuthenticationError
from floe.security.session import Session

log = logging.getLogger("floe.broker.sasl")


def mechanisms(broker: Broker) -> list[str]:
    """The enabled mechanisms, in the configured order."""
    return [m.strip() for m in broker.config[sec.SASL_ENABLED_MECHANISMS].split(",")]


def handle_handshake(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    session = ctx.session
    enabled = mechanisms(broker)
    code, message = ErrorCode.none, ""
    if session is None or not session.listener.sasl or broker.passwords is None:
        code, message = ErrorCode.illegal_sasl_state, "not a SASL listener"
    elif req.mechanism not in enabled:
        code, message = ErrorCode.unsupported_sasl_mechanism, f"mechanism {req.mechanism!r}"
    elif session.authenticated and ctx.api_version == 0:
        code, message = ErrorCode.illegal_sasl_state, "re-authentication needs SaslHandshake v1"
    if code != ErrorCode.none:
        if session is not None and session.listener.sasl:  # a non-SASL one answers, as Kafka
            session.close_after_reply = True
        log.info(
            "sasl.handshake_refused peer=%s mechanism=%s reason=%s",
            ctx.peer, str(req.mechanism)[:64], message,
        )  # fmt: skip
        return build(ctx.response_class, {"error_code": code, "mechanisms": enabled})
    assert session is not None and broker.passwords is not None
    session.begin(req.mechanism, exchange(req.mechanism, broker.passwords), ctx.api_version)
    return build(ctx.response_class, {"error_code": ErrorCode.none, "mechanisms": enabled})


def handle_authenticate(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    session = ctx.session
    if session is None or session.exchange is None:  # a non-SASL listener (Session.refuses)
        return build(
            ctx.response_class,
            {
                "error_code": ErrorCode.illegal_sasl_state,
                "error_message": "not a SASL listener",
                "auth_bytes": b"",
            },
        )
    try:
        answer = _step(broker, session, req.auth_bytes, ctx.peer)
    except AuthenticationError as exc:
        session.close_after_reply = True
        response: Any = build(
            ctx.response_class,
            {"error_code": exc.code, "error_message": str(exc), "auth_bytes": b""},
        )
        return _delayed(broker, response)
    lifetime = broker.config[sec.CONNECTIONS_MAX_REAUTH_MS] if session.exchange is None else 0
    return build(
        ctx.response_class,
        {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": answer,
            "session_lifetime": timedelta(milliseconds=lifetime),
        },
    )


def raw_token(broker: Broker, session: Session, token: bytes, peer: str) -> bytes:
    """The answer to a bare SASL token (after SaslHandshake v0).

    Raises:
        AuthenticationError: the exchange failed (the connection closes).
    """
    return _step(broker, session, token, peer)


async def failure_delay(broker: Broker) -> None:
    """Hold a failed authentication's answer back (``connection.failed.authentication
    .delay.ms``)."""
    await asyncio.sleep(broker.config[sec.FAILED_AUTHENTICATION_DELAY_MS] / 1000)


async def _delayed(broker: Broker, response: Any) -> Any:
    await failure_delay(broker)
    return response


def _step(broker: Broker, session: Session, token: bytes, peer: str) -> bytes:
    """Run the exchange's next step; on its last, authenticate the session.

    Raises:
        AuthenticationError: the exchange failed, or a re-authentication named another
            user; the session's exchange is over either way.
    """
    ex = session.exchange
    assert ex is not None
    mechanism = session.mechanism
    try:
        answer = ex.step(token)
        if ex.done:
            again = session.authenticated
            try:
                session.authenticated_as(ex.user, broker.config[sec.CONNECTIONS_MAX_REAUTH_MS])
            except ValueError as exc:
                raise AuthenticationError(str(exc)) from None
            log.info(
                "sasl.%s peer=%s principal=%s mechanism=%s",
                "reauthenticated" if again else "authenticated",
                peer, session.principal, mechanism,
            )  # fmt: skip
        return answer
    except AuthenticationError as exc:
        session.exchange = None
        log.warning(
            "sasl.failed peer=%s mechanism=%s user=%s reason=%s",
            peer, mechanism, (ex.user or "?")[:64], exc,
        )  # fmt: skip
        raise
