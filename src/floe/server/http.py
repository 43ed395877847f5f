"""An HTTP listener for an ASGI app: uvicorn on the broker's event loop.

Used by the Schema Registry and the admin API, each on its own port.

Ownership: an :class:`HttpServer` is created and started by the composition root once
what its app reads is open, and stopped before that closes. It binds its socket itself
(so a taken port is a plain ``OSError`` at start-up) and never touches signal handlers:
``floe up`` owns SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator
from typing import Protocol

import uvicorn
from starlette.types import ASGIApp

log = logging.getLogger("floe.server.http")


class Background(Protocol):
    """Something a listener stops when it stops."""

    async def stop(self) -> None: ...


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the broker's own handlers stay in place


class HttpServer:
    """Serve ``app`` on ``host:port`` until :meth:`stop`.

    ``name`` prefixes the log events (``<name>.started url=...``, ``<name>.stopped``)
    and names the serving task. With ``tls`` (a server context) it serves HTTPS.
    """

    def __init__(
        self, app: ASGIApp, host: str, port: int, name: str, tls: ssl.SSLContext | None = None
    ) -> None:
        self._config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="off",
            access_log=False,
            log_config=None,
            ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
        )
        self.tls = tls is not None
        self.background: Background | None = None
        """Work that lives as long as the listener (the admin's chart sampler): stopped
        first by :meth:`stop`."""
        self._server = _Server(self._config)
        self.app = app
        self._task: asyncio.Task[None] | None = None
        self.name = name
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and start serving.

        Raises:
            OSError: the port cannot be bound.
        """
        sock = socket.create_server((self.host, self.port))
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()
        log.info("%s.started url=%s", self.name, self.url)

    async def stop(self) -> None:
        """Stop :attr:`background`, finish in-flight requests and close the listener."""
        if self.background is not None:
            await self.background.stop()
        if self._task is None:
            return
        self._server.should_exit = True
        await self._task
        self._task = None
        log.info("%s.stopped", self.name)
