"""GroupCoordinator: the broker's group coordinator, for the ``__consumer_offsets``
partitions it leads.

As in Kafka, a group's coordinator is the leader of its ``__consumer_offsets``
partition, ``abs(group id's Java hashCode) % partitions``
(:func:`~floe.coordinator.shards.partition_for`), and each partition's groups are one
:class:`~.shard.GroupShard` with that partition as its journal (held by a
:class:`~floe.coordinator.shards.ShardMap`). On one node, or on a cluster's writer
that leads every partition, every shard is here. In a cluster that shares partitions
(``cluster.share.partitions``) the partitions are spread and balanced over the brokers
like any other; each broker loads the shards of the partitions it leads (by replay,
when it opens one) and unloads those it no longer leads (handed over, or taken over
after a pause): their waiting JoinGroup/SyncGroup calls get NOT_COORDINATOR, and so
does every later request, so that the client asks FindCoordinator again, which names
the new leader.

``__consumer_offsets`` is created by the writer (the controller) with
``offsets.topic.num.partitions`` partitions; an existing one keeps its count, as in
Kafka (changing it would move every group).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator

from floe.config import BrokerConfig
from floe.config import coordinators as keys
from floe.coordinator.group.api import (
    CommittedOffset,
    GroupDescription,
    GroupSummary,
    JoinRequest,
    JoinResult,
    OffsetCommit,
    SyncResult,
)
from floe.coordinator.group.offsets import GroupData, TopicPartition
from floe.coordinator.group.shard import NOTHING, GroupShard
from floe.coordinator.shards import Leads, ShardMap, partition_for
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import Store
from floe.storage.journal import Journal, reason_of
from floe.tasks import cancel_and_wait
from floe.types import TopicName

log = logging.getLogger("floe.coordinator.group")

TOPIC = TopicName("__consumer_offsets")
TICK_S = 0.1
"""How often the shards' timers run, and the broker checks which partitions it leads."""
DELETED_TOPICS_S = 1.0
"""How often a broker looks for deleted topics whose committed offsets its shards still
hold (a member learns of a deletion from the bucket, not from the DeleteTopics call)."""

