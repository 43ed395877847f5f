"""One shard of the transaction coordinator: the transactional ids of one
``__transaction_state`` partition, their producer ids, transactions, markers and
timeouts (:class:`~.coordinator.TransactionCoordinator` holds the shards of the
partitions this broker leads).

Every change follows one path: compute the new :class:`TxnMetadata`, validate it
(:func:`check_transition`), append its record to ``__transaction_state``, await the
journal's fsync, then :func:`apply` it (the function replay uses at start-up), and only
then answer. Ending a transaction writes PrepareCommit/PrepareAbort durably, then the
COMMIT/ABORT control batches to every partition of the transaction, then completes the
transaction's consumer groups, then CompleteCommit/CompleteAbort. A transaction found
prepared at start-up is completed the same way (markers are idempotent); one that
cannot complete yet is left to the timeout task, which retries it.

Start-up never fails on bad data: a journal record that does not decode or apply, at
start-up or after a write, is logged with its offset, counted (``replay_skipped``) and
skipped, as Kafka's loader does. Producer ids stay unique even if a reservation record
is lost: allocation resumes above every producer id the journal still names. Each
shard reserves its blocks of :data:`ID_BLOCK` ids in its own lane (block ``b`` belongs
to partition ``b % partitions``), so that shards never hand out the same id without
asking one another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace

from floe.coordinator.txn.markers import Markers, RemoteMarkers
from floe.coordinator.txn.state import (
    COMPLETED,
    MAX_EPOCH,
    PREPARED,
    TxnError,
    TxnMetadata,
    TxnState,
    TxnStateMap,
    apply,
    block_record,
    check_transition,
    tombstone,
    txn_record,
)
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import (
    StorageError,
    Store,
)
from floe.storage.journal import Journal, reason_of
from floe.tasks import cancel_and_wait
from floe.types import TopicName

log = logging.getLogger("floe.coordinator.txn")

TOPIC = TopicName("__transaction_state")
ID_BLOCK = 1000
"""Producer ids reserved per journal record."""

GroupCompleter = Callable[[str, int, int, bool, int], Awaitable[None]]
"""Completes a transaction in a group: ``(group_id, producer_id, producer_epoch, commit,
coordinator_epoch)``, by the group coordinator here or by a marker to the broker that
leads the group's ``__consumer_offsets`` partition."""
COMPLETION_RETRY_S = 1.0
"""How soon the timeout task tries a decided transaction's completion again after it
failed (the markers of a transaction still prepared hide it, and everything after it,
from read_committed consumers)."""


def _now() -> int:
    return int(time.time() * 1000)


