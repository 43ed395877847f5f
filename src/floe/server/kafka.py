"""The Kafka protocol listener.

Ownership: one :class:`KafkaServer` per process, owned by the event loop; started by
the composition root and stopped by it on SIGINT/SIGTERM: it stops accepting, lets
every connection finish the replies it already owes (up to a grace period), then
closes them. It also owns the connection counts (``max.connections``,
``max.connections.per.ip``), the reaper task that closes connections past their
timeouts, and the one worker thread that decodes (and answers) request frames too big
in items to handle on the loop; all three end with :meth:`stop`.

Beyond ``max.connections`` a new connection is closed at once (Kafka instead leaves it
in the listen backlog until a slot frees): the client sees a disconnect and retries
with its reconnect backoff. Beyond ``max.connections.per.ip`` it is closed, as Kafka
does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from floe.broker.core import Broker
from floe.config import broker as keys
from floe.config.security import ListenerSpec
from floe.security.session import Session
from floe.security.tls import NoMatchingRuleError, PrincipalMapper, peer_principal
from floe.server.connection import Connection, Limits

log = logging.getLogger("floe.server.kafka")

STREAM_LIMIT = 1024 * 1024
LISTEN_BACKLOG = 100
"""The listen backlog of a socket bound ahead of serving (:func:`listen`; asyncio's
own default)."""
REAP_INTERVAL_S = 1.0
"""How often the reaper looks at every connection (sooner when a timeout is shorter)."""
REJECT_LOG_INTERVAL_S = 10.0
"""At most one ``connection.rejected`` line per reason in this time (a flood would
otherwise flood the log); the line says how many were rejected since the last."""


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (0: any free port) and listening, that a
    :class:`KafkaServer` serves later (:meth:`KafkaServer.start`): a broker that other
    brokers name in their Metadata before it answers (a standby or member, from its
    registration on) takes connections from then on, and the clients wait in its backlog
    instead of being refused (librdkafka and kafka-python double their reconnect
    backoff at each refusal).

    Raises:
        OSError: the address cannot be bound; the message names it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {reason}") from None
    sock.setblocking(False)
    return sock


class KafkaServer:
    def __init__(
        self,
        broker: Broker,
        host: str,
        port: int,
        max_request_bytes: int,
        *,
        listener: ListenerSpec | None = None,
        tls: ssl.SSLContext | None = None,
        mapper: PrincipalMapper | None = None,
    ) -> None:
        """Limits and timeouts other than ``max_request_bytes`` come from the broker's
        configuration (``Limits.from_config``). ``listener``: its name and security
        protocol (None: PLAINTEXT); ``tls``: the server context of an SSL or SASL_SSL
        listener; ``mapper``: certificate subjects to user names (SSL listeners)."""
        config = broker.config
        self._broker = broker
        self._host = host
        self._port = port
        self._listener = listener or ListenerSpec("PLAINTEXT", "PLAINTEXT", host, port, host, 0)
        self._tls = tls
        self._mapper = mapper or PrincipalMapper()
        self._limits = Limits.from_config(config, max_request_bytes)
        self._max_connections = config[keys.MAX_CONNECTIONS]
        self._max_per_ip = config[keys.MAX_CONNECTIONS_PER_IP]
        self._server: asyncio.Server | None = None
        self._connections: dict[Connection, asyncio.Task[None]] = {}
        self._per_ip: Counter[str] = Counter()
        self._reaper: asyncio.Task[None] | None = None
        self._worker: ThreadPoolExecutor | None = None
        self.closed: Counter[str] = Counter()
        """Connections refused or closed by the server, per reason (``max_connections``,
        ``max_connections_per_ip``, ``idle``, ``read_timeout``, ``write_timeout``)."""
        self._unlogged: Counter[str] = Counter()
        self._logged_at: dict[str, float] = {}

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, listening: socket.socket | None = None) -> None:
        """Bind and listen, or serve the ``listening`` socket another server kept
        (:meth:`stop` with ``keep_listening``; this server owns it from now on).

        Raises:
            OSError: the address cannot be bound; the message names it.
        """
        handshake_s = self._limits.read_timeout_s if self._tls else None
        try:
            if listening is not None:
                self._server = await asyncio.start_server(
                    self._accept, sock=listening, limit=STREAM_LIMIT, ssl=self._tls,
                    ssl_handshake_timeout=handshake_s,
                )  # fmt: skip
            else:
                self._server = await asyncio.start_server(
                    self._accept, self._host, self._port, limit=STREAM_LIMIT,
                    reuse_address=True, ssl=self._tls, ssl_handshake_timeout=handshake_s,
                )  # fmt: skip
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise OSError(
                exc.errno, f"cannot listen on {self._host}:{self._port}: {reason}"
            ) from None
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="floe-heavy-requests")
        self._reaper = asyncio.create_task(self._reap(), name="kafka-connection-reaper")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            session = self._session(writer)
        except NoMatchingRuleError as exc:  # Kafka fails the authentication here too
            log.warning(
                "connection.principal_unmapped listener=%s error=%s", self._listener.name, exc
            )
            writer.close()
            return
        conn = Connection(self._broker, reader, writer, self._limits, self._worker, session=session)
        refused = None
        if len(self._connections) >= self._max_connections:
            refused = "max_connections"
        elif self._per_ip[conn.host] >= self._max_per_ip:
            refused = "max_connections_per_ip"
        if refused is not None:
            self._reject(refused, conn)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn] = task
        self._per_ip[conn.host] += 1
        self._broker.stats.connections += 1
        try:
            await conn.serve()
        except Exception:
            log.exception("connection.failed peer=%s", conn.peer)
        finally:
            self._broker.stats.connections -= 1
            self._connections.pop(conn, None)
            self._per_ip[conn.host] -= 1
            if not self._per_ip[conn.host]:
                del self._per_ip[conn.host]

    def _session(self, writer: asyncio.StreamWriter) -> Session:
        """A new connection's session: on an SSL listener its principal is the client
        certificate's mapped subject (ANONYMOUS without one); SASL listeners start
        unauthenticated."""
        listener = self._listener
        if listener.protocol == "SSL":
            name = peer_principal(writer.get_extra_info("ssl_object"), self._mapper)
            if name is not None:
                return Session(listener, f"User:{name}")
        return Session(listener)

    def _reject(self, reason: str, conn: Connection) -> None:
        self.closed[reason] += 1
        self._unlogged[reason] += 1
        now = time.monotonic()
        if now - self._logged_at.get(reason, -REJECT_LOG_INTERVAL_S) < REJECT_LOG_INTERVAL_S:
            return
        self._logged_at[reason] = now
        log.warning(
            "connection.rejected reason=%s peer=%s open=%d from_ip=%d max=%d max_per_ip=%d "
            "rejected=%d",
            reason,
            conn.peer,
            len(self._connections),
            self._per_ip[conn.host],
            self._max_connections,
            self._max_per_ip,
            self._unlogged.pop(reason),
        )

    async def _reap(self) -> None:
        """Close connections past a timeout (Connection.expired), forever."""
        limits = self._limits
        shortest = min(
            limits.read_timeout_s,
            limits.write_timeout_s,
            limits.idle_timeout_s or REAP_INTERVAL_S,
        )
        interval = min(REAP_INTERVAL_S, max(shortest / 4, 0.01))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._connections):
                reason = conn.expired(now)
                if reason is None:
                    continue
                self.closed[reason] += 1
                log.info("connection.closed reason=%s peer=%s", reason, conn.peer)
                conn.close()

    async def stop(
        self, grace_s: float = 10.0, *, keep_listening: bool = False
    ) -> socket.socket | None:
        """Stop accepting, drain connections for up to ``grace_s``, then close them.

        With ``keep_listening`` the listening socket stays open and is returned (the
        caller owns it): a client that connects meanwhile waits in its backlog, until
        the next server starts on it (:meth:`start`), instead of being refused (a refused
        client doubles its reconnect backoff: librdkafka, kafka-python).
        """
        if self._server is None:
            return None
        kept = None
        if keep_listening:
            fd = os.dup(self._server.sockets[0].fileno())
            kept = socket.socket(fileno=fd)
        self._server.close()
        if self._reaper is not None:
            self._reaper.cancel()
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
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
            self._worker = None
        return kept
