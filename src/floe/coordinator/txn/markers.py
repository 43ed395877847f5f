"""A transaction's markers: the COMMIT or ABORT control batch that ends it on each of
its partitions, written here to those this broker leads and by WriteTxnMarkers to
those other brokers lead, again until every owner wrote them (a partition may move
meanwhile). Each marker carries the coordinator epoch of the shard that writes it: a
partition refuses a marker older than the newest it has seen for the producer
(TRANSACTION_COORDINATOR_FENCED)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from floe.coordinator.txn.state import TxnError, TxnMetadata
from floe.errors import ErrorCode
from floe.protocol import batch
from floe.protocol.control import encode_marker
from floe.storage.interface import (
    NotOwnerError,
    PartitionLog,
    Store,
    UnknownTopicOrPartitionError,
)
from floe.storage.producer_state import InvalidProducerEpochError
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.coordinator.txn")

Partitions = list[tuple[str, int]]
RemoteMarkers = Callable[[Partitions, int, int, bool, int], Awaitable[Partitions]]
"""Writes a transaction's markers (partitions, producer id, epoch, commit, coordinator
epoch) to partitions other brokers lead; returns those to try again (their leader moved
or did not answer)."""
MARKERS_S = 30.0
"""How long a transaction's end waits for other brokers to write its markers."""
MARKERS_RETRY_S = 0.5
"""Pause between two rounds of a transaction's markers, while some are not written."""


class Markers:
    """The markers of one transaction coordinator shard (see the module docstring).

    Ownership: one per :class:`~.shard.TxnShard`, used from the broker's event loop.
    """

    def __init__(
        self,
        store: Store,
        *,
        epoch: int,
        remote: RemoteMarkers | None,
        check: Callable[[], None],
        notify: Callable[[], None],
    ) -> None:
        """``epoch``: the shard's coordinator epoch. ``remote`` writes to partitions
        other brokers lead (None: every partition is led here). ``check`` raises when
        this broker may not coordinate any more (its lease lapsed); ``notify`` wakes the
        fetches waiting for new data."""
        self._store = store
        self._epoch = epoch
        self._remote = remote
        self._check = check
        self._notify = notify

    async def write(self, md: TxnMetadata, commit: bool) -> None:
        """Write the transaction's markers to its partitions: here those led here,
        through ``remote`` those other brokers lead, again until every owner wrote them
        (a partition may move meanwhile, or be handed over as this writes: its new
        owner writes it).

        Raises:
            StorageError: a marker could not be made durable here.
            TxnError: the other brokers did not write them within :data:`MARKERS_S`
                (the transaction stays prepared; the timeout task completes it later).
            NotOwnerError: this broker may not coordinate any more (``check``).
            KafkaError: TRANSACTION_COORDINATOR_FENCED: a newer coordinator wrote this
                producer's markers (this one stops; the transaction is the newer's).
        """
        pending = sorted(md.partitions)
        deadline = time.monotonic() + MARKERS_S
        while True:
            self._check()  # a coordinator paused past its lease writes no more markers
            elsewhere = await self._write_here(md, commit, pending)
            if not elsewhere:
                return
            assert self._remote is not None
            pending = await self._remote(
                elsewhere, md.producer_id, md.producer_epoch, commit, self._epoch
            )
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise TxnError(
                    f"markers of {md.transactional_id} not written on "
                    f"{', '.join(f'{t}-{p}' for t, p in pending)} within {MARKERS_S:g} s",
                    ErrorCode.coordinator_load_in_progress,
                )
            await asyncio.sleep(MARKERS_RETRY_S)

    async def _write_here(self, md: TxnMetadata, commit: bool, pending: Partitions) -> Partitions:
        """Write the markers of the ``pending`` partitions led here, durably; returns
        those other brokers lead.

        Raises:
            StorageError: a marker could not be made durable here.
            NotOwnerError: a partition is led elsewhere and there is no ``remote``.
        """
        now = int(time.time() * 1000)
        written: list[PartitionLog] = []
        elsewhere: Partitions = []
        for topic, partition in pending:
            try:
                plog = self._store.partition(TopicName(topic), PartitionId(partition))
            except UnknownTopicOrPartitionError:
                continue  # deleted since it joined the transaction
            except NotOwnerError:
                if self._remote is None:
                    raise
                elsewhere.append((topic, partition))
                continue
            data = bytearray(
                encode_marker(md.producer_id, md.producer_epoch, commit, self._epoch, now)
            )
            try:
                plog.append(data, batch.scan(data), now)
            except InvalidProducerEpochError:
                log.warning(
                    "txn.marker_skipped transactional_id=%s topic=%s partition=%d",
                    md.transactional_id, topic, partition,
                )  # fmt: skip
                continue
            except NotOwnerError:  # being handed over: its next leader writes it
                if self._remote is None:
                    raise
                elsewhere.append((topic, partition))
                continue
            written.append(plog)
        if written:
            await self._store.wait_durable(written)
            self._notify()
        return elsewhere