__all__ = ["TOPIC", "GroupCoordinator", "partition_for"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _log_loaded(partition: int, shard: GroupShard) -> None:
    """A shard of a partition opened here since the start, loaded."""
    log.info("group.shard.loaded partition=%d %s", partition, shard.loaded.fields())


class GroupCoordinator:
    """See the module docstring.

    Ownership and lifecycle: created by the composition root once the store is open
    (on the writer, which creates ``__consumer_offsets``; on a member that shares
    partitions, which loads the shards of the partitions it leads); :meth:`start`
    loads the shards led here and starts one timer task; :meth:`stop` cancels it and
    fails the JoinGroup/SyncGroup calls still waiting. All state is used from the
    broker's event loop only.
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        clock: Callable[[], int] = _now_ms,
        *,
        leads: Leads | None = None,
        controller: bool = True,
    ) -> None:
        """``leads``: whether this broker leads a partition (None: every partition of
        ``__consumer_offsets`` is here). ``controller``: this broker creates
        ``__consumer_offsets`` (with ``offsets.topic.num.partitions`` partitions) and
        brings its configs up to date; a member only uses it once the writer has."""
        self._store = store
        self._config = config
        self._clock = clock
        self._map = ShardMap(
            store, TOPIC, self._open, leads=leads, kind="group", on_load=_log_loaded
        )
        self.shards = self._map.shards
        self._task: asyncio.Task[None] | None = None
        self._topics: dict[TopicName, uuid.UUID] | None = None
        """Each topic's id at the last look for deleted topics."""
        self._next_sweep = 0.0
        if controller:
            Journal(store, TOPIC, partitions=config[keys.OFFSETS_TOPIC_NUM_PARTITIONS])

    # ------------------------------------------------------------------ lifecycle

    @property
    def partitions(self) -> int:
        """The partitions of ``__consumer_offsets`` (0 while this broker does not know
        it: a member before the writer created it)."""
        return self._map.partitions

    @property
    def replay_skipped(self) -> int:
        """Journal batches and records skipped because they could not be used, over the
        shards loaded here."""
        return sum(s.replay_skipped for s in self.shards.values())

    def start(self) -> None:
        """Load the shards of the partitions led here and start the timer task.

        Raises:
            StorageError: a shard's journal could not be read (one node, where every
                shard must load: the broker cannot serve its groups without it).
        """
        loaded = NOTHING
        for p in self._map.missing():
            # one node: a journal that cannot be read is fatal (raised)
            shard = self._map.load_now(p) if self._map.everywhere else self._map.load(p)
            loaded += shard.loaded if shard is not None else NOTHING
        log.info(
            "group.coordinator.loaded partitions=%d of=%d %s",
            len(self.shards), self.partitions, loaded.fields(),
        )  # fmt: skip
        self._task = asyncio.create_task(self._timers(), name="group-coordinator")

    async def stop(self) -> None:
        """Cancel the timers and unload every shard: waiting JoinGroup/SyncGroup calls
        get COORDINATOR_NOT_AVAILABLE, and so do later ones (the broker is stopping)."""
        self._map.closed = True
        await cancel_and_wait(self._task)
        for p in list(self.shards):
            await self.shards.pop(p).unload(ErrorCode.coordinator_not_available)

    # ------------------------------------------------------------------ shards

    def _open(self, partition: int) -> GroupShard:
        """Load the shard of ``partition`` (replay its journal).

        Raises:
            StorageError: the journal could not be read.
        """
        journal = Journal(self._store, TOPIC, partition=partition)
        shard = GroupShard(self._store, self._config, journal, self._clock)
        shard.load()
        return shard

    async def _sync_shards(self) -> None:
        """Unload the shards of partitions no longer led here, load those led here."""

        async def unload(shard: GroupShard) -> int:
            await shard.unload(ErrorCode.not_coordinator)
            return len(shard.groups)

        await self._map.sync(unload, "groups")

    def shard(self, group_id: str) -> GroupShard:
        """The shard of ``group_id``'s partition, loaded here.

        Raises:
            KafkaError: see :meth:`~floe.coordinator.shards.ShardMap.of_key`.
        """
        return self._map.of_key(group_id)

    def shard_of(self, partition: int) -> GroupShard:
        """The shard of ``partition``, loaded here (see :meth:`shard`).

        Raises:
            KafkaError: as :meth:`shard`.
        """
        return self._map.get(partition)

    def held(self) -> list[int]:
        """The ``__consumer_offsets`` partitions whose groups this broker coordinates."""
        return self._map.held()

    def persisted_groups(self) -> Iterator[tuple[str, GroupData]]:
        """Every group coordinated here with its persisted state."""
        for shard in self.shards.values():
            yield from shard.persisted.groups.items()

    # ------------------------------------------------------------------ timers

    async def _timers(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self._sync_shards()
                for shard in list(self.shards.values()):
                    try:
                        await shard.timers()
                    except KafkaError:
                        pass  # moved meanwhile: unloaded at the next tick
                    except Exception:
                        log.exception("group.timers.failed partition=%d", shard.partition)
                self._sweep_deleted_topics()
            except Exception:
                log.exception("group.timers.failed")

    def _sweep_deleted_topics(self) -> None:
        """Forget the offsets of topics deleted since the last look (every
        :data:`DELETED_TOPICS_S`), including a topic deleted and created again in
        between: a new id is a new topic, whose offsets start afresh (offsets do not
        name the topic's id, so a commit to the new topic within that moment goes too:
        its consumer reads again from its reset policy, never past a record)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + DELETED_TOPICS_S
        known = {name: meta.topic_id for name, meta in self._store.topics().items()}
        before, self._topics = self._topics or known, known
        for topic in sorted(t for t, tid in before.items() if known.get(t) != tid):
            self.topic_deleted(topic)

    # ------------------------------------------------------------------ operations

    async def join(self, req: JoinRequest) -> JoinResult:
        """JoinGroup (see :meth:`.membership.Membership.join`)."""
        return await self.shard(req.group_id).join(req)

    async def sync(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup (see :meth:`.membership.Membership.sync`)."""
        return await self.shard(group_id).sync(
            group_id,
            generation=generation,
            member_id=member_id,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
        )

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        return self.shard(group_id).heartbeat(group_id, generation, member_id, instance_id)

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[tuple[str, str | None, ErrorCode]]:
        return self.shard(group_id).leave(group_id, members)

    async def commit_offsets(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[OffsetCommit],
        retention_ms: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit (see :meth:`.shard.GroupShard.commit_offsets`)."""
        return await self.shard(group_id).commit_offsets(
            group_id,
            generation=generation,
            member_id=member_id,
            instance_id=instance_id,
            offsets=offsets,
            retention_ms=retention_ms,
        )

    async def stage_txn_offsets(
        self,
        group_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (see :meth:`.shard.GroupShard.stage_txn_offsets`)."""
        return await self.shard(group_id).stage_txn_offsets(
            group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation=generation,
            member_id=member_id,
            instance_id=instance_id,
            offsets=offsets,
        )

    def partition_of(self, group_id: str) -> int | None:
        """The ``__consumer_offsets`` partition of ``group_id`` (None while the topic is
        not known here)."""
        return self._map.partition_of(group_id)

    def coordinates(self, group_id: str) -> bool:
        """Whether this broker leads ``group_id``'s partition."""
        return self._map.coordinates(group_id)

    async def complete_transaction(
        self, group_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Commit or drop the offsets ``producer_id`` staged in ``group_id`` (see
        :meth:`.shard.GroupShard.complete_transaction`)."""
        await self.shard(group_id).complete_transaction(
            group_id, producer_id, producer_epoch, commit
        )

    async def complete_partition(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """A transaction marker for ``__consumer_offsets-partition`` (see
        :meth:`.shard.GroupShard.complete_producer`)."""
        return await self.shard_of(partition).complete_producer(producer_id, producer_epoch, commit)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool,
    ) -> dict[TopicPartition, CommittedOffset]:
        """OffsetFetch (see :meth:`.shard.GroupShard.fetch_offsets`)."""
        return self.shard(group_id).fetch_offsets(group_id, partitions, require_stable)

    def list_groups(self) -> list[GroupSummary]:
        """The groups coordinated here (ListGroups: Kafka's clients ask every broker)."""
        return [g for shard in self.shards.values() for g in shard.list_groups()]

    def describe(self, group_id: str) -> GroupDescription:
        return self.shard(group_id).describe(group_id)

    async def delete_group(self, group_id: str) -> ErrorCode:
        return await self.shard(group_id).delete_group(group_id)

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return await self.shard(group_id).delete_offsets(group_id, partitions)

    def topic_deleted(self, topic: str) -> None:
        """Remove every group's offsets of a deleted topic, in each shard loaded here
        (one that fails is logged: its offsets of that topic stay until the group
        commits them again or they expire)."""
        for shard in list(self.shards.values()):
            try:
                shard.topic_deleted(topic)
            except Exception as exc:
                log.warning(
                    "group.offsets.topic_delete_failed topic=%s partition=%d error=%s",
                    topic, shard.partition, reason_of(exc),
                )  # fmt: skip
