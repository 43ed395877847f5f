"""The admin HTTP API (JSON, FastAPI) over the :class:`~floe.admin.Admin` facade.

Routes live under ``/api/v1``; the OpenAPI document is generated from the handlers'
types at ``/api/v1/openapi.json``. FastAPI's interactive docs pages are off: they load
Swagger UI from a CDN, which offline installs cannot reach (the console will serve its
own assets).

Errors, mapped here and nowhere else: every error body is
``{"error_code": <HTTP status>, "message": "..."}`` — :class:`NotFoundError` is 404,
:class:`BadRequestError` 400 (a bad topic config, a statement that is not read-only),
:class:`ForbiddenError` 403 (changing an internal topic, or what the ACLs do not
allow: :mod:`floe.admin.access`), 401 without credentials, :class:`ConflictError` 409,
:class:`UnavailableError` 503, :class:`QueryTimeoutError` 504,
:class:`OperationFailedError` 500 with its message (a failed maintenance step), an
unknown route 404, a
malformed parameter or body 422, a body larger than ``admin.max.body.bytes`` 413,
anything unexpected 500 with its stack in the log (``admin.request_failed``) and none
in the body.

The resource routes (topics, groups, schemas, table data, SQL) are in
:mod:`floe.admin.routes`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floe import __version__
from floe.admin import (
    Admin,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    OperationFailedError,
    QueryTimeoutError,
    TableStatus,
    UnavailableError,
)
from floe.admin.access import AdminGate, Viewer, viewer
from floe.config import broker as keys
from floe.config import security as sec
from floe.security.acl import AclOperation, ResourceType
from floe.tabletopic.model import MaintenanceResult

log = logging.getLogger("floe.admin.api")
PREFIX = "/api/v1"


@dataclass(frozen=True)
class ErrorBody:
    """Every error response: the HTTP status again, and one line of explanation."""

    error_code: int
    message: str


@dataclass(frozen=True)
class Health:
    """The broker answers (``status`` is always ``ok``) and its version."""

    status: str
    version: str


@dataclass(frozen=True)
class TableList:
    """All table topics, sorted by topic name."""

    tables: list[TableStatus]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status)


class _Unexpected:
    """Answer an unexpected exception with a 500 error body and log its stack once
    (Starlette's own last-resort handler would re-raise it to uvicorn, which logs it
    again without an event name)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            log.error("admin.request_failed path=%s", scope.get("path"), exc_info=exc)
            if not started and scope["type"] == "http":
                await _error(500, f"internal error: {type(exc).__name__}")(scope, receive, send)


class _BodyLimit:
    """Answer 413 to a request body larger than ``limit`` bytes, before any route reads
    it. The body is read (and dropped) to its end, up to ``DRAIN_FACTOR`` times the
    limit, so a client that writes its whole body before reading gets the 413 rather
    than a reset connection; a larger one, or a declared Content-Length that large, is
    answered at once (the server then closes the connection). A body within the limit
    is handed to the app whole."""

    DRAIN_FACTOR = 4

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.DRAIN_FACTOR * self.limit:
            await self._too_large(scope, receive, send)
            return
        body = bytearray()
        seen = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.DRAIN_FACTOR * self.limit:
                break
            if seen <= self.limit:
                body += chunk
            more = bool(message.get("more_body", False))
        if seen > self.limit:
            await self._too_large(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        log.warning("admin.body_too_large path=%s limit=%d", scope.get("path"), self.limit)
        message = f"request body larger than {self.limit} bytes (admin.max.body.bytes)"
        await _error(413, message)(scope, receive, send)


_STATUSES: dict[type[Exception], int] = {
    BadRequestError: 400,
    ForbiddenError: 403,
    ConflictError: 409,
    UnavailableError: 503,
    QueryTimeoutError: 504,
    OperationFailedError: 500,
}


def _handler(status: int) -> Any:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return _error(status, str(exc))

    return handle


def build_app(admin: Admin) -> FastAPI:
    """The ASGI app serving ``admin``."""
    app = FastAPI(
        title="Floe admin API",
        version=__version__,
        description="Status and administration of a Floe broker.",
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    config = admin.broker.config
    app.add_middleware(
        AdminGate,
        config=config,
        passwords=admin.broker.passwords,
        authorizer=admin.broker.authorizer,
        tls=config[sec.ADMIN_SSL_ENABLE],
    )
    app.add_middleware(_Unexpected)
    app.add_middleware(_BodyLimit, limit=config[keys.ADMIN_MAX_BODY_BYTES])
    who_dep = Depends(viewer)
    topic_type = ResourceType.TOPIC
    not_found: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorBody, "description": "not a table topic"}
    }

    @app.exception_handler(NotFoundError)
    async def _not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, str(exc))

    for error, status in _STATUSES.items():
        app.add_exception_handler(error, _handler(status))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: Exception) -> JSONResponse:
        return _error(422, " ".join(str(exc).split()))

    @app.get(f"{PREFIX}/health", tags=["broker"])
    async def health() -> Health:
        """Liveness: answers as long as the broker's event loop runs."""
        return Health("ok", __version__)

    @app.get(f"{PREFIX}/tables", tags=["table topics"])
    async def tables(who: Viewer = who_dep) -> TableList:
        """The status of every table topic (and of disabled ones that have a table)."""
        listed = await admin.tables.status()
        return TableList([t for t in listed if who.may(AclOperation.DESCRIBE, topic_type, t.topic)])

    @app.get(f"{PREFIX}/tables/{{topic}}", tags=["table topics"], responses=not_found)
    async def table(topic: str, who: Viewer = who_dep) -> TableStatus:
        """The status of one table topic; 404 when the topic is not a table topic."""
        who.require(AclOperation.DESCRIBE, topic_type, topic)
        return (await admin.tables.status(topic))[0]

    @app.post(f"{PREFIX}/tables/{{topic}}/maintenance", tags=["table topics"])
    async def maintain(topic: str, who: Viewer = who_dep) -> MaintenanceResult:
        """Run the table's maintenance now (compaction, snapshot expiry, orphan files,
        manifests; after a run in progress; ALTER on the topic) and answer what it did:
        404 when the topic is not a table topic, 409 when it is disabled or its table
        does not exist yet, 500 with the reason when a step failed (the steps before it
        landed)."""
        who.require(AclOperation.ALTER, topic_type, topic)
        return await admin.tables.maintain(topic)

    from floe.admin import routes

    errors: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorBody, "description": desc}
        for status, desc in (
            (400, "invalid input (the message says which and why)"),
            (401, "no credentials, or wrong ones (admin.authentication)"),
            (403, "refused: not allowed by the ACLs, or an internal topic"),
            (404, "no such topic, group, subject or table"),
            (413, "request body larger than admin.max.body.bytes"),
            (409, "already exists"),
        )
    }
    routes.register(app, admin, errors)

    return app
