"""The registry's HTTP listener: :class:`floe.server.http.HttpServer` named ``registry``
(log events ``registry.started url=...`` and ``registry.stopped``)."""

from __future__ import annotations

import ssl

from starlette.types import ASGIApp

from floe.server.http import HttpServer


class RegistryServer(HttpServer):
    """Serve the registry's ``app`` on ``host:port`` (HTTPS with ``tls``) until
    :meth:`stop`."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(app, host, port, name="registry", tls=tls)
