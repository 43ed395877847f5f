"""A partition of the object-storage engine: the cache's log, with the bucket's
durable offset."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from floe.config.topic import ResolvedTopicConfig
from floe.protocol.batch import BatchHeader
from floe.storage.interface import AppendResult, PartitionLog
from floe.storage.producer_state import AbortedTxn, ProducerEntry
from floe.types import Offset, PartitionId, TimestampMs, TopicName


class ObjectPartitionLog:
    """A partition of the object store: the local cache's log, whose durable offset is
    what the bucket holds (``uploaded``)."""

    def __init__(
        self,
        local: PartitionLog,
        topic_id: uuid.UUID,
        uploaded: int,
        *,
        record_log_start: Callable[[ObjectPartitionLog], None],
        check_writable: Callable[[], None],
    ) -> None:
        self.local = local
        self.topic_id = topic_id
        self.uploaded = uploaded
        self.closed = False
        self._record_log_start = record_log_start
        self._check_writable = check_writable

    @property
    def topic(self) -> TopicName:
        return self.local.topic

    @property
    def partition(self) -> PartitionId:
        return self.local.partition

    @property
    def log_start_offset(self) -> Offset:
        return self.local.log_start_offset

    @property
    def log_end_offset(self) -> Offset:
        return self.local.log_end_offset

    @property
    def high_watermark(self) -> Offset:
        return self.local.high_watermark

    @property
    def last_stable_offset(self) -> Offset:
        return self.local.last_stable_offset

    @property
    def durable_offset(self) -> Offset:
        return Offset(min(self.uploaded, self.local.log_end_offset))

    @property
    def size_bytes(self) -> int:
        return self.local.size_bytes

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
        return self.local.end_for_bytes(start, end, max_bytes)

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
        self._check_writable()
        return self.local.append(buf, headers, now_ms)

    def read(self, offset: Offset, max_bytes: int, *, min_one: bool = True) -> bytes:
        return self.local.read(offset, max_bytes, min_one=min_one)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[Offset, TimestampMs] | None:
        return self.local.offset_for_timestamp(timestamp_ms)

    def max_timestamp(self) -> tuple[Offset, TimestampMs] | None:
        return self.local.max_timestamp()

    def delete_records(self, before: Offset) -> Offset:
        """Advance the log start, in the cache then in the bucket.

        Raises:
            OffsetOutOfRangeError: beyond the high watermark.
            StorageError: the bucket could not record it (retrying is safe).
        """
        start = self.local.delete_records(before)
        self._record_log_start(self)
        return start
