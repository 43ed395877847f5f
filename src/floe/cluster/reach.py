"""Which other brokers of the cluster refuse connections on their Kafka port: a hint for
the leaders Metadata names, never for who owns a partition.

A broker killed (kill -9, a crash, an OOM kill) keeps its lease, and so its partitions,
until the store lets the lease lapse, up to a session timeout later. Metadata naming it
as their leader meanwhile sends clients back to a port that refuses them: librdkafka asks
again once a second, kafka-python only when its next connection attempt fails, after a
backoff that doubles (3.2, 6.4, 12.8 s...), so a takeover that came just after its
attempt cost it another 6 s. A partition answered leaderless (LEADER_NOT_AVAILABLE)
makes every client refresh its metadata at its fast interval instead, and find the next
leader as soon as it claims. Kafka's controller likewise stops naming a broker whose
session ended.

:class:`Reach` holds one idle TCP connection to each other live broker's registered
Kafka address. The kernel of a dead process closes it at once; a new connection that
is then *refused* (nothing listens on that port) marks the broker refusing, until a
connection succeeds again, its lease lapses, or twice the session timeout passed (a
dead broker's lapse is seen within about one and a half): a broker whose lease
outlives its refusals is alive, and a firewall between the two brokers must not hide
it from its clients for longer. Anything else (a timeout, a host
unreachable: a network fault, or a broker paused) marks nothing. The connection sends nothing and is
opened again every :func:`recycle_s`, before the peer's idle or TLS handshake timeout
closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from floe.cluster.interface import BrokerInfo

log = logging.getLogger("floe.cluster.membership")

REFUSED_RETRY_S = 0.2
"""How often a connection to a refusing broker is tried again: it is named again within
this of listening."""
CONNECT_TIMEOUT_S = 2.0
"""A connection attempt longer than this marks nothing and is tried again."""
LOOK_S = 0.25
"""How often the live brokers (the membership's view) are compared with those watched."""

Address = tuple[str, int]


def recycle_s(idle_timeout_s: float | None, handshake_timeout_s: float) -> float:
    """How long one watching connection stays open: half the shorter of the broker's
    idle timeout (``connections.max.idle.ms``, None: never) and its TLS handshake
    timeout (``socket.request.read.timeout.ms``), at least a second, so that the peer
    never closes it first (which would log ``connection.closed reason=idle`` there)."""
    shortest = min(handshake_timeout_s, idle_timeout_s or handshake_timeout_s)
    return max(1.0, shortest / 2)


class Reach:
    """Watches every live broker but ``me`` of ``brokers()`` (read every
    :data:`LOOK_S`); :meth:`refusing` is the ids whose Kafka port took a connection,
    then refused the next ones, for at most ``mark_for_s`` (twice the session timeout: a
    dead broker's lease has lapsed by then, and it left the view)."""

    def __init__(
        self,
        me: int,
        brokers: Callable[[], Iterable[BrokerInfo]],
        *,
        recycle_after_s: float,
        mark_for_s: float,
    ) -> None:
        self._me = me
        self._brokers = brokers
        self._recycle_s = recycle_after_s
        self._mark_for_s = mark_for_s
        self._refusing: set[int] = set()
        self._watching: dict[int, tuple[Address, asyncio.Task[None]]] = {}

    def refusing(self) -> frozenset[int]:
        return frozenset(self._refusing)

    async def run(self) -> None:
        """Watch the live brokers until cancelled."""
        try:
            while True:
                self._look()
                await asyncio.sleep(LOOK_S)
        finally:
            for _, task in self._watching.values():
                task.cancel()
            await asyncio.gather(*(t for _, t in self._watching.values()), return_exceptions=True)
            self._watching.clear()
            self._refusing.clear()

    def _look(self) -> None:
        live = {b.broker_id: (b.host, b.port) for b in self._brokers() if b.broker_id != self._me}
        for broker_id, (address, task) in list(self._watching.items()):
            if live.get(broker_id) != address:  # gone (its lease lapsed) or moved
                task.cancel()
                del self._watching[broker_id]
                self._refusing.discard(broker_id)
        for broker_id, address in live.items():
            if broker_id not in self._watching:
                task = asyncio.create_task(
                    self._watch(broker_id, address), name=f"reach {broker_id}"
                )
                self._watching[broker_id] = (address, task)

    async def _watch(self, broker_id: int, address: Address) -> None:
        """One broker's watch: a refusal counts only after a connection of this watch
        succeeded (a broker never reached, behind a firewall that rejects, is not
        hidden), and for at most :attr:`_mark_for_s`: a broker still registered that
        long after it began refusing is alive, cut off from this one only."""
        host, port = address
        reached = False
        refused_since: float | None = None
        while True:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    reader, writer = await asyncio.open_connection(host, port)
            except ConnectionRefusedError:
                now = time.monotonic()
                if reached and refused_since is None:
                    refused_since = now
                    self._mark(broker_id, address)
                elif refused_since is not None and now - refused_since > self._mark_for_s:
                    reached, refused_since = False, None
                    why = f"still registered {self._mark_for_s:g} s later"
                    self._unmark(broker_id, address, why)
                await asyncio.sleep(REFUSED_RETRY_S)
                continue
            except (OSError, TimeoutError):
                await asyncio.sleep(REFUSED_RETRY_S)  # not a refusal: says nothing
                continue
            reached, refused_since = True, None
            self._unmark(broker_id, address, "takes connections")
            try:
                async with asyncio.timeout(self._recycle_s):
                    await reader.read(1)  # b'': its end closed (the process died)
            except (OSError, TimeoutError):
                pass
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    def _mark(self, broker_id: int, address: Address) -> None:
        self._refusing.add(broker_id)
        log.info(
            "cluster.broker_refuses broker=%d address=%s:%d (named leader of nothing until "
            "it takes connections or its lease lapses)",
            broker_id, *address,
        )  # fmt: skip

    def _unmark(self, broker_id: int, address: Address, why: str) -> None:
        if broker_id in self._refusing:
            self._refusing.discard(broker_id)
            log.info(
                "cluster.broker_named_again broker=%d address=%s:%d reason=%s",
                broker_id, *address, why,
            )  # fmt: skip
