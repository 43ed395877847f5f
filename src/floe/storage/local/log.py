"""One partition's segmented log on local disk (:class:`LocalPartitionLog`).

Invariants:
    * segments are ordered by base offset and never overlap; the last one is active
      and is the only one appended to;
    * offsets are assigned densely at append (compaction may later leave gaps inside
      old segments; readers skip them);
    * ``recovery_point``: every offset below it is fdatasync'ed (with the indexes of
      sealed segments), so a restart after a crash only re-scans from there;
    * while a retention hold is set, retention and compaction leave every segment
      holding an offset at or above it untouched (DeleteRecords does not).
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from floe.config.topic import ResolvedTopicConfig
from floe.errors import InvalidRecordError
from floe.protocol.batch import BatchHeader, read_header, set_log_append_time
from floe.protocol.control import control_type
from floe.protocol.records import decode_batch, decode_keys
from floe.storage.interface import AppendResult, OffsetOutOfRangeError, StorageError
from floe.storage.local.meta import fsync_dir, read_offsets, write_offsets
from floe.storage.local.segment import Segment
from floe.storage.producer_state import AbortedTxn, ProducerEntry, ProducerStateManager
from floe.types import Offset, PartitionId, TimestampMs, TopicName

log = logging.getLogger(__name__)

LOG_START_FILE = "log-start-offset"
_I64 = struct.Struct(">q")
_MAX_RELATIVE = 2**31 - 1
"""Offsets relative to a segment's base are int32 in the index files: roll before."""


@dataclass
class FlushTicket:
    """What one fsync round does for one log: dup'ed fds (so a segment closed
    meanwhile stays valid) and the sizes and log end they will make durable."""

    log: LocalPartitionLog
    fds: list[int]
    sizes: list[tuple[Segment, int]]
    end_offset: int
    has_dir: bool


