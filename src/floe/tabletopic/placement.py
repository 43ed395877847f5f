"""Where a table topic's coordinator runs, and where it reads its topic's partitions.

Where it runs (:func:`coordinates_here`, :func:`coordinator_of`): on one node, and in a
cluster whose brokers do not share partitions, on the broker (the writer); in a cluster
whose brokers share partitions, on the leader of the topic's partition 0, but for the
topics that stay with the writer.

On one node, and in a cluster whose brokers do not share partitions, the coordinator's
broker leads every partition of its topic: their offsets are read from the local
store. In a cluster whose brokers share partitions a table topic's partitions lead
wherever the balancer puts them: the offsets of those another broker leads are asked
of that broker with ListOffsets (earliest, latest read_uncommitted, latest
read_committed: log start, high watermark and last stable offset, which in a cluster
count only what the bucket holds), and the round's read tasks fetch them there
(:attr:`floe.tabletopic.rounds.Round.leaders`). A partition without a live leader (its
owner died and no broker took it over yet, or it is moving) stops the round until the
next look (:class:`~floe.storage.interface.NotOwnerError`).

Ownership: a :class:`TopicPartitions` belongs to one table coordinator and is used on
the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe.cluster.interface import BrokerInfo
from floe.cluster.peers import PeerError, call
from floe.errors import ErrorCode
from floe.protocol.client import EARLIEST, LATEST, list_offsets_request, listed_offsets
from floe.storage.interface import NotOwnerError, PartitionLog, Store, TopicMeta
from floe.storage.object.topics import stays_with_writer
from floe.types import Offset, PartitionId, TopicName

if TYPE_CHECKING:
    from floe.cluster.membership import Membership

Leads = Callable[[TopicName, PartitionId], bool]
"""Whether this broker leads a partition."""
Key = tuple[TopicName, PartitionId]
Locate = Callable[[TopicName, PartitionId], BrokerInfo | None]
"""The live broker leading a partition, None when it is this one.

