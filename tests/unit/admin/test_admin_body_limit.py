"""The admin API's body limit (``admin.max.body.bytes``) as an ASGI middleware: driven
with the ASGI messages uvicorn sends, around a real app that echoes what it received."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from floe.admin.api import _BodyLimit

LIMIT = 1024


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body as a route would, answers 200 with its length."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": json.dumps({"got": len(body)}).encode()})


def call(chunks: list[bytes], content_length: int | None = None) -> tuple[int, Any, int]:
    """(status, JSON body, chunks the middleware read) for one request."""
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/api/v1/sql", "headers": headers}
    pending = list(chunks)
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if not pending:
            return {"type": "http.disconnect"}
        read += 1
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(_BodyLimit(echo, LIMIT)(scope, receive, send))
    status = sent[0]["status"]
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    return status, body, read


def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    assert call([b"x" * 600, b"y" * 424]) == (200, {"got": LIMIT}, 2)
    assert call([b""]) == (200, {"got": 0}, 1)


def test_a_body_over_the_limit_is_413_with_the_error_body() -> None:
    status, body, read = call([b"x" * 600, b"y" * 600])
    assert status == 413
    assert body == {
        "error_code": 413,
        "message": f"request body larger than {LIMIT} bytes (admin.max.body.bytes)",
    }
    assert read == 2  # read to its end: the client gets the answer, not a reset


def test_a_huge_body_is_not_read_to_its_end() -> None:
    chunks = [b"x" * LIMIT] * 100
    status, _, read = call(chunks)
    assert status == 413 and read == _BodyLimit.DRAIN_FACTOR + 1


def test_a_huge_declared_length_is_answered_without_reading() -> None:
    status, body, read = call([b"{"], content_length=10**9)
    assert (status, body["error_code"], read) == (413, 413, 0)


def test_other_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    async def nothing() -> Message:
        return {}

    async def drop(message: Message) -> None:
        pass

    asyncio.run(_BodyLimit(app, LIMIT)({"type": "lifespan"}, nothing, drop))
    assert seen == ["lifespan"]