def next_block(at: int, partition: int, partitions: int) -> int:
    """The first producer id of the first block at or above ``at`` in the lane of
    ``partition`` (blocks ``b`` with ``b % partitions == partition``)."""
    block = -(-at // ID_BLOCK)
    block += (partition - block) % partitions
    return block * ID_BLOCK


def lane_of(producer_id: int, partitions: int) -> int:
    """The partition whose shard handed out ``producer_id`` (see :func:`next_block`): a
    transactional producer's id comes from its transactional id's shard."""
    return (producer_id // ID_BLOCK) % partitions


class TxnShard:
    """The transaction state of one ``__transaction_state`` partition.

    Ownership: one per partition led here, created by the broker's
    :class:`~.coordinator.TransactionCoordinator` and driven from the broker's event
    loop only. :meth:`load` replays the journal; :meth:`run_timers` starts the timeout
    task (whose first pass may complete the transactions found prepared); :meth:`start`
    does both, completing prepared transactions first; :meth:`stop` cancels the task.
    A transactional id being changed is in ``_busy``: other requests for it get
    CONCURRENT_TRANSACTIONS (retriable) until the change is applied.
    """

    def __init__(
        self,
        store: Store,
        *,
        partition: int = 0,
        partitions: int = 1,
        complete_group: GroupCompleter,
        notify: Callable[[], None],
        max_timeout_ms: int,
        abort_check_interval_ms: int,
        id_expiration_ms: int,
        remote_markers: RemoteMarkers | None = None,
        coordinator_epoch: int = 0,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """``partition`` of ``partitions`` (the topic is created with that many when it
        does not exist) is this shard's journal and its lane of producer ids.
        ``remote_markers`` writes a transaction's markers to partitions other brokers
        lead (brokers sharing partitions); None: every partition is led here.
        ``coordinator_epoch`` is this coordinator's epoch, written into every marker: a
        partition refuses the markers of an older coordinator
        (TRANSACTION_COORDINATOR_FENCED). ``check`` raises when this broker may not
        coordinate any more (its lease lapsed): markers are written only after it
        passed."""
        self._store = store
        self._coordinator_epoch = coordinator_epoch
        self._check = check
        self._complete_group = complete_group
        self._markers = Markers(
            store, epoch=coordinator_epoch, remote=remote_markers, check=check, notify=notify
        )
        self._max_timeout_ms = max_timeout_ms
        self._check_interval_s = abort_check_interval_ms / 1000
        self._id_expiration_ms = id_expiration_ms
        self.partition = partition
        self._partitions = partitions
        self._journal = Journal(store, TOPIC, partition=partition, partitions=partitions)
        self.state = TxnStateMap()
        self._next_id = 0
        self._load_ms = 0.0
        self._id_lock = asyncio.Lock()
        self._busy: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        """Runs the timeout task's next pass at once (a deferred completion)."""

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def replay_skipped(self) -> int:
        """Journal batches and records skipped because they could not be used."""
        return self._journal.skipped

    def load(self) -> None:
        """Replay the journal.

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        t0 = time.monotonic()
        for record in self._journal.replay():
            self._apply_at(record.offset, record.key or b"", record.value)
        named = max(self.state.by_producer_id, default=-1) + 1
        self._next_id = max(self.state.reserved_until, named)
        self._load_ms = (time.monotonic() - t0) * 1000

    def summary(self) -> str:
        """What the load found, as ``key=value`` log fields."""
        prepared = sum(md.state in PREPARED for md in self.state.txns.values())
        return (
            f"transactional_ids={len(self.state.txns)} prepared={prepared} "
            f"next_producer_id={self._next_id} coordinator_epoch={self._coordinator_epoch} "
            f"replay_skipped={self.replay_skipped} ms={self._load_ms:.0f}"
        )

    async def complete_prepared(self) -> None:
        """Complete the transactions found prepared (those that cannot complete now are
        retried by the timeout task)."""
        for md in list(self.state.txns.values()):
            if md.state in PREPARED:
                await self._try_complete(md)

    def run_timers(self) -> None:
        """Start the timeout task; its first pass, at once, completes the transactions
        still prepared."""
        self._wake.set()
        self._task = asyncio.create_task(self._expire_loop(), name=f"txn-timeouts-{self.partition}")

    async def start(self) -> None:
        """:meth:`load`, :meth:`complete_prepared`, :meth:`run_timers`.

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        self.load()
        log.info("txn.loaded partition=%d %s", self.partition, self.summary())
        await self.complete_prepared()
        self.run_timers()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    # -- journal -------------------------------------------------------------------------

    def _apply_at(self, offset: int, key: bytes, value: bytes | None) -> None:
        """Apply the record at ``offset``; one that fails is skipped (logged and
        counted), so neither a replay nor a live write can be wedged by it."""
        try:
            apply(self.state, key, value)
        except Exception as exc:
            self._journal.skip(offset, reason_of(exc))

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append ``records`` to ``__transaction_state`` and apply them once durable.

        Raises:
            TxnError: NOT_COORDINATOR when the journal cannot be written (this broker
                may not write it now, or the disk failed), as Kafka's transaction state
                manager answers: the client looks the coordinator up again.
        """
        try:
            last = self._journal.append(records)
            await self._journal.durable()
        except StorageError as exc:  # NotOwnerError included
            raise TxnError(
                f"the transaction state cannot be written here: {exc}", ErrorCode.not_coordinator
            ) from exc
        first = last - len(records) + 1
        for i, (key, value) in enumerate(records):
            self._apply_at(first + i, key, value)

    async def _put(self, old: TxnMetadata | None, new: TxnMetadata) -> TxnMetadata:
        if old is not None:
            check_transition(old, new)
        await self._write([txn_record(new)])
        return new

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, by any shard (reserving the next block
        of this shard's lane durably when the current one is used up).

        Raises:
            StorageError: the reservation could not be written.
        """
        async with self._id_lock:
            if self._next_id >= self.state.reserved_until:
                start = next_block(self._next_id, self.partition, self._partitions)
                await self._write([block_record(start + ID_BLOCK)])
                self._next_id = start
            pid = self._next_id
            self._next_id += 1
            return pid

    # -- requests ------------------------------------------------------------------------

    def _claim(self, tid: str) -> None:
        if tid in self._busy:
            raise TxnError(f"{tid} is being updated", ErrorCode.concurrent_transactions)
        self._busy.add(tid)

    def _checked(self, tid: str, producer_id: int, epoch: int) -> TxnMetadata:
        md = self.state.txns.get(tid)
        if md is None or md.producer_id != producer_id:
            raise TxnError(
                f"producer id {producer_id} is not that of {tid}",
                ErrorCode.invalid_producer_id_mapping,
            )
        if epoch != md.producer_epoch:
            raise TxnError(
                f"{tid}: epoch {epoch} is not the current {md.producer_epoch}",
                ErrorCode.producer_fenced,
            )
        if md.state in PREPARED:
            raise TxnError(f"{tid} is completing", ErrorCode.concurrent_transactions)
        return md

    async def init_producer_id(
        self, tid: str | None, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int]:
        """InitProducerId: a new producer id for an idempotent producer; for a
        transactional id, its producer id with the epoch bumped (aborting its open
        transaction first; a new id when the epoch is exhausted).

        Raises:
            TxnError: INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED (KIP-360 bump with a
                stale id/epoch), CONCURRENT_TRANSACTIONS.
            StorageError: the journal write failed.
        """
        if tid is None:
            return await self.allocate_producer_id(), 0
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise TxnError(
                f"transaction timeout {timeout_ms} ms not in (0, {self._max_timeout_ms}]",
                ErrorCode.invalid_transaction_timeout,
            )
        self._claim(tid)
        try:
            now = _now()
            md = self.state.txns.get(tid)
            if md is None:
                pid = await self.allocate_producer_id()
                new = TxnMetadata(tid, pid, 0, timeout_ms, TxnState.EMPTY, last_update_ms=now)
                await self._put(None, new)
                log.info("txn.producer_initialized transactional_id=%s producer_id=%d", tid, pid)
                return pid, 0
            if (
                producer_id == md.producer_id
                and producer_epoch == md.previous_epoch
                and md.state is TxnState.EMPTY
            ):
                return md.producer_id, md.producer_epoch  # a retry of the last bump
            if producer_id >= 0 and (
                producer_id != md.producer_id or producer_epoch != md.producer_epoch
            ):
                raise TxnError(
                    f"{tid}: producer {producer_id}/{producer_epoch} is not the current "
                    f"{md.producer_id}/{md.producer_epoch}",
                    ErrorCode.producer_fenced,
                )
            previous = md.producer_epoch
            if md.state in PREPARED:
                md = await self._complete(md)
            if md.state is TxnState.ONGOING:
                md = await self._abort(md, "fenced")
            pid, epoch = md.producer_id, md.producer_epoch + 1
            if epoch > MAX_EPOCH:
                pid, epoch = await self.allocate_producer_id(), 0
            new = replace(
                md, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                state=TxnState.EMPTY, last_update_ms=now,
                previous_epoch=previous if pid == md.producer_id else -1,
            )  # fmt: skip
            await self._put(md, new)
            log.info(
                "txn.epoch_bumped transactional_id=%s producer_id=%d epoch=%d",
                tid, pid, epoch,
            )  # fmt: skip
            return pid, epoch
        finally:
            self._busy.discard(tid)

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> None:
        """AddPartitionsToTxn: the partitions join the (possibly new) transaction.

        Raises:
            TxnError: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
                CONCURRENT_TRANSACTIONS.
            StorageError: the journal write failed.
        """
        await self._add(tid, producer_id, epoch, frozenset(partitions), frozenset())

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group_id: str) -> None:
        """AddOffsetsToTxn: the group's offset commit becomes part of the transaction.

        Raises:
            TxnError: as :meth:`add_partitions`.
            StorageError: the journal write failed.
        """
        await self._add(tid, producer_id, epoch, frozenset(), frozenset({group_id}))

    async def _add(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[tuple[str, int]],
        groups: frozenset[str],
    ) -> None:
        md = self._checked(tid, producer_id, epoch)
        ongoing = md.state is TxnState.ONGOING
        if ongoing and partitions <= md.partitions and groups <= md.groups:
            return
        self._claim(tid)
        try:
            now = _now()
            new = replace(
                md,
                state=TxnState.ONGOING,
                partitions=md.partitions | partitions,
                groups=md.groups | groups,
                txn_start_ms=md.txn_start_ms if ongoing else now,
                last_update_ms=now,
            )
            await self._put(md, new)
        finally:
            self._busy.discard(tid)

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort the open transaction (a retry of a completed end
        with the same outcome succeeds).

        Raises:
            TxnError: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
                CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE.
            StorageError: a journal or marker write failed.
        """
        md = self._checked(tid, producer_id, epoch)
        if md.state in COMPLETED and (md.state is TxnState.COMPLETE_COMMIT) == commit:
            return
        if md.state is not TxnState.ONGOING:
            raise TxnError(
                f"{tid}: cannot {'commit' if commit else 'abort'} in state {md.state}",
                ErrorCode.invalid_txn_state,
            )
        self._claim(tid)
        try:
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            prepared = await self._put(md, replace(md, state=target, last_update_ms=_now()))
            await self._complete_decided(prepared)
        finally:
            self._busy.discard(tid)

    async def _complete_decided(self, prepared: TxnMetadata) -> None:
        """Complete a transaction whose outcome is durable. As Kafka's coordinator, the
        producer's EndTxn succeeds once the outcome is: a completion that fails here (a
        partition moving between brokers, a marker not written in time) is logged and
        finished by the next pass of the timeout task, which is woken at once.

        Raises:
            TxnError: NOT_COORDINATOR when this broker may not coordinate any more (its
                lease lapsed, or a newer coordinator wrote the producer's markers): the
                client asks the new coordinator, which completes it.
        """
        try:
            await self._complete(prepared)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            stale = isinstance(exc, KafkaError) and exc.code in (
                ErrorCode.transaction_coordinator_fenced,
                ErrorCode.not_coordinator,
            )
            try:
                self._check()
            except StorageError:
                stale = True
            if stale:
                raise TxnError(
                    f"{prepared.transactional_id}: not its coordinator any more: {exc}",
                    ErrorCode.not_coordinator,
                ) from exc
            log.warning(
                "txn.completion_deferred transactional_id=%s producer_id=%d reason=%s",
                prepared.transactional_id, prepared.producer_id, reason_of(exc),
            )  # fmt: skip
            self._wake.set()

    async def _abort(self, md: TxnMetadata, reason: str) -> TxnMetadata:
        """Abort ``md``'s open transaction with the epoch bumped, fencing the producer
        that owns it."""
        epoch = min(md.producer_epoch + 1, MAX_EPOCH)
        prepared = await self._put(
            md,
            replace(md, producer_epoch=epoch, state=TxnState.PREPARE_ABORT, last_update_ms=_now()),
        )
        log.info(
            "txn.aborting transactional_id=%s producer_id=%d epoch=%d reason=%s",
            md.transactional_id, md.producer_id, epoch, reason,
        )  # fmt: skip
        return await self._complete(prepared)

    async def _try_complete(self, md: TxnMetadata) -> None:
        """Complete a prepared transaction found by start-up or the timeout task; on
        failure log it and leave it prepared, for the next pass to retry, so that one
        transaction cannot hold up the others or the broker's start."""
        tid = md.transactional_id
        self._busy.add(tid)
        try:
            await self._complete(md)
        except Exception as exc:
            log.warning(
                "txn.complete_failed transactional_id=%s producer_id=%d reason=%s",
                tid, md.producer_id, reason_of(exc),
            )  # fmt: skip
        finally:
            self._busy.discard(tid)

    async def _complete(self, md: TxnMetadata) -> TxnMetadata:
        """Write the markers of a prepared transaction, complete its groups, and record
        it complete."""
        commit = md.state is TxnState.PREPARE_COMMIT
        await self._write_markers(md, commit)
        for group in sorted(md.groups):
            await self._complete_group(
                group, md.producer_id, md.producer_epoch, commit, self._coordinator_epoch
            )
        done = replace(
            md,
            state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
            partitions=frozenset(),
            groups=frozenset(),
            txn_start_ms=-1,
            last_update_ms=_now(),
        )
        await self._put(md, done)
        log.info(
            "txn.ended transactional_id=%s producer_id=%d epoch=%d result=%s partitions=%d",
            md.transactional_id, md.producer_id, md.producer_epoch,
            "commit" if commit else "abort", len(md.partitions),
        )  # fmt: skip
        return done

    async def _write_markers(self, md: TxnMetadata, commit: bool) -> None:
        """See :meth:`.markers.Markers.write`."""
        await self._markers.write(md, commit)

    # -- produce path --------------------------------------------------------------------

    def check_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        """Validate a transactional batch: its producer must have an open transaction
        that includes the partition.

        Raises:
            TxnError: INVALID_PRODUCER_EPOCH for an old epoch, INVALID_TXN_STATE
                otherwise.
        """
        tid = self.state.by_producer_id.get(producer_id)
        md = self.state.txns.get(tid) if tid is not None else None
        if md is not None and epoch < md.producer_epoch:
            raise TxnError(
                f"producer {producer_id} epoch {epoch} is fenced by {md.producer_epoch}",
                ErrorCode.invalid_producer_epoch,
            )
        if (
            md is None
            or md.state is not TxnState.ONGOING
            or (topic, partition) not in md.partitions
        ):
            raise TxnError(
                f"{topic}-{partition} is not part of a transaction of producer {producer_id}",
                ErrorCode.invalid_txn_state,
            )

    # -- timeouts and expiry ---------------------------------------------------------------

    async def _expire_loop(self) -> None:
        while True:
            wait_s = self._check_interval_s
            if any(md.state in PREPARED for md in self.state.txns.values()):
                wait_s = min(wait_s, COMPLETION_RETRY_S)  # a completion failed: again soon
            # asyncio.timeout, not wait_for: a cancellation that comes as the wake does is
            # never lost (Python 3.11's wait_for can swallow it, and stop() would hang)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.expire(_now())
            except Exception:
                log.exception("txn.expire_failed")

    async def expire(self, now_ms: int) -> None:
        """Abort transactions open longer than their timeout (bumping the epoch, so the
        producer is fenced), finish prepared transactions whose completion failed
        earlier (markers and group completions are idempotent), and forget
        transactional ids idle past ``transactional.id.expiration.ms``. An abort or
        completion that fails is logged and retried by the next pass; the others go on.

        Raises:
            StorageError: a transactional id's expiry could not be written.
        """
        for tid in list(self.state.txns):
            md = self.state.txns.get(tid)  # earlier iterations awaited: re-read
            if md is None or tid in self._busy:
                continue
            timed_out = md.state is TxnState.ONGOING and now_ms - md.txn_start_ms > md.timeout_ms
            if timed_out:
                self._busy.add(tid)
                try:
                    await self._abort(md, "timeout")
                except Exception as exc:  # retried next pass; the others go on
                    log.warning(
                        "txn.abort_failed transactional_id=%s producer_id=%d reason=%s",
                        tid, md.producer_id, reason_of(exc),
                    )  # fmt: skip
                finally:
                    self._busy.discard(tid)
            elif md.state in PREPARED:
                await self._try_complete(md)
            elif (
                md.state in (TxnState.EMPTY, *COMPLETED)
                and now_ms - md.last_update_ms > self._id_expiration_ms
            ):
                await self._write([tombstone(tid)])
                log.info("txn.id_expired transactional_id=%s", tid)
