"""Who may use the admin API and console, and how they prove it (docs/security.md).

:class:`AdminGate` is ASGI middleware in front of every admin route and console page:

* **Host and Origin checks, always** (against DNS rebinding, and cross-site requests
  from a browser): a ``Host`` header naming a host outside ``admin.allowed.hosts`` (and
  the always-allowed local names) is refused with 403, as is a state-changing request
  (POST, PUT, PATCH, DELETE) whose ``Origin`` is not this server, or that a browser
  marks ``Sec-Fetch-Site: cross-site``.
* **Authentication** with ``admin.authentication=basic``: a console user logs in at
  ``/login`` with a SCRAM user's name and password and gets a session cookie
  (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over HTTPS); an API client sends HTTP
  Basic credentials with each request. A state-changing request that rides on the
  cookie must also carry the session's CSRF token (``X-CSRF-Token``, which the console's
  script sends, logout included). Without credentials an API route
  answers 401 and a console page redirects to the login page.
* **Authorization**: the gate puts a :class:`Viewer` (the principal and what the ACLs
  let it do) in the request's state; every route and page asks it
  (:func:`viewer`, :meth:`Viewer.require`, :meth:`Viewer.may`) for the operation Kafka
  would check, and listings leave out what the principal may not describe.

Sessions live in the broker's memory: a restart logs everyone out. A session ends at
``admin.session.timeout.ms``, at logout, and the moment its user's credential changes or
the user is deleted.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import socket
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass
from http.cookies import SimpleCookie

import orjson
from fastapi import Request
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from floe.admin.errors import ForbiddenError
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config import security as sec
from floe.registry.api.authz import parse_basic
from floe.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    Authorizer,
    ResourceType,
    parse_super_users,
)
from floe.security.sasl import PasswordCheck, strongest
from floe.security.session import ANONYMOUS

log = logging.getLogger("floe.admin.access")

COOKIE = "floe_session"
CSRF_HEADER = "x-csrf-token"
CONSOLE_HEADER = "x-floe-console"
"""Sent by the console's script: a 401 then carries no Basic challenge (the browser would
open its own password dialog instead of the console's login page)."""
REALM = "floe-admin"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PUBLIC = ("/api/v1/health", "/static/")
"""Answered to anyone (the Host check still applies, but for health)."""
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Viewer:
    """One request's principal and what it may do. Without an authorizer everything is
    allowed (as Kafka without one)."""

    principal: str
    host: str
    authorizer: Authorizer | None
    sql_allowed: bool
    user: str | None
    """The logged-in user (None: authentication is off)."""
    csrf: str | None = None
    """The session's CSRF token, for the console's pages (None: no session)."""

    def may(self, op: AclOperation, resource: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, op, resource, name)

    def can(self, op: str, resource: str, name: str) -> bool:
        """:meth:`may` by names, for templates (``viewer.can('DELETE', 'TOPIC', t)``)."""
        return self.may(AclOperation[op], ResourceType[resource], name)

    def require(self, op: AclOperation, resource: ResourceType, name: str) -> None:
        """Raises: ForbiddenError (403): the ACLs do not allow ``op`` on the resource."""
        if not self.may(op, resource, name):
            log.debug(
                "admin.denied principal=%s operation=%s resource=%s:%s",
                self.principal, op.name, resource.name, name,
            )  # fmt: skip
            what = (
                "the cluster" if resource is ResourceType.CLUSTER else f"{resource.name} {name!r}"
            )
            raise ForbiddenError(f"{self.principal} may not {op.name} {what}")

    def require_sql(self) -> None:
        """Raises: ForbiddenError (403): SQL is not granted (``admin.sql.principals``)."""
        if not self.sql_allowed:
            raise ForbiddenError(
                f"{self.principal} may not run SQL (admin.sql.principals grants it)"
            )


def viewer(request: Request) -> Viewer:
    """The request's :class:`Viewer` (a FastAPI dependency; the gate set it)."""
    found = getattr(request.state, "viewer", None)
    if not isinstance(found, Viewer):  # pragma: no cover - the gate runs first
        raise RuntimeError("the admin gate did not run")
    return found


@dataclass
class _Session:
    user: str
    stored_key: bytes
    """The credential the user logged in with: another one ends the session."""
    csrf: str
    expires: float