class LocalPartitionLog:
    """A partition log made of :class:`Segment` files in one directory.

    Owned by the :class:`~floe.storage.local.store.LocalStore` and driven from its
    event loop only; created when the store opens or creates the topic, closed by the
    store's ``close`` or ``delete_topic``. fsync work runs in threads on dup'ed fds
    handed out by :meth:`flush_ticket`, so nothing here is shared with a thread.
    """

    def __init__(
        self,
        topic: TopicName,
        partition: PartitionId,
        directory: Path,
        *,
        config: ResolvedTopicConfig,
        segments: list[Segment],
        log_start_offset: int,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self.directory = directory
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self._log_start = max(log_start_offset, segments[0].base_offset)
        self._size = sum(s.size for s in segments)
        self._dirty: dict[Segment, None] = {}
        self._dir_dirty = False
        self.closed = False
        self.recovery_point = self._active.next_offset
        self._hold: int | None = None
        self._held_bytes = 0
        self.set_config(config)
        self._producers = ProducerStateManager()
        self._rebuild_producer_state()

    def set_config(self, config: ResolvedTopicConfig) -> None:
        """Apply (new) topic configs; the hot path reads the cached values."""
        self._config = config
        self._segment_bytes = config.segment_bytes
        self._segment_ms = config.segment_ms
        self._index_interval = config.index_interval_bytes
        self._log_append_time = config.log_append_time
        self._compact = config.compact

    # -- PartitionLog properties -----------------------------------------------------

    @property
    def topic(self) -> TopicName:
        return self._topic

    @property
    def partition(self) -> PartitionId:
        return self._partition

    @property
    def log_start_offset(self) -> Offset:
        return Offset(self._log_start)

    @property
    def log_end_offset(self) -> Offset:
        return Offset(self._active.next_offset)

    @property
    def high_watermark(self) -> Offset:
        return Offset(self._active.next_offset)

    @property
    def last_stable_offset(self) -> Offset:
        """The first offset of the oldest open transaction, else the high watermark."""
        first = self._producers.first_unstable_offset()
        end = self._active.next_offset
        return Offset(end if first is None else min(first, end))

    def aborted_transactions(self, start: Offset, end: Offset) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end)."""
        return self._producers.aborted_between(start, end)

    def producers(self) -> list[ProducerEntry]:
        """The producers this partition remembers (read-only use)."""
        return list(self._producers.producers.values())

    def expire_producers(self, now_ms: int, max_idle_ms: int) -> int:
        """Forget producers idle for longer than ``max_idle_ms``; returns how many."""
        return self._producers.expire(now_ms, max_idle_ms)

    @property
    def durable_offset(self) -> Offset:
        """Every offset below it is fsynced (the recovery point, capped at the log
        end)."""
        return Offset(min(self.recovery_point, self._active.next_offset))

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def config(self) -> ResolvedTopicConfig:
        return self._config

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first (read-only use: retention, compaction, tests)."""
        return self._segments

    # -- append ----------------------------------------------------------------------

    def append(self, buf: bytearray, headers: list[BatchHeader], now_ms: int) -> AppendResult:
        """See :meth:`floe.storage.interface.PartitionLog.append`.

        Raises:
            InvalidRecordError: no batches, a null key on a compacted topic, or
                batches spanning more offsets than a segment can index.
            StorageError: the write failed; nothing was appended.
        """
        if not headers:
            raise InvalidRecordError("no record batches to append")
        producers = self._producers
        if len(headers) == 1 and headers[0].producer_id >= 0:
            # Produce sends one batch per partition (the edge enforces it for
            # producer ids); multi-batch appends come from tests and tools only.
            h0 = headers[0]
            if h0.is_control:
                producers.check_marker(h0.producer_id, h0.producer_epoch)
            else:
                dup = producers.check(h0)
                if dup is not None:
                    return AppendResult(
                        Offset(dup.base_offset), Offset(dup.last_offset), TimestampMs(-1),
                        Offset(self._log_start),
                    )  # fmt: skip
        if self._compact:
            _check_keys(buf, headers)
        span = sum(h.last_offset_delta + 1 for h in headers)
        if span > _MAX_RELATIVE:
            raise InvalidRecordError(f"batches span {span} offsets, more than one segment holds")
        seg = self._active
        if seg.size and (
            seg.size + len(buf) > self._segment_bytes
            or now_ms - seg.roll_base_ms >= self._segment_ms
            or seg.next_offset + span - seg.base_offset > _MAX_RELATIVE
        ):
            seg = self.roll()
        base = offset = seg.next_offset
        pack = _I64.pack_into
        lat = self._log_append_time
        for h in headers:
            h.base_offset = offset
            pack(buf, h.position, offset)
            if lat:
                set_log_append_time(buf, h, now_ms)
            offset += h.last_offset_delta + 1
        if seg.roll_base_ms < 0:
            seg.roll_base_ms = now_ms
        seg.write(buf, headers, self._index_interval)
        self._size += len(buf)
        for h in headers:
            if h.producer_id >= 0:
                kind = control_type(buf, h) if h.is_control else -1
                producers.apply(h, now_ms, kind)
        self._dirty[seg] = None
        return AppendResult(
            Offset(base),
            Offset(offset - 1),
            TimestampMs(now_ms if lat else -1),
            Offset(self._log_start),
        )

    def roll(self) -> Segment:
        """Seal the active segment and start a new one at the log end (no-op on an
        empty active segment)."""
        old = self._active
        if not old.size:
            return old
        old.seal()
        new = Segment(self.directory, old.next_offset)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._active = new
        self._dirty[old] = None  # its indexes are fsynced by the next round
        self._dir_dirty = True
        log.info(
            "log.segment.rolled topic=%s partition=%d base_offset=%d",
            self._topic, self._partition, new.base_offset,
        )  # fmt: skip
        return new

    def maybe_roll(self, now_ms: int) -> None:
        """Roll a non-empty active segment older than ``segment.ms``."""
        seg = self._active
        if seg.size and now_ms - seg.roll_base_ms >= self._segment_ms:
            self.roll()

    def _rebuild_producer_state(self) -> None:
        """Replay the batch headers of the whole log into the producer state (control
        batches are read to learn commit or abort)."""
        producers = self._producers
        for seg in self._segments:
            for h in seg.iter_headers():
                if h.producer_id < 0:
                    continue
                kind = -1
                if h.is_control:
                    data = seg.read_batch(h)
                    kind = control_type(data, read_header(data))
                producers.apply(h, h.max_timestamp, kind)
        producers.truncate_head(self._log_start)

    # -- read ------------------------------------------------------------------------

    def read(self, offset: Offset, max_bytes: int, *, min_one: bool = True) -> bytes:
        """See :meth:`floe.storage.interface.PartitionLog.read`.

        Raises:
            OffsetOutOfRangeError: ``offset`` < log start or > log end.
            StorageError: a segment could not be read.
        """
        end = self._active.next_offset
        if offset < self._log_start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self._log_start}, {end}] of "
                f"{self._topic}-{self._partition}"
            )
        if offset == end:
            return b""
        segments = self._segments
        try:
            for i in range(max(bisect_right(self._bases, offset) - 1, 0), len(segments)):
                data = segments[i].read(offset, max_bytes, min_one)
                if data is not None:
                    return data
        except OSError as exc:
            raise StorageError(f"read of {self._topic}-{self._partition} failed: {exc}") from exc
        return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[Offset, TimestampMs] | None:
        """First record at or after the log start with timestamp >= ``timestamp_ms``:
        the time index finds where to scan from, the batch is decoded for the exact
        record."""
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            start = seg.offset_index.lookup(seg.time_index.lookup(timestamp_ms))
            for h in seg.iter_headers(start):
                if h.max_timestamp < timestamp_ms or h.next_offset <= self._log_start:
                    continue
                found = self._first_record(seg, h, lambda ts: ts >= timestamp_ms)
                if found is not None:
                    return found
        return None

    def max_timestamp(self) -> tuple[Offset, TimestampMs] | None:
        """The first record carrying the largest timestamp; None for an empty log."""
        if self._active.next_offset == self._log_start:
            return None
        best = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        target = best.max_timestamp
        start = best.offset_index.lookup(best.offset_of_max_timestamp)
        for h in best.iter_headers(start):
            if h.max_timestamp == target:
                found = self._first_record(best, h, lambda ts: ts == target)
                if found is not None:
                    return found
        return None

    def _first_record(
        self, seg: Segment, header: BatchHeader, match: Callable[[int], bool]
    ) -> tuple[Offset, TimestampMs] | None:
        data = seg.read_batch(header)
        for r in decode_batch(data, read_header(data)):
            if r.offset >= self._log_start and match(r.timestamp):
                return Offset(r.offset), TimestampMs(r.timestamp)
        return None

    def end_for_bytes(self, start: Offset, end: Offset, max_bytes: int) -> Offset:
        """See :meth:`floe.storage.interface.PartitionLog.end_for_bytes`. Offsets below
        the log start cost nothing. Whole segments are counted by their in-memory size;
        only the first and the last segment touched are located, each through its
        offset index and a few batch headers.

        Raises:
            ValueError: an empty range (``start >= end``).
        """
        if start >= end:
            raise ValueError(f"empty range [{start}, {end}) of {self._topic}-{self._partition}")
        first = max(int(start), self._log_start)
        budget = max_bytes
        reached = first
        counting = False
        for seg in self._segments[max(bisect_right(self._bases, first) - 1, 0) :]:
            if seg.base_offset >= end:
                break
            position = 0
            if not counting:
                h = seg.locate(first)
                if h is None:  # ``first`` lies after this segment's last batch
                    continue
                if h.base_offset >= end:
                    break
                if h.size > budget:  # at least the batch holding ``start``
                    return Offset(min(h.next_offset, end))
                counting = True
                position = h.position
            if seg.size - position > budget:
                found = seg.boundary_within(position, position + budget, end)
                return Offset(min(reached if found is None else found, end))
            budget -= seg.size - position
            reached = seg.next_offset
        return end

    # -- retention hold ---------------------------------------------------------------

    @property
    def retention_hold(self) -> Offset | None:
        """Retention and compaction keep every segment holding an offset at or above
        it; None: no hold."""
        return None if self._hold is None else Offset(self._hold)

    def set_retention_hold(self, offset: Offset | None) -> None:
        """Hold (or with None release) retention and compaction at ``offset``.

        Raises:
            ValueError: a negative offset.
        """
        if offset is not None and offset < 0:
            raise ValueError(f"negative retention hold {offset}")
        self._hold = None if offset is None else int(offset)
        if offset is None:
            self.record_held_bytes(0)

    @property
    def held_bytes(self) -> int:
        """Bytes the last retention run would have deleted but kept for the hold."""
        return self._held_bytes

    def record_held_bytes(self, held: int) -> None:
        """Set :attr:`held_bytes` (by retention), logging each change once."""
        if held != self._held_bytes:
            self._held_bytes = held
            log.info(
                "log.retention.held topic=%s partition=%d hold=%s held_bytes=%d",
                self._topic, self._partition, self._hold, held,
            )  # fmt: skip

    # -- log start, segment removal and replacement -----------------------------------

    def delete_records(self, before: Offset) -> Offset:
        """See :meth:`floe.storage.interface.PartitionLog.delete_records`; the new log
        start is checkpointed durably before segments below it are removed.

        Raises:
            OffsetOutOfRangeError: ``before`` beyond the high watermark or below -1.
        """
        hw = self._active.next_offset
        target = hw if before == -1 else int(before)
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(f"delete_records offset {before} beyond {hw}")
        if target <= self._log_start:
            return Offset(self._log_start)
        self._log_start = target
        write_offsets(self.directory / LOG_START_FILE, {"log_start_offset": target})
        while len(self._segments) > 1 and self._segments[1].base_offset <= target:
            self.drop_oldest_segment()
        self._producers.truncate_head(self._log_start)
        return Offset(self._log_start)

    def drop_oldest_segment(self) -> None:
        """Delete the oldest segment (never the active one) and advance the log start
        to the next segment's base offset."""
        seg = self._segments.pop(0)
        self._bases.pop(0)
        self._dirty.pop(seg, None)
        self._size -= seg.size
        seg.delete()
        self._log_start = max(self._log_start, self._segments[0].base_offset)
        self._producers.truncate_head(self._log_start)
        log.info(
            "log.segment.deleted topic=%s partition=%d base_offset=%d log_start_offset=%d",
            self._topic, self._partition, seg.base_offset, self._log_start,
        )  # fmt: skip

    def replace_segment(self, old: Segment, cleaned: Path) -> None:
        """Swap ``cleaned`` (an fsynced rewrite of ``old``) in place of ``old``.

        The old indexes are unlinked before the rename, so a crash in between leaves a
        log without indexes (rebuilt on load), never a new log with stale indexes.
        """
        i = self._segments.index(old)
        old.offset_index.path.unlink(missing_ok=True)
        old.time_index.path.unlink(missing_ok=True)
        old.close()
        os.replace(cleaned, old.path)
        fsync_dir(self.directory)
        new = Segment(self.directory, old.base_offset)
        new.recover(self._index_interval, old.base_offset)
        new.fsync_indexes()
        self._segments[i] = new
        self._dirty.pop(old, None)
        self._size += new.size - old.size

    # -- durability ------------------------------------------------------------------

    def flush_ticket(self) -> FlushTicket | None:
        """Dup the fds of segments with unsynced bytes (and the directory after a roll)
        for one fsync round; None when there is nothing to sync."""
        if self.closed or not (self._dirty or self._dir_dirty):
            return None
        fds: list[int] = []
        sizes: list[tuple[Segment, int]] = []
        for seg in self._dirty:
            fds.append(os.dup(seg.fd))
            if seg is not self._active:
                fds.append(os.dup(seg.offset_index.fd))
                fds.append(os.dup(seg.time_index.fd))
            sizes.append((seg, seg.size))
        has_dir = self._dir_dirty
        if has_dir:
            fds.append(os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY))
            self._dir_dirty = False
        return FlushTicket(self, fds, sizes, self._active.next_offset, has_dir)

    def flushed(self, ticket: FlushTicket) -> None:
        """Record a completed fsync round."""
        for seg, size in ticket.sizes:
            seg.synced_size = max(seg.synced_size, size)
            if seg.synced_size >= seg.size:
                self._dirty.pop(seg, None)
        self.recovery_point = max(self.recovery_point, ticket.end_offset)

    def flush_failed(self, ticket: FlushTicket) -> None:
        """Keep the directory marked dirty after a failed round."""
        if ticket.has_dir:
            self._dir_dirty = True

    @property
    def dirty(self) -> bool:
        return bool(self._dirty or self._dir_dirty)

    def close(self) -> None:
        """Seal the active segment's time index and close every file (the store
        fsyncs first)."""
        self.closed = True
        self._active.seal()
        for seg in self._segments:
            seg.close()


def _check_keys(buf: bytearray, headers: list[BatchHeader]) -> None:
    """Raises: InvalidRecordError: a record without a key (compacted topics only)."""
    for h in headers:
        if h.is_control:
            continue
        for offset, key, _ in decode_keys(buf, h):
            if key is None:
                raise InvalidRecordError(
                    f"compacted topic requires a key (record offset delta "
                    f"{offset - h.base_offset} has none)"
                )


def load_log_start(directory: Path) -> int:
    return read_offsets(directory / LOG_START_FILE).get("log_start_offset", 0)
