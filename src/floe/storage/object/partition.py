"""A partition of the object-storage engine: the cache's log, with the bucket's
durable offset, and below the cache's first segment, when segments left the cache
(``storage.s3.cache.max.bytes``), the partition objects that still hold the records.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from floe.config.topic import ResolvedTopicConfig
from floe.errors import ErrorCode
from floe.protocol.batch import BatchHeader
from floe.storage.interface import (
    AppendResult,
    NotCachedError,
    NotOwnerError,
    OffsetOutOfRangeError,
    StorageError,
)
from floe.storage.local.log import LocalPartitionLog
from floe.storage.object import owner_mark
from floe.storage.object.layout import PartObject
from floe.storage.object.reads import ObjectReader
from floe.storage.producer_state import AbortedTxn, ProducerEntry
from floe.types import Offset, PartitionId, TimestampMs, TopicName

log = logging.getLogger(__name__)


class ObjectPartitionLog:
    """A partition of the object store: the local cache's log, whose durable offset is
    what the bucket holds (``uploaded``).

    ``tiered_start``: the log start when the records of ``[tiered_start, cache start)``
    are in partition objects only (None when the cache holds the whole log). Reads and
    timestamp lookups there raise :class:`NotCachedError`, whose ``load`` reads the
    objects; the broker awaits it off the request's synchronous path.
    """

    def __init__(
        self,
        local: LocalPartitionLog,
        topic_id: uuid.UUID,
        uploaded: int,
        *,
        record_log_start: Callable[[ObjectPartitionLog], None],
        check_writable: Callable[[], None],
        objects: Callable[[], list[PartObject]],
        reader: ObjectReader,
        tiered_start: int | None = None,
        durable_reads: bool = False,
    ) -> None:
        """``durable_reads`` (a cluster): readers see only records in the bucket, so
        that none they saw can vanish when another broker takes over (Kafka's high
        watermark: what the replicas have, not what the leader appended)."""
        self.local = local
        self.durable_reads = durable_reads
        self.topic_id = topic_id
        self.uploaded = uploaded
        self.committed: int | None = None
        """In a cluster: the partition's committed end in the metadata store as this
        broker last saw it (None: none yet), the start of its next commit."""
        self.fenced: str | None = None
        """Why this broker may not lead the partition any more (its commit was refused:
        another broker owns it now), or None."""
        self.closed = False
        self.tiered_start = tiered_start
        self._record_log_start = record_log_start
        self._check_writable = check_writable
        self._objects = objects
        self._reader = reader
        self.bytes_moved = 0
        """Bytes appended and read since this broker opened the partition: its load,
        which the cluster's balancing spreads."""
        self._marked: tuple[int, int] | None = None

    def mark_owner(self, broker: int, epoch: int) -> None:
        """Record in the cache that its records are written under ``(broker, epoch)``
        (:mod:`~floe.storage.object.owner_mark`; the file is written once per epoch)."""
        if epoch and self._marked != (broker, epoch):
            owner_mark.write(self.local.directory, broker, epoch)
            self._marked = (broker, epoch)

    @property
    def owner_epoch(self) -> int:
        """The ownership epoch its cache was last marked with (0: none yet)."""
        return 0 if self._marked is None else self._marked[1]

    def forget_owner_mark(self) -> None:
        """The epoch marked is not its owner's (any more): the next upload asks again."""
        self._marked = None

    def fence(self, reason: str) -> None:
        """Stop leading the partition: appends, reads and acks=all waits get
        NOT_LEADER_OR_FOLLOWER from now on (the uploaded offset stays where the last
        commit put it)."""
        if self.fenced is None:
            self.fenced = reason
            log.error(
                "storage.partition.fenced partition=%s-%d committed=%s reason=%s",
                self.topic, self.partition, self.committed, reason,
            )  # fmt: skip

    def check_committable(self) -> None:
        """Raises:
        NotOwnerError: the partition is fenced (:meth:`fence`).
        """
        if self.fenced is not None:
            raise NotOwnerError(f"partition {self.topic}-{self.partition}: {self.fenced}")

    def remote_objects(self) -> list[PartObject]:
        """The objects holding ``[tiered_start, cache start)``, in offset order."""
        start = self.tiered_start
        if start is None:
            return []
        cached = self.local.log_start_offset
        return [o for o in self._objects() if o.end > start and o.base < cached]

    def remote_bytes(self, obj: PartObject) -> int:
        """About how many bytes of ``obj`` hold records of ``[tiered_start, cache
        start)``: its size in proportion to the offsets of it in that range (an object
        may also hold cached records, or records below the log start)."""
        start = self.tiered_start
        if start is None:
            return 0
        inside = min(obj.end, self.local.log_start_offset) - max(obj.base, start)
        return max(obj.size * inside // max(obj.end - obj.base, 1), 0)

    def trim_remote(self, start: int) -> None:
        """Move the log start up to ``start`` inside the part only the bucket holds
        (remote retention, DeleteRecords); at or past the cache start, none is left."""
        if self.tiered_start is None or start <= self.tiered_start:
            return
        self.tiered_start = start if start < self.local.log_start_offset else None

    @property
    def topic(self) -> TopicName:
        return self.local.topic

    @property
    def partition(self) -> PartitionId:
        return self.local.partition

    @property
    def log_start_offset(self) -> Offset:
        cached = self.local.log_start_offset
        if self.tiered_start is None:
            return cached
        return Offset(min(self.tiered_start, cached))

    @property
    def local_log_start_offset(self) -> Offset:
        return self.local.log_start_offset

    @property
    def latest_tiered_offset(self) -> Offset:
        """Everything uploaded is in the bucket (WAL or partition objects)."""
        return Offset(max(self.durable_offset, self.log_start_offset) - 1)

    @property
    def log_end_offset(self) -> Offset:
        return self.local.log_end_offset

    @property
    def high_watermark(self) -> Offset:
        if self.durable_reads:
            return Offset(min(self.local.high_watermark, self.durable_offset))
        return self.local.high_watermark

    @property
    def last_stable_offset(self) -> Offset:
        if self.durable_reads:
            return Offset(min(self.local.last_stable_offset, self.high_watermark))
        return self.local.last_stable_offset

    @property
    def durable_offset(self) -> Offset:
        return Offset(min(self.uploaded, self.local.log_end_offset))

    @property
    def durability_failure(self) -> ErrorCode:
        """NOT_LEADER_OR_FOLLOWER once another broker took the partition over (what
        was not committed is not part of the log); KAFKA_STORAGE_ERROR once this
        broker's WAL is fenced for good (another broker writes its prefix: nothing more
        is written); else NOT_ENOUGH_REPLICAS_AFTER_APPEND: the records stay queued and
        the next upload writes them, or, its lease lapsing, an upload in flight may
        have (see :class:`~floe.storage.interface.PartitionLog`)."""
        if self.fenced is not None:
            return ErrorCode.not_leader_or_follower
        try:
            self._check_writable()
        except NotOwnerError:
            return ErrorCode.not_enough_replicas_after_append
        except StorageError:
            return ErrorCode.kafka_storage_error
        return ErrorCode.not_enough_replicas_after_append

    @property
    def size_bytes(self) -> int:
        """The cache's bytes and those of the objects holding what it no longer does."""
        return self.local.size_bytes + sum(self.remote_bytes(o) for o in self.remote_objects())

    @property
    def config(self) -> ResolvedTopicConfig:
        return self.local.config

    @property
    def retention_hold(self) -> Offset | None:
        return self.local.retention_hold

    def set_retention_hold(self, offset: Offset | None) -> None:
        self.local.set_retention_hold(offset)

    @property
    def held_bytes(self) -> int:
        return self.local.held_bytes

    def end_for_bytes(self, start: Offset, end: Offset, max_bytes: int) -> Offset:
        """The local log's answer; below the cache, whole objects are counted (an
        object's ends are batch boundaries; its inside is not read)."""
        cached = self.local.log_start_offset
        if self.tiered_start is None or start >= cached:
            return self.local.end_for_bytes(start, end, max_bytes)
        if start >= end:
            raise ValueError(f"empty range [{start}, {end}) of {self.topic}-{self.partition}")
        budget = max_bytes
        reached = int(start)
        for obj in self.remote_objects():
            if obj.end <= start:
                continue
            if obj.base >= end:
                break
            if obj.size > budget:
                return Offset(min(obj.end, end) if reached == start else reached)
            budget -= obj.size
            reached = obj.end
        if reached >= end:
            return end
        if budget <= 0 or reached < cached:
            return Offset(reached)
        return self.local.end_for_bytes(Offset(reached), end, budget)

    def aborted_transactions(self, start: Offset, end: Offset) -> list[AbortedTxn]:
        return self.local.aborted_transactions(start, end)

    def producers(self) -> list[ProducerEntry]:
        return self.local.producers()

    def append(self, buf: bytearray, headers: list[BatchHeader], now_ms: int) -> AppendResult:
        """Append to the cache (the WAL writer uploads it).

        Raises:
            StorageError: another broker took over the bucket prefix (fenced).
            (and what the local log's append raises)
        """
        self.check_committable()
        self._check_writable()
        result = self.local.append(buf, headers, now_ms)
        self.bytes_moved += len(buf)
        return result

    def read(self, offset: Offset, max_bytes: int, *, min_one: bool = True) -> bytes:
        """The cache's batches; below the cache start, :class:`NotCachedError` whose
        ``load`` reads them from the object holding ``offset``."""
        if self.tiered_start is None or offset >= self.local.log_start_offset:
            data = self.local.read(offset, max_bytes, min_one=min_one)
            self.bytes_moved += len(data)
            return data
        self._check_start(offset)

        async def load() -> bytes:
            self._check_start(offset)
            data = await self._reader.read(self.remote_objects(), offset, max_bytes, min_one)
            self.bytes_moved += len(data)
            return data

        return self._not_cached(f"offset {offset}", load)

    def _check_start(self, offset: int) -> None:
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )

    def _not_cached(self, what: str, load: Callable[[], Awaitable[Any]]) -> NoReturn:
        raise NotCachedError(f"{what} of {self.topic}-{self.partition} is in the bucket", load)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[Offset, TimestampMs] | None:
        """Objects come first when one holds a timestamp at least ``timestamp_ms``."""
        remote = self.remote_objects()
        if not any(o.max_timestamp >= timestamp_ms for o in remote):
            return self.local.offset_for_timestamp(timestamp_ms)

        async def load() -> tuple[Offset, TimestampMs] | None:
            found = await self._reader.first_at_or_after(
                self.remote_objects(), int(self.log_start_offset), timestamp_ms
            )
            if found is None:
                return self.local.offset_for_timestamp(timestamp_ms)
            return Offset(found[0]), TimestampMs(found[1])

        return self._not_cached(f"timestamp {timestamp_ms}", load)

    def max_timestamp(self) -> tuple[Offset, TimestampMs] | None:
        """The first record with the largest timestamp: in an object when one holds a
        timestamp at least the cache's largest (objects hold the older records)."""
        cached = self.local.max_timestamp()
        best = max(self.remote_objects(), key=lambda o: o.max_timestamp, default=None)
        if best is None or best.max_timestamp < 0:
            return cached
        if cached is not None and best.max_timestamp < cached[1]:
            return cached
        target = best.max_timestamp

        async def load() -> tuple[Offset, TimestampMs] | None:
            found = await self._reader.first_at_or_after(
                self.remote_objects(), int(self.log_start_offset), target
            )
            if found is None:
                return self.local.max_timestamp()
            return Offset(found[0]), TimestampMs(found[1])

        return self._not_cached("the largest timestamp", load)

    def delete_records(self, before: Offset) -> Offset:
        """Advance the log start, in the cache (or only below it) then in the bucket.

        Raises:
            OffsetOutOfRangeError: beyond the high watermark.
            StorageError: the bucket could not record it (retrying is safe).
        """
        cached = self.local.log_start_offset
        if self.tiered_start is not None and 0 <= before < cached:
            self.trim_remote(int(before))
        else:
            self.tiered_start = None
            self.local.delete_records(before)
        self._record_log_start(self)
        return self.log_start_offset
