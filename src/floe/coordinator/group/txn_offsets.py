"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98): staged per producer
in the group's journal, made committed (or dropped) when the transaction's marker
reaches the group's coordinator, and then marked done (a marker record), so that a
restart neither loses a staged offset nor commits one twice. Kafka's group coordinator
does the same with its transactional offset records.

Ownership: one per :class:`~.shard.GroupShard`, which checks a request (group, member,
generation, partitions) before it stages anything; used from the broker's event loop
only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from floe.coordinator.group.api import OffsetCommit
from floe.coordinator.group.offsets import GroupData, PersistedGroups, TopicPartition
from floe.coordinator.group.records import (
    Key,
    OffsetKey,
    OffsetValue,
    TxnMarkerKey,
    TxnMarkerValue,
    TxnOffsetKey,
    TxnOffsetValue,
    Value,
)
from floe.errors import ErrorCode

log = logging.getLogger("floe.coordinator.group")

Record = tuple[Key, Value | None]


class TxnOffsets:
    """See the module docstring."""

    def __init__(
        self,
        persisted: PersistedGroups,
        *,
        data: Callable[[str], GroupData],
        write: Callable[[list[Record]], Awaitable[None]],
        clock: Callable[[], int],
    ) -> None:
        """``persisted``: the shard's groups; ``data(group_id)`` one group's persisted
        state; ``write`` appends records to the shard's journal and applies them once
        durable."""
        self._persisted = persisted
        self._data = data
        self._write = write
        self._clock = clock

    async def stage(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: list[OffsetCommit],
        errors: dict[TopicPartition, ErrorCode],
    ) -> dict[TopicPartition, ErrorCode]:
        """Stage ``offsets`` (those ``errors`` lets through) for ``producer_id``; they
        become committed offsets when :meth:`complete` commits. An older epoch than one
        already staged is refused (INVALID_PRODUCER_EPOCH): a fenced producer.

        Raises:
            StorageError: the journal append failed.
        """
        staged = self._data(group_id).pending.get(producer_id, {})
        if any(v.producer_epoch > producer_epoch for v in staged.values()):
            return {(o.topic, o.partition): ErrorCode.invalid_producer_epoch for o in offsets}
        now = self._clock()
        await self._write(
            [
                (
                    TxnOffsetKey(group_id, producer_id, o.topic, o.partition),
                    TxnOffsetValue(
                        producer_epoch, OffsetValue(o.offset, o.leader_epoch, o.metadata, now)
                    ),
                )
                for o in offsets
                if errors[(o.topic, o.partition)] is ErrorCode.none
            ]
        )
        return errors

    async def complete(
        self, group_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Make the offsets staged by ``producer_id`` committed (or drop them), then
        write the transaction marker. Idempotent: with nothing staged only the marker
        is written again.

        Raises:
            StorageError: the journal append failed.
        """
        staged = self._data(group_id).pending.get(producer_id, {})
        now = self._clock()
        records: list[Record] = []
        for (topic, partition), v in staged.items():
            if commit:
                committed = OffsetValue(
                    v.offset.offset, v.offset.leader_epoch, v.offset.metadata, now
                )
                records.append((OffsetKey(group_id, topic, partition), committed))
            records.append((TxnOffsetKey(group_id, producer_id, topic, partition), None))
        records.append(
            (TxnMarkerKey(group_id, producer_id), TxnMarkerValue(producer_epoch, commit))
        )
        completed = len(staged)  # the write empties ``staged`` (it is the live state)
        await self._write(records)
        log.info(
            "group.txn_offsets.completed group=%s producer_id=%d epoch=%d commit=%s partitions=%d",
            group_id, producer_id, producer_epoch, commit, completed,
        )  # fmt: skip

    async def complete_producer(self, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """A transaction marker for this shard's partition (WriteTxnMarkers from the
        transaction coordinator's broker): complete the transaction in every group with
        offsets staged by ``producer_id``; returns how many.

        Raises:
            StorageError: the journal append failed.
            KafkaError: NOT_COORDINATOR: the partition is not led here any more.
        """
        groups = [g for g, data in self._persisted.groups.items() if producer_id in data.pending]
        for gid in groups:
            await self.complete(gid, producer_id, producer_epoch, commit)
        return len(groups)