Raises: NotOwnerError: no live broker leads it now."""


@dataclass(frozen=True)
class Ends:
    """Per partition: log start, durable last stable offset and log end (another
    broker's partition: its high watermark, what the bucket holds)."""

    starts: Mapping[PartitionId, Offset]
    stable: Mapping[PartitionId, Offset]
    ends: Mapping[PartitionId, Offset]


def cut(
    plog: PartitionLog | None, start: Offset, end: Offset, max_records: int, max_bytes: int
) -> Offset:
    """The end of the piece of ``[start, end)`` holding at most ``max_records`` offsets
    and, for a partition led here (``plog``), ``max_bytes`` bytes of log (always at
    least one batch). Another broker's partition is cut by offsets alone."""
    stop = Offset(min(int(end), int(start) + max(1, max_records)))
    if plog is None:
        return stop
    return Offset(
        max(int(start) + 1, min(int(stop), int(plog.end_for_bytes(start, stop, max_bytes))))
    )


def coordinates_here(meta: TopicMeta, leads: Leads, writer: bool) -> bool:
    """Whether this broker (``writer``: the writer) runs the coordinator of table topic
    ``meta`` in a cluster whose brokers share partitions: the writer runs those of the
    topics that stay with it (:func:`~floe.storage.object.topics.stays_with_writer`),
    the leader of partition 0 the others. Partition 0's ownership is the coordinator's
    lease: spread and balanced over the brokers like any partition's, moved when its
    broker dies, its epoch growing with every move; a coordinator that lost it and
    still commits is fenced by the catalog's compare-and-swap on the table's newest
    Floe commit."""
    if stays_with_writer(meta):
        return writer
    return leads(meta.name, PartitionId(0))


def coordinator_of(
    meta: TopicMeta, owner: Callable[[Key], int | None], writer: int | None
) -> int | None:
    """The broker running the coordinator of table topic ``meta`` (see
    :func:`coordinates_here`), as the owners (``owner``) say; None while there is none."""
    if stays_with_writer(meta):
        return writer
    return owner((meta.name, PartitionId(0)))


def cluster_leaders(membership: Membership, leads: Leads) -> Locate:
    """The leaders of partitions: this broker for those it ``leads``, else their owners
    as this broker's last lease renewal saw them."""

    def locate(topic: TopicName, partition: PartitionId) -> BrokerInfo | None:
        if leads(topic, partition):
            return None
        owner = membership.owner(topic, partition)
        live = {b.broker_id: b for b in membership.view.brokers}
        if owner is None or owner == membership.me.broker_id:
            raise NotOwnerError(f"{topic}-{partition} is not led by a broker yet")
        if owner not in live or owner in membership.refusing():
            raise NotOwnerError(f"{topic}-{partition}'s leader, broker {owner}, is not live")
        return live[owner]

    return locate


class TopicPartitions:
    """One topic's partitions as a table coordinator reads them: here, or from their
    leaders (``locate``; None: this broker leads them all). ``timeout_s`` bounds a
    request to another broker."""

    def __init__(
        self, store: Store, topic: TopicName, locate: Locate | None, timeout_s: float
    ) -> None:
        self._store = store
        self._topic = topic
        self._locate = locate
        self._timeout_s = timeout_s

    def local(self, partition: PartitionId) -> PartitionLog | None:
        """The partition's log if this broker leads it, else None (another broker's).

        Raises:
            NotOwnerError: no broker leads it now (or, without ``locate``, this broker
                does not).
        """
        if self._locate is None or self._locate(self._topic, partition) is None:
            return self._store.partition(self._topic, partition)
        return None

    def leaders(self, partitions: list[PartitionId]) -> dict[PartitionId, str]:
        """``host:port`` of the leader of each of ``partitions`` another broker leads.

        Raises:
            NotOwnerError: see :meth:`local`.
        """
        if self._locate is None:
            return {}
        found = {}
        for p in partitions:
            b = self._locate(self._topic, p)
            if b is not None:
                found[p] = f"{b.host}:{b.port}"
        return found

    async def ends(self, count: int) -> Ends:
        """Partitions ``0..count-1``: log start, durable last stable offset (fsyncing
        first what is not durable yet) and log end.

        Raises:
            NotOwnerError: a partition has no live leader, or its leader did not answer
                (moving, or dead before its lease lapsed).
            StorageError: the fsync failed.
        """
        logs: list[PartitionLog] = []
        remote: list[PartitionId] = []
        for p in map(PartitionId, range(count)):
            plog = self.local(p)
            if plog is None:
                remote.append(p)
            else:
                logs.append(plog)
        behind = [plog for plog in logs if plog.durable_offset < plog.last_stable_offset]
        if behind:
            await self._store.sync(behind)
        asked = await self.remote_ends(remote)
        return Ends(
            starts={**asked.starts, **{plog.partition: plog.log_start_offset for plog in logs}},
            stable={
                **asked.stable,
                **{
                    plog.partition: Offset(min(plog.last_stable_offset, plog.durable_offset))
                    for plog in logs
                },
            },
            ends={**asked.ends, **{plog.partition: plog.log_end_offset for plog in logs}},
        )

    async def remote_ends(self, partitions: list[PartitionId]) -> Ends:
        """``partitions`` (led by other brokers): log start, last stable offset and high
        watermark, asked of their leaders.

        Raises:
            NotOwnerError: see :meth:`ends`.
        """
        by_leader: dict[tuple[str, int], list[PartitionId]] = {}
        for p in partitions:
            b = None if self._locate is None else self._locate(self._topic, p)
            if b is None:
                raise NotOwnerError(f"{self._topic}-{p} is led here")
            by_leader.setdefault((b.host, b.port), []).append(p)
        starts: dict[PartitionId, Offset] = {}
        stable: dict[PartitionId, Offset] = {}
        ends: dict[PartitionId, Offset] = {}
        for (host, port), led in by_leader.items():
            asked = await asyncio.gather(
                self._listed(host, port, led, EARLIEST, committed=False),
                self._listed(host, port, led, LATEST, committed=True),
                self._listed(host, port, led, LATEST, committed=False),
            )
            starts.update(asked[0])
            stable.update(asked[1])
            ends.update(asked[2])
        return Ends(starts, stable, ends)

    async def _listed(
        self, host: str, port: int, partitions: list[PartitionId], at: int, *, committed: bool
    ) -> dict[PartitionId, Offset]:
        """One ListOffsets of ``partitions`` to the broker at ``host:port``.

        Raises:
            NotOwnerError: no answer, or an error for a partition (it moved).
        """
        request = list_offsets_request(self._topic, partitions, at, committed=committed)
        try:
            listed = listed_offsets(await call(host, port, request, self._timeout_s), self._topic)
        except PeerError as exc:
            raise NotOwnerError(f"{self._topic}: {exc}") from None
        found = {}
        for p in partitions:
            entry = listed.get(int(p))
            if entry is None or entry.error is not ErrorCode.none:
                error = "no entry" if entry is None else entry.error.name
                raise NotOwnerError(f"{self._topic}-{p} at broker {host}:{port}: {error}")
            found[p] = Offset(entry.offset)
        return found
