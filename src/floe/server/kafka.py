"""The Kafka protocol listener.

Ownership: one :class:`KafkaServer` per process, owned by the event loop; started by
the composition root and stopped by it on SIGINT/SIGTERM: it stops accepting, lets
every connection finish the replies it already owes (up to a grace period), then
closes them.
"""

from __future__ import annotations

import asyncio
import logging
import os

from floe.broker.core import Broker
from floe.server.connection import Connection

log = logging.getLogger("floe.server.kafka")

STREAM_LIMIT = 1024 * 1024


class KafkaServer:
    def __init__(self, broker: Broker, host: str, port: int, max_request_bytes: int) -> None:
        self._broker = broker
        self._host = host
        self._port = port
        self._max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: dict[Connection, asyncio.Task[None]] = {}

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and listen.

        Raises:
            OSError: the address cannot be bound; the message names it.
        """
        try:
            self._server = await asyncio.start_server(
                self._accept, self._host, self._port, limit=STREAM_LIMIT, reuse_address=True
            )
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise OSError(
                exc.errno, f"cannot listen on {self._host}:{self._port}: {reason}"
            ) from None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self._broker, reader, writer, self._max_request_bytes)
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn] = task
        self._broker.stats.connections += 1
        try:
            await conn.serve()
        except Exception:
            log.exception("connection.failed peer=%s", conn.peer)
        finally:
            self._broker.stats.connections -= 1
            self._connections.pop(conn, None)

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, drain connections for up to ``grace_s``, then close them."""
        if self._server is None:
            return
        self._server.close()
        for conn in list(self._connections):
            conn.stop_reading()
        tasks = list(self._connections.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("server.shutdown_forced connections=%d", len(pending))
                await asyncio.wait(pending)
        await self._server.wait_closed()
        self._server = None
