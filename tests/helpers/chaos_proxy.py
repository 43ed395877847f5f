"""The chaos suite's network faults: a small TCP proxy per broker per link (broker to
metadata store, broker to object store) that the test owns, so one link of one broker
can be cut while everything else still talks.

One :class:`ProxyHub` runs one asyncio loop on a daemon thread; it owns every
:class:`Proxy` it made (their listening sockets, connections and pipe tasks) and closes
them all in :meth:`ProxyHub.close`. A proxy listens on a free 127.0.0.1 port and
forwards each connection to its target. Its modes, changed from the test thread:

* ``open``: bytes flow both ways;
* ``cut``: every connection is reset (SO_LINGER 0, so the peer sees ECONNRESET, as
  when a route goes away) and new ones are accepted and reset at once;
* ``stalled``: connections stay open and bytes are read but held back (a peer that
  stopped answering); back to ``open`` they flow again, in order.

Only bytes cross a proxy; it knows nothing of HTTP or gRPC. Every connection it
resets is counted by cause in :attr:`Proxy.resets` (``cut``, or the error of its own
connection to the target), so that a broker's "connection reset by peer" in a run's
logs can be told apart from a fault the test injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections import Counter
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

_T = TypeVar("_T")
_CHUNK = 65536


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with an RST rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    """One listening port forwarding to ``target``; owned by its :class:`ProxyHub`'s
    loop (every attribute is touched on that loop only, except through the hub)."""

    def __init__(self, hub: ProxyHub, name: str, target: tuple[str, int]) -> None:
        self.hub = hub
        self.name = name
        self.target = target
        self.port = 0
        self.mode = "open"
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.connections = 0
        self.resets: Counter[str] = Counter()
        """Connections reset, by cause: ``cut`` or the error reaching the target."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:  # the hub closing: not an error of the proxy
            writer.transport.abort()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "cut":
            self.resets["cut"] += 1
            _reset(writer)
            return
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError as exc:
            self.resets[f"target: {exc.strerror or type(exc).__name__}"] += 1
            _reset(writer)
            return
        pair = (writer, up_writer)
        self._conns.add(pair)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            self._conns.discard(pair)
            for w in pair:
                w.transport.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while True:
            data = await src.read(_CHUNK)
            if not data:
                break
            await self._flowing.wait()
            if self.mode == "cut":
                break
            dst.write(data)
            await dst.drain()
        if self.mode != "cut" and dst.can_write_eof():
            dst.write_eof()
        else:
            dst.transport.abort()

    async def _set(self, mode: str) -> None:
        self.mode = mode
        if mode == "stalled":
            self._flowing.clear()
            return
        self._flowing.set()
        if mode == "cut":
            self.resets["cut"] += len(self._conns)
            for pair in list(self._conns):
                for w in pair:
                    _reset(w)

    def cut(self) -> None:
        """Reset every connection and refuse new ones until :meth:`heal`."""
        self.hub.call(self._set("cut"))

    def stall(self) -> None:
        """Hold every byte back (connections stay open) until :meth:`heal`."""
        self.hub.call(self._set("stalled"))

    def heal(self) -> None:
        """Forward again (held bytes first)."""
        self.hub.call(self._set("open"))

    async def _close(self) -> None:
        await self._set("cut")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class ProxyHub:
    """The loop thread of every proxy of a test: :meth:`proxy` makes one, :meth:`close`
    stops them all and the thread (idempotent)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxies")
        self._thread.daemon = True
        self._thread.start()
        self.proxies: list[Proxy] = []

    def call(self, coro: Coroutine[Any, Any, _T], timeout_s: float = 10.0) -> _T:
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout_s)

    def proxy(self, name: str, target: str) -> Proxy:
        """A new open proxy to ``target`` (``host:port``), listening on a free port."""
        host, _, port = target.rpartition(":")

        async def make() -> Proxy:
            made = Proxy(self, name, (host, int(port)))
            await made._start()
            return made

        made = self.call(make())
        self.proxies.append(made)
        return made

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def close_all() -> None:
            for p in self.proxies:
                await p._close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.call(close_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