class AdminGate:
    """ASGI middleware (module docstring): Host/Origin checks, authentication, the
    login and logout endpoints, and the request's :class:`Viewer`.

    Ownership: built once by the composition root with the admin app; holds references
    to the broker's password check and authorizer (read on the event loop) and owns the
    sessions. Nothing to clean up.
    """

    def __init__(
        self,
        app: ASGIApp,
        config: BrokerConfig,
        passwords: PasswordCheck | None,
        authorizer: Authorizer | None,
        tls: bool,
    ) -> None:
        self.app = app
        self.passwords = passwords if config[sec.ADMIN_AUTHENTICATION] == "basic" else None
        self.authorizer = authorizer
        self.tls = tls
        self.timeout_s = config[sec.ADMIN_SESSION_TIMEOUT_MS] / 1000
        self.fail_delay_s = config[sec.FAILED_AUTHENTICATION_DELAY_MS] / 1000
        # super users (the authorizer's: super.users and the bootstrap user) always may
        supers = authorizer.super_users if authorizer is not None else frozenset()
        self.sql_principals = supers | parse_super_users(config[sec.ADMIN_SQL_PRINCIPALS])
        self.hosts = allowed_hosts(config)
        self.sessions: OrderedDict[str, _Session] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path, method = scope["path"], scope["method"]
        refusal = self._refusal(headers, path, method)
        if refusal is not None:
            log.info(
                "admin.refused method=%s path=%s host=%s origin=%s reason=%s",
                method, path, headers.get("host", "")[:100], headers.get("origin", "")[:100],
                refusal,
            )  # fmt: skip
            await _json(403, refusal)(scope, receive, send)
            return
        if path == "/login":
            await self._login(scope, receive, send)
            return
        if path.startswith(PUBLIC):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host = client[0] if client else ""
        user: str | None = None
        csrf: str | None = None
        if self.passwords is not None:
            session_id, session = self._session(headers)
            if session is not None:
                if method in UNSAFE and not hmac.compare_digest(
                    headers.get(CSRF_HEADER, ""), session.csrf
                ):
                    await _json(403, "missing or wrong CSRF token")(scope, receive, send)
                    return
                user, csrf = session.user, session.csrf
                if path == "/logout" and method == "POST":
                    self.sessions.pop(session_id, None)
                    log.info("admin.logout user=%s", user)
                    await _logged_out()(scope, receive, send)
                    return
            else:
                creds = parse_basic(headers.get("authorization"))
                if creds is not None and await self.passwords.check_async(*creds):
                    user = creds[0]
                else:
                    await self._unauthenticated(scope, receive, send, headers, creds)
                    return
        principal = ANONYMOUS if user is None else f"User:{user}"
        sql = self.authorizer is None or principal in self.sql_principals
        who = Viewer(principal, host, self.authorizer, sql, user, csrf)
        if path == "/metrics" and not who.may(
            AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
        ):  # Prometheus text names every topic and group
            await _json(403, f"{principal} may not DESCRIBE the cluster")(scope, receive, send)
            return
        scope.setdefault("state", {})["viewer"] = who
        await self.app(scope, receive, send)

    # -- checks --------------------------------------------------------------------
    def _refusal(self, headers: Headers, path: str, method: str) -> str | None:
        """Why the Host or Origin check refuses the request, or None."""
        host = headers.get("host", "")
        if path != PUBLIC[0] and not self._host_allowed(host):
            return f"host {host!r} is not allowed (admin.allowed.hosts)"
        if method not in UNSAFE:
            return None
        if headers.get("sec-fetch-site") == "cross-site":
            return "a cross-site request"
        origin = headers.get("origin")
        if origin is not None:
            parts = urllib.parse.urlsplit(origin)
            if parts.netloc.lower() != host.lower() or not self._host_allowed(parts.netloc):
                return f"origin {origin!r} is not this server"
        return None

    def _host_allowed(self, host: str) -> bool:
        if self.hosts is None:
            return True
        name = urllib.parse.urlsplit(f"//{host}").hostname if host else None
        return name is not None and name.lower() in self.hosts

    def _session(self, headers: Headers) -> tuple[str, _Session | None]:
        """The cookie's session when it is live and its user's credential unchanged."""
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no session
            return "", None
        morsel = cookie.get(COOKIE)
        if morsel is None:
            return "", None
        session = self.sessions.get(morsel.value)
        if session is None:
            return morsel.value, None
        assert self.passwords is not None
        cred = strongest(self.passwords.users, session.user)
        if (
            session.expires < time.monotonic()
            or cred is None
            or not hmac.compare_digest(cred.stored_key, session.stored_key)
        ):
            self.sessions.pop(morsel.value, None)
            return morsel.value, None
        return morsel.value, session

    async def _unauthenticated(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: Headers,
        creds: tuple[str, str] | None,
    ) -> None:
        path = scope["path"]
        if creds is not None:
            log.info("admin.unauthenticated user=%s path=%s", creds[0][:64], path)
            await asyncio.sleep(self.fail_delay_s)
        if path.startswith("/api/") or path == "/metrics":
            challenge = {} if CONSOLE_HEADER in headers else _challenge()
            await _json(401, "authentication required", challenge)(scope, receive, send)
            return
        target = path + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
        where = "/login?" + urllib.parse.urlencode({"next": target})
        await RedirectResponse(where, 303)(scope, receive, send)

    # -- login ---------------------------------------------------------------------
    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        target = _safe_next(request.query_params.get("next", "/"))
        if self.passwords is None:
            await RedirectResponse(target, 303)(scope, receive, send)
            return
        if request.method == "GET":
            await _login_page(target)(scope, receive, send)
            return
        if request.method != "POST":
            await _json(405, "method not allowed")(scope, receive, send)
            return
        form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
        user, password = form.get("user", [""])[0], form.get("password", [""])[0]
        target = _safe_next(form.get("next", [target])[0])
        if not user or not await self.passwords.check_async(user, password):
            log.info("admin.login_failed user=%s", user[:64])
            await asyncio.sleep(self.fail_delay_s)
            await _login_page(target, "wrong user or password", 401)(scope, receive, send)
            return
        cred = strongest(self.passwords.users, user)
        assert cred is not None  # the password just matched it
        session_id = secrets.token_urlsafe(32)
        self.sessions[session_id] = _Session(
            user, cred.stored_key, secrets.token_urlsafe(32), time.monotonic() + self.timeout_s
        )
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        log.info("admin.login user=%s sessions=%d", user, len(self.sessions))
        response = RedirectResponse(target, 303)
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=int(self.timeout_s),
            path="/",
            httponly=True,
            samesite="strict",
            secure=self.tls,
        )
        await response(scope, receive, send)


