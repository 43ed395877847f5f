"""What the group and the transaction coordinators share: a key's partition, and the
shards of the partitions of their internal topic that this broker leads.

As in Kafka, a group's (a transactional id's) coordinator is the leader of its
``__consumer_offsets`` (``__transaction_state``) partition, ``abs(key's Java
hashCode) % partitions`` (:func:`partition_for`), and each partition's state is one
shard with that partition as its journal. On one node, or on a cluster's writer that
leads every partition, every shard is here. In a cluster that shares partitions the
partitions are spread and balanced over the brokers like any other, and each broker
holds the shards of the partitions it leads (:class:`ShardMap`): loaded by replay
when it opens one, unloaded when it no longer leads it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import Store
from floe.storage.journal import reason_of
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.coordinator")

Leads = Callable[[TopicName, PartitionId], bool]
S = TypeVar("S")


def java_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` (over its UTF-16 code units, as a signed
    32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition of an internal topic with ``partitions`` partitions that holds
    ``key`` (a group id, a transactional id): Kafka's
    ``Utils.abs(key.hashCode()) % partitions``, so that Floe and Kafka agree."""
    h = java_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def ranges(numbers: list[int]) -> str:
    """``0-3,7`` for [0, 1, 2, 3, 7]."""
    out: list[str] = []
    for n in sorted(numbers):
        if out and n == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


class ShardMap(Generic[S]):
    """The shards of the partitions of ``topic`` led here, opened by ``open_shard``.

    Ownership: one per coordinator, used from the broker's event loop only. The
    coordinator decides when to load (:meth:`load`, :meth:`get`) and to drop
    (:meth:`stale`, :meth:`pop`) and closes what it drops.
    """

    def __init__(
        self,
        store: Store,
        topic: TopicName,
        open_shard: Callable[[int], S],
        *,
        leads: Leads | None,
        kind: str,
        on_load: Callable[[int, S], None],
    ) -> None:
        """``leads``: whether this broker leads a partition (None: every partition is
        here). ``open_shard(partition)`` loads a shard (raises when its journal cannot be
        read); ``on_load`` is told of each shard loaded after the start (at a request or
        at :meth:`sync`); ``kind`` names the coordinator in log lines (``group``,
        ``txn``)."""
        self._store = store
        self.topic = topic
        self._open = open_shard
        self._leads = leads
        self._kind = kind
        self._on_load = on_load
        self.closed = False
        """The coordinator stopped: every key gets COORDINATOR_NOT_AVAILABLE."""
        self.shards: dict[int, S] = {}
        self._failing: dict[int, str] = {}
        """Why a shard's last load failed (logged once per distinct reason)."""

    @property
    def everywhere(self) -> bool:
        """Every partition is led here (one node, or a cluster that does not share)."""
        return self._leads is None

    @property
    def partitions(self) -> int:
        """The topic's partitions (0 while this broker does not know it: a member before
        the writer created it)."""
        meta = self._store.topic(self.topic)
        return 0 if meta is None else meta.partitions

    def led(self, partition: int) -> bool:
        return self._leads is None or self._leads(self.topic, PartitionId(partition))

    def partition_of(self, key: str) -> int | None:
        """The partition of ``key`` (None while the topic is not known here)."""
        n = self.partitions
        return partition_for(key, n) if n else None

    def coordinates(self, key: str) -> bool:
        """Whether this broker leads ``key``'s partition."""
        p = self.partition_of(key)
        return p is not None and self.led(p)

    def load_now(self, partition: int) -> S:
        """Load the shard of ``partition``.

        Raises:
            StorageError: its journal could not be read.
        """
        shard = self._open(partition)
        self.shards[partition] = shard
        self._failing.pop(partition, None)
        return shard

    def load(self, partition: int) -> S | None:
        """:meth:`load_now`, None when it fails (logged once per distinct reason; the
        coordinator tries again)."""
        try:
            return self.load_now(partition)
        except Exception as exc:
            reason = reason_of(exc)
            if self._failing.get(partition) != reason:
                log.warning(
                    "%s.shard.load_failed topic=%s partition=%d error=%s (tried again; "
                    "its keys get COORDINATOR_LOAD_IN_PROGRESS meanwhile)",
                    self._kind, self.topic, partition, reason,
                )  # fmt: skip
            self._failing[partition] = reason
            return None

    def _stale(self) -> list[int]:
        """The partitions whose shards must go: not led here any more (a move away and
        back takes a release, an open elsewhere, a release and an open here: never
        within one tick of the coordinator)."""
        n = self.partitions
        return [p for p in self.shards if not self.led(p) or p >= n]

    def missing(self) -> list[int]:
        """The partitions led here whose shards are not loaded."""
        return [p for p in range(self.partitions) if p not in self.shards and self.led(p)]

    async def sync(self, close: Callable[[S], Awaitable[int]], what: str) -> None:
        """Close the shards of partitions no longer led here (``close`` answers how many
        of ``what`` each held, for the log line), load those led here."""
        gone = self._stale()
        count = 0
        for p in gone:
            count += await close(self.shards.pop(p))
        if gone:
            log.info(
                "%s.shards.unloaded partitions=%s %s=%d (not led here any more: their "
                "clients find the new coordinator)",
                self._kind, ranges(gone), what, count,
            )  # fmt: skip
        for p in self.missing():
            if (loaded := self.load(p)) is not None:
                self._on_load(p, loaded)

    def pop(self, partition: int) -> S:
        return self.shards.pop(partition)

    def of_key(self, key: str) -> S:
        """The shard of ``key``'s partition, loaded here (see :meth:`get`).

        Raises:
            KafkaError: as :meth:`get`; COORDINATOR_NOT_AVAILABLE: the coordinator
                stopped, or the topic is not known here yet.
        """
        partition = self.partition_of(key)
        if self.closed or partition is None:
            raise KafkaError(
                f"no {self._kind} coordinator here now", ErrorCode.coordinator_not_available
            )
        return self.get(partition)

    def get(self, partition: int) -> S:
        """The shard of ``partition``, loaded here (at once if it was opened here a
        moment ago: ``on_load`` is told).

        Raises:
            KafkaError: NOT_COORDINATOR: another broker leads the partition;
                COORDINATOR_LOAD_IN_PROGRESS: it is led here and does not load yet.
        """
        if not self.led(partition):
            raise KafkaError(
                f"{self.topic}-{partition} is led by another broker: ask FindCoordinator",
                ErrorCode.not_coordinator,
            )
        shard = self.shards.get(partition)
        if shard is None and (shard := self.load(partition)) is not None:
            self._on_load(partition, shard)
        if shard is None:
            raise KafkaError(
                f"{self.topic}-{partition} is loading", ErrorCode.coordinator_load_in_progress
            )
        return shard

    def held(self) -> list[int]:
        """The partitions whose shards are loaded here."""
        return sorted(self.shards)
