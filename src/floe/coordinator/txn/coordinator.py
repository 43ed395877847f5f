"""TransactionCoordinator: the broker's transaction coordinator, for the
``__transaction_state`` partitions it leads.

As in Kafka, a transactional id's coordinator is the leader of its
``__transaction_state`` partition, ``abs(transactional id's Java hashCode) %
partitions`` (:func:`~floe.coordinator.shards.partition_for`), and each partition's
transactional ids are one :class:`~.shard.TxnShard` with that partition as its journal
(held by a :class:`~floe.coordinator.shards.ShardMap`). On one node, or on a cluster's
writer that leads every partition, every shard is here. In a cluster that shares
partitions the partitions are spread and balanced over the brokers like any other;
each broker loads the shards of the partitions it leads (by replay, when it opens one:
the transactions found prepared are completed at once) and unloads those it no longer
leads. A request for a transactional id whose partition another broker leads gets
NOT_COORDINATOR, so that the producer asks FindCoordinator again.

**Producer ids.** Each shard allocates in its own lane of blocks (see
:func:`~.shard.next_block`), so producer ids are unique across the cluster without the
brokers asking one another; an idempotent producer's id comes from any shard led here.

**Coordinator epochs.** A shard's markers carry the epoch ``epoch_of(partition)``
gave when it loaded (in a cluster that shares partitions, the partition's ownership
epoch above :data:`SHARED_EPOCH_BASE`): a partition refuses a marker from an older
coordinator of the same producer (TRANSACTION_COORDINATOR_FENCED), so a former
coordinator paused past its lease cannot end a transaction its successor opened.

``__transaction_state`` is created by the writer (the controller) with
``transaction.state.log.num.partitions`` partitions; an existing one keeps its count, as
in Kafka (changing it would move every transactional id; a data dir or bucket written
before this version keeps its one partition).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator

from floe.config import BrokerConfig
from floe.config import coordinators as keys
from floe.coordinator.shards import Leads, ShardMap
from floe.coordinator.txn.markers import RemoteMarkers
from floe.coordinator.txn.shard import TOPIC, TxnShard, lane_of
from floe.coordinator.txn.state import PREPARED, TxnError, TxnMetadata
from floe.errors import ErrorCode
from floe.storage.interface import Store
from floe.storage.journal import Journal
from floe.tasks import cancel_and_wait

log = logging.getLogger("floe.coordinator.txn")

__all__ = ["SHARED_EPOCH_BASE", "TOPIC", "TransactionCoordinator", "TxnError"]

TICK_S = 0.1
"""How often the broker checks which ``__transaction_state`` partitions it leads."""
SHARED_EPOCH_BASE = 1 << 20
"""Added to a partition's ownership epoch to make a shard's coordinator epoch in a
cluster that shares partitions: above every writer-lease epoch, which coordinated every
transaction before transactions were sharded, so that the markers of an upgraded
cluster are not refused as older."""

GroupCompleter = Callable[[str, int, int, bool, int], Awaitable[None]]


class TransactionCoordinator:
    """See the module docstring.

    Ownership and lifecycle: created by the composition root once the store is open
    (on the writer, which creates ``__transaction_state``; on a member that shares
    partitions); :meth:`start` loads the shards led here (completing their prepared
    transactions before it returns on one node) and starts the task that follows
    leadership; :meth:`stop` stops every shard. Used from the broker's event loop only.
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        *,
        complete_group: GroupCompleter,
        notify: Callable[[], None],
        leads: Leads | None = None,
        controller: bool = True,
        epoch_of: Callable[[int], int] = lambda _partition: 0,
        remote_markers: RemoteMarkers | None = None,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """``leads``: whether this broker leads a partition (None: every partition of
        ``__transaction_state`` is here). ``controller``: this broker creates the topic;
        a member only uses it once the writer has. ``epoch_of(partition)`` is the
        coordinator epoch of a shard loaded now. The rest is each shard's (see
        :class:`~.shard.TxnShard`)."""
        self._store = store
        self._config = config
        self._complete_group = complete_group
        self._notify = notify
        self._epoch_of = epoch_of
        self._remote_markers = remote_markers
        self._check = check
        self._map: ShardMap[TxnShard] = ShardMap(
            store, TOPIC, self._open, leads=leads, kind="txn", on_load=self._loaded
        )
        self.shards = self._map.shards
        self._task: asyncio.Task[None] | None = None
        if controller:
            Journal(store, TOPIC, partitions=config[keys.TRANSACTION_STATE_LOG_NUM_PARTITIONS])

    # ------------------------------------------------------------------ lifecycle

    @property
    def partitions(self) -> int:
        """The partitions of ``__transaction_state`` (0 while not known here)."""
        return self._map.partitions

    @property
    def replay_skipped(self) -> int:
        """Journal batches and records skipped, over the shards loaded here."""
        return sum(s.replay_skipped for s in self.shards.values())

    async def start(self) -> None:
        """Load the shards led here, complete their prepared transactions (on one node
        before the broker serves), and start following leadership.

        Raises:
            StorageError: a journal could not be read (one node, where every shard must
                load: the broker cannot serve its transactions without it).
        """
        t0 = time.monotonic()
        for p in self._map.missing():
            # one node: a journal that cannot be read is fatal (raised)
            self._map.load_now(p) if self._map.everywhere else self._map.load(p)
        txns = [md for s in self.shards.values() for md in s.state.txns.values()]
        log.info(
            "txn.coordinator.loaded partitions=%d of=%d transactional_ids=%d prepared=%d "
            "replay_skipped=%d ms=%.0f",
            len(self.shards), self.partitions, len(txns),
            sum(md.state in PREPARED for md in txns), self.replay_skipped,
            (time.monotonic() - t0) * 1000,
        )  # fmt: skip
        for shard in list(self.shards.values()):
            await shard.complete_prepared()
            shard.run_timers()
        self._task = asyncio.create_task(self._follow(), name="txn-coordinator")

    async def stop(self) -> None:
        """Stop following leadership and stop every shard's timeout task."""
        self._map.closed = True
        await cancel_and_wait(self._task)
        for p in list(self.shards):
            await self._map.pop(p).stop()

    # ------------------------------------------------------------------ shards

    def _open(self, partition: int) -> TxnShard:
        """Load the shard of ``partition`` (replay its journal).

        Raises:
            StorageError: the journal could not be read.
        """
        config = self._config
        shard = TxnShard(
            self._store,
            partition=partition,
            partitions=self.partitions,
            coordinator_epoch=self._epoch_of(partition),
            complete_group=self._complete_group,
            notify=self._notify,
            remote_markers=self._remote_markers,
            check=self._check,
            max_timeout_ms=config[keys.TRANSACTION_MAX_TIMEOUT_MS],
            abort_check_interval_ms=config[keys.TRANSACTION_ABORT_CHECK_INTERVAL_MS],
            id_expiration_ms=config[keys.TRANSACTIONAL_ID_EXPIRATION_MS],
        )
        shard.load()
        return shard

    def _loaded(self, partition: int, shard: TxnShard) -> None:
        """A shard of a partition opened here since the start: logged, and its timeout
        task started (its first pass completes the transactions found prepared)."""
        log.info("txn.shard.loaded partition=%d %s", partition, shard.summary())
        shard.run_timers()

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self._sync_shards()
            except Exception:
                log.exception("txn.shards.sync_failed")

    async def _sync_shards(self) -> None:
        """Stop the shards of partitions no longer led here, load those led here."""

        async def unload(shard: TxnShard) -> int:
            await shard.stop()
            return len(shard.state.txns)

        await self._map.sync(unload, "transactional_ids")

    def shard(self, tid: str) -> TxnShard:
        """The shard of transactional id ``tid``'s partition, loaded here.

        Raises:
            KafkaError: see :meth:`~floe.coordinator.shards.ShardMap.of_key`.
        """
        return self._map.of_key(tid)

    def held(self) -> list[int]:
        """The ``__transaction_state`` partitions whose transactional ids this broker
        coordinates."""
        return self._map.held()

    def partition_of(self, tid: str) -> int | None:
        """The ``__transaction_state`` partition of ``tid`` (None while not known)."""
        return self._map.partition_of(tid)

    def coordinates(self, tid: str) -> bool:
        """Whether this broker leads ``tid``'s partition."""
        return self._map.coordinates(tid)

    # ------------------------------------------------------------------ operations

    async def init_producer_id(
        self, tid: str | None, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int]:
        """InitProducerId (see :meth:`.shard.TxnShard.init_producer_id`): an idempotent
        producer's id from the first shard loaded here.

        Raises:
            KafkaError: as the shard's; COORDINATOR_NOT_AVAILABLE for an idempotent
                producer when no shard is loaded here.
        """
        if tid is not None:
            return await self.shard(tid).init_producer_id(
                tid, timeout_ms, producer_id, producer_epoch
            )
        held = self._map.held()
        if self._map.closed or not held:
            raise TxnError(
                "this broker coordinates no __transaction_state partition",
                ErrorCode.coordinator_not_available,
            )
        return await self.shards[held[0]].init_producer_id(None, timeout_ms, -1, -1)

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn (see :meth:`.shard.TxnShard.add_partitions`)."""
        await self.shard(tid).add_partitions(tid, producer_id, epoch, partitions)

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn (see :meth:`.shard.TxnShard.add_offsets`)."""
        await self.shard(tid).add_offsets(tid, producer_id, epoch, group_id)

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn (see :meth:`.shard.TxnShard.end_txn`)."""
        await self.shard(tid).end_txn(tid, producer_id, epoch, commit)

    def check_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        """Validate a transactional batch against its producer's open transaction when
        its coordinator is here (see :meth:`.shard.TxnShard.check_produce`); in a
        cluster, a producer coordinated elsewhere is checked by the log alone (its epoch
        and sequence), as Kafka's partition leaders do.

        Raises:
            TxnError: INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE.
        """
        n = self.partitions
        shard = self.shards.get(lane_of(producer_id, n)) if n else None
        if shard is not None and producer_id in shard.state.by_producer_id:
            shard.check_produce(producer_id, epoch, topic, partition)
            return
        if self._map.everywhere:
            raise TxnError(
                f"{topic}-{partition} is not part of a transaction of producer {producer_id}",
                ErrorCode.invalid_txn_state,
            )

    def describe(self, tid: str) -> TxnMetadata | None:
        """``tid``'s state (None: unknown).

        Raises:
            KafkaError: as :meth:`shard`.
        """
        return self.shard(tid).state.txns.get(tid)

    def transactions(self) -> Iterator[TxnMetadata]:
        """Every transactional id coordinated here (ListTransactions: Kafka's clients
        ask every broker)."""
        for shard in list(self.shards.values()):
            yield from shard.state.txns.values()
