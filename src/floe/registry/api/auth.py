"""The registry's authentication and authorization, as ASGI middleware in front of the
routes (``registry.authentication``, ``authorizer.enable``; docs/security.md).

With ``basic``, every request but ``GET /`` carries ``Authorization: Basic ...`` checked
against the SCRAM users (the Kafka users); a missing or wrong credential answers 401
with ``WWW-Authenticate`` and Confluent's body. With an authorizer, the principal
(``User:<name>``, or ``User:ANONYMOUS`` without authentication) is checked as
:mod:`floe.registry.api.authz` says: a refusal answers 403 (error code 40301) before the
route runs, and a listing of subjects is filtered to the topics the principal may
DESCRIBE.

Refusals are logged at DEBUG (``registry.denied``, ``registry.unauthenticated``) with
the principal or user, never a password: a client retrying must not flood the log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floe.registry.api.authz import (
    Listing,
    Requirement,
    denied_message,
    parse_basic,
    requirement,
    topic_of,
)
from floe.security.acl import AclOperation, Authorizer, ResourceType
from floe.security.session import ANONYMOUS

log = logging.getLogger("floe.registry.auth")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
REALM = "floe-registry"
UNAUTHORIZED = 401
"""Confluent's error code (and status) for a missing or wrong credential."""
FORBIDDEN = 40301
"""Confluent's error code for 'User is denied operation ...' (status 403)."""

Verify = Callable[[str, str], Awaitable[bool]]
"""(user, password) -> whether the password is the user's
(:meth:`floe.security.sasl.PasswordCheck.check_async`)."""


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps({"error_code": code, "message": message})
    return Response(body, status, headers=headers, media_type=CONTENT_TYPE)


def _name(member: AclOperation | ResourceType | None) -> str:
    return "-" if member is None else member.name


def unauthorized() -> Response:
    """The 401 answer: Confluent's body and the Basic challenge."""
    challenge = {"WWW-Authenticate": f'Basic realm="{REALM}"'}
    return _error(401, UNAUTHORIZED, "Unauthorized", challenge)


class RegistryAuth:
    """ASGI middleware: authenticate (``verify``, None: everyone is ``User:ANONYMOUS``),
    then authorize (``authorizer``, None: everything is allowed) each HTTP request.

    Ownership: built once by the composition root with the app; holds only references
    to the broker's users (through ``verify``) and authorizer, read on the event loop
    like the Kafka handlers read them. Nothing to clean up.
    """

    def __init__(self, app: ASGIApp, verify: Verify | None, authorizer: Authorizer | None) -> None:
        self.app = app
        self.verify = verify
        self.authorizer = authorizer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        req = requirement(scope["method"], scope["path"])
        if req.rule.public:
            await self.app(scope, receive, send)
            return
        principal = ANONYMOUS
        if self.verify is not None:
            creds = parse_basic(Headers(scope=scope).get("authorization"))
            if creds is None or not await self.verify(*creds):
                log.debug(
                    "registry.unauthenticated user=%s method=%s path=%s",
                    creds[0] if creds else "", scope["method"], scope["path"],
                )  # fmt: skip
                await unauthorized()(scope, receive, send)
                return
            principal = f"User:{creds[0]}"
        if self.authorizer is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host = client[0] if client else ""
        if not self._allowed(req, principal, host):
            log.debug(
                "registry.denied principal=%s method=%s path=%s operation=%s resource=%s:%s",
                principal, scope["method"], scope["path"], _name(req.rule.operation),
                _name(req.resource_type), req.name,
            )  # fmt: skip
            await _error(403, FORBIDDEN, denied_message(req))(scope, receive, send)
            return
        if req.rule.listing is not None:
            await self._filtered(scope, receive, send, req, who=(principal, host))
            return
        await self.app(scope, receive, send)

    def _allowed(self, req: Requirement, principal: str, host: str) -> bool:
        """Whether the rule's ACL check (if it has one) passes."""
        op, resource_type = req.rule.operation, req.resource_type
        if self.authorizer is None or op is None or resource_type is None:
            return True
        return self.authorizer.authorize(principal, host, op, resource_type, req.name)

    async def _filtered(
        self, scope: Scope, receive: Receive, send: Send, req: Requirement, *,
        who: tuple[str, str],
    ) -> None:  # fmt: skip
        """Run the route, then send its listing with the subjects ``who`` (principal,
        host) may not DESCRIBE left out (an error answer goes out as it is)."""
        assert self.authorizer is not None and req.rule.listing is not None
        principal, host = who
        authorizer, listing = self.authorizer, req.rule.listing
        start: Message | None = None
        chunks: list[bytes] = []

        def visible(subject: Any) -> bool:
            return isinstance(subject, str) and authorizer.authorize(
                principal, host, AclOperation.DESCRIBE, ResourceType.TOPIC, topic_of(subject)
            )

        async def buffering(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            assert start is not None
            body = b"".join(chunks)
            if start["status"] == 200:
                items = orjson.loads(body)
                if listing is Listing.NAMES:
                    items = [s for s in items if visible(s)]
                else:
                    items = [o for o in items if visible(o.get("subject"))]
                body = orjson.dumps(items)
                headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                start = {**start, "headers": headers}
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, buffering)
