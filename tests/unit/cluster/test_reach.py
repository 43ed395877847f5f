"""Which brokers refuse connections (floe.cluster.reach), against real TCP listeners on
127.0.0.1: a listener that dies (its socket and its connections closed, as the kernel
does for a killed process) is refusing within moments; one that listens again, or
leaves the view, is not; a connection attempt that fails otherwise marks nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import pytest

from floe.cluster.interface import BrokerInfo
from floe.cluster.reach import Reach, recycle_s

WAIT_S = 5.0


class Listener:
    """A Kafka port that takes connections and never answers, until :meth:`die`."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self.accepted = 0
        self._conns: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        async def hold(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self._conns.append(w)

        self.server = await asyncio.start_server(hold, "127.0.0.1", self.port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    async def die(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self._conns:
            w.transport.abort()
        self._conns.clear()
        await self.server.wait_closed()


async def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def reaching(
    view: list[BrokerInfo], recycle: float = 60.0, mark_for: float = 60.0
) -> AsyncIterator[Reach]:
    reach = Reach(1, lambda: view, recycle_after_s=recycle, mark_for_s=mark_for)
    task = asyncio.create_task(reach.run())
    try:
        yield reach
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_broker_whose_port_dies_is_refusing_until_it_listens_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "floe.cluster.membership")
    asyncio.run(_dies_then_listens(caplog))


async def _dies_then_listens(caplog: pytest.LogCaptureFixture) -> None:
    peer = Listener()
    await peer.start()
    view = [BrokerInfo(1, "127.0.0.1", 1), BrokerInfo(2, "127.0.0.1", peer.port)]
    async with reaching(view) as reach:
        await until("the peer is watched", lambda: peer.accepted == 1)
        assert reach.refusing() == frozenset()  # myself (id 1) never watched
        await peer.die()
        await until("the dead peer is refusing", lambda: reach.refusing() == {2})
        assert "cluster.broker_refuses broker=2" in caplog.text
        await peer.start()  # the same port: a restart
        await until("the peer answers again", lambda: reach.refusing() == frozenset())
        assert "cluster.broker_named_again broker=2" in caplog.text
    await peer.die()


def test_a_broker_that_leaves_the_view_is_no_longer_refusing() -> None:
    asyncio.run(_a_broker_that_leaves_the_view_is_no_longer_refusing())


async def _a_broker_that_leaves_the_view_is_no_longer_refusing() -> None:
    peer = Listener()
    await peer.start()
    view = [BrokerInfo(2, "127.0.0.1", peer.port)]
    async with reaching(view) as reach:
        await until("the peer is watched", lambda: peer.accepted == 1)
        await peer.die()
        await until("the dead peer is refusing", lambda: reach.refusing() == {2})
        view.clear()  # its lease lapsed: the view alone says it is gone
        await until("forgotten", lambda: reach.refusing() == frozenset())


def test_a_broker_still_registered_a_session_timeout_after_it_began_refusing_is_named_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Alive, cut off from this broker by a firewall that rejects: hidden from its
    clients for at most the session timeout, then named again (a dead one's lease
    would have lapsed), and not hidden again until it took a connection from here."""
    caplog.set_level(logging.INFO, "floe.cluster.membership")
    asyncio.run(_refusing_for_a_session_timeout(caplog))


async def _refusing_for_a_session_timeout(caplog: pytest.LogCaptureFixture) -> None:
    peer = Listener()
    await peer.start()
    async with reaching([BrokerInfo(2, "127.0.0.1", peer.port)], mark_for=0.5) as reach:
        await until("the peer is watched", lambda: peer.accepted == 1)
        await peer.die()
        await until("the peer is refusing", lambda: reach.refusing() == {2})
        await until("named again", lambda: reach.refusing() == frozenset())
        assert "reason=still registered 0.5 s later" in caplog.text
        await asyncio.sleep(1.0)  # still refused, never reached since: not hidden again
        assert reach.refusing() == frozenset()
        assert caplog.text.count("cluster.broker_refuses broker=2") == 1


def test_a_broker_never_reached_is_not_hidden() -> None:
    """The first attempts refused, or failing otherwise (a firewall between brokers, an
    address this broker cannot route): nothing is known of the broker, nothing marked."""
    asyncio.run(_a_broker_never_reached_is_not_hidden())


async def _a_broker_never_reached_is_not_hidden() -> None:
    closed = Listener()
    await closed.start()
    await closed.die()  # a port nothing listens on: refused
    # TEST-NET-1 (RFC 5737): unroutable (times out, unreachable, or a firewall's reject)
    view = [BrokerInfo(2, "127.0.0.1", closed.port), BrokerInfo(3, "192.0.2.1", 9092)]
    async with reaching(view) as reach:
        await asyncio.sleep(2.5)
        assert reach.refusing() == frozenset()


def test_the_watching_connection_is_opened_again_before_the_peer_could_close_it() -> None:
    asyncio.run(_the_watching_connection_is_opened_again_before_the_peer_could_close_it())


async def _the_watching_connection_is_opened_again_before_the_peer_could_close_it() -> None:
    peer = Listener()
    await peer.start()
    async with reaching([BrokerInfo(2, "127.0.0.1", peer.port)], recycle=0.2):
        await until("connected again", lambda: peer.accepted >= 3)
    await peer.die()
    # half the shorter of the idle and TLS handshake timeouts, at least a second
    assert recycle_s(600.0, 30.0) == 15.0
    assert recycle_s(None, 30.0) == 15.0
    assert recycle_s(10.0, 30.0) == 5.0
    assert recycle_s(0.5, 30.0) == 1.0