def allowed_hosts(config: BrokerConfig) -> frozenset[str] | None:
    """The host names the gate answers to (lower case), None for any
    (``admin.allowed.hosts`` has ``*``)."""
    extra = {h.strip().lower() for h in config[sec.ADMIN_ALLOWED_HOSTS].split(",") if h.strip()}
    if "*" in extra:
        return None
    names = set(LOCAL_HOSTS) | extra | {socket.gethostname().lower()}
    for key in (keys.ADMIN_HOST, keys.ADVERTISED_HOST, keys.HOST):
        value = str(config[key]).strip("[]").lower()
        if value and value not in ("0.0.0.0", "::"):
            names.add(value)
    return frozenset(names)


def _safe_next(target: str) -> str:
    """A redirect target on this server only (``/path``, never ``//host`` or a URL)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _challenge() -> dict[str, str]:
    return {"WWW-Authenticate": f'Basic realm="{REALM}"'}


def _json(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps({"error_code": status, "message": message})
    return Response(body, status, headers=headers, media_type="application/json")


def _logged_out() -> Response:
    response = RedirectResponse("/login", 303)
    response.delete_cookie(COOKIE, path="/")
    return response


_LOGIN = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Log in · Floe console</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/console.css"></head>
<body data-page="login"><main class="login">
<h1>Floe</h1>
{error}
<form method="post" action="/login">
<input type="hidden" name="next" value="{next}">
<label>User <input name="user" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"
required></label>
<button type="submit">Log in</button>
</form></main></body></html>
"""


def _login_page(target: str, error: str = "", status: int = 200) -> Response:
    import html

    shown = f'<p class="error" id="login-error">{html.escape(error)}</p>' if error else ""
    body = _LOGIN.format(error=shown, next=html.escape(target, quote=True))
    return PlainTextResponse(
        body,
        status,
        media_type="text/html",
        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"},
    )
