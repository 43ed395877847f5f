"""One partition's segmented log on local disk (:class:`LocalPartitionLog`).

Invariants:
    * segments are ordered by base offset and never overlap; the last one is active
      and is the only one appended to;
    * offsets are assigned densely at append (compaction may later leave gaps inside
      old segments; readers skip them);
    * ``recovery_point``: every offset below it is fdatasync'ed (with the indexes of
      sealed segments), so a restart after a crash only re-scans from there;
    * while a retention hold is set, retention and compaction leave every segment
      holding an offset at or above it untouched (DeleteRecords does not);
    * ``offline``: once a write, index write or fsync of the partition's files failed,
      the log refuses appends, fsync waiters and deletions with KAFKA_STORAGE_ERROR
      until the broker restarts and recovers it (Kafka's offline log directory). After
      a failed fsync the page cache state is unknown, so no fsync is retried and
      ``durable_offset`` never moves again; in-memory sizes and offsets always match
      what reached the files, so reads stay consistent meanwhile.

Offset lookups (by timestamp, by byte budget) are in :mod:`floe.storage.local.lookup`;
rebuilding the producer state at open is in :mod:`floe.storage.local.producer_recovery`.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from floe.config.topic import ResolvedTopicConfig
from floe.errors import ErrorCode, InvalidRecordError
from floe.protocol.batch import BatchHeader, set_log_append_time
from floe.protocol.control import control_type
from floe.protocol.records import decode_keys
from floe.storage.interface import AppendResult, OffsetOutOfRangeError, StorageError
from floe.storage.local import fileio, lookup, snapshot
from floe.storage.local.fdcache import FileCache, FileHandle
from floe.storage.local.meta import read_offsets, write_offsets
from floe.storage.local.producer_recovery import load_producer_state
from floe.storage.local.segment import Segment
from floe.storage.producer_state import AbortedTxn, ProducerEntry
from floe.types import Offset, PartitionId, TimestampMs, TopicName

log = logging.getLogger(__name__)

LOG_START_FILE = "log-start-offset"
_I64 = struct.Struct(">q")
_MAX_RELATIVE = 2**31 - 1
"""Offsets relative to a segment's base are int32 in the index files: roll before."""


@dataclass(frozen=True)
class CleanedFiles:
    """The cleaner's fsynced rewrite of one segment, ready to be swapped in (see
    :meth:`LocalPartitionLog.replace_segment`)."""

    log: Path
    offset_index: Path
    time_index: Path
    offset_entries: tuple[array[int], array[int]]
    time_entries: tuple[array[int], array[int]]


@dataclass(eq=False)  # hashed by identity: one ticket per log and round
class FlushTicket:
    """What one fsync round does for one log: the files to fsync (each opened or dup'ed
    privately by the fsync thread, see :meth:`FileCache.dup`), and the sizes and log
    end they will make durable."""

    log: LocalPartitionLog
    files: list[FileHandle]
    sizes: list[tuple[Segment, int]]
    end_offset: int
    directory: FileHandle | None
    extra: list[FileHandle]
    """Other files (snapshots) synced by this round, given back if it cannot run."""


class LocalPartitionLog:
    """A partition log made of :class:`Segment` files in one directory.

    Owned by the :class:`~floe.storage.local.store.LocalStore` and driven from its
    event loop only; created when the store opens or creates the topic, closed by the
    store's ``close`` or ``delete_topic``. fsync rounds and the maintenance worker run
    in threads on private fds (:meth:`flush_ticket`, the cleaner's plan), so nothing
    here is shared with a thread.

    Attributes:
        doomed: files of removed segments renamed to ``*.deleted``, for the store's
            worker to unlink (the next open removes any left).
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
        files: FileCache,
        new: bool = False,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self.directory = directory
        self._files = files
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self._log_start = max(log_start_offset, segments[0].base_offset)
        self._size = sum(s.size for s in segments)
        self._dirty: dict[Segment, None] = {}
        self._dir_dirty = new  # a new directory is fsynced before its first ack
        self._unsynced: dict[FileHandle, None] = {}
        self._offline: str | None = None
        self.doomed: list[Path] = []
        self.closed = False
        self.recovery_point = self._active.next_offset
        self._hold: int | None = None
        self._held_bytes = 0
        self.set_config(config)
        loaded = load_producer_state(topic, partition, directory, segments)
        self._producers = loaded.producers
        if loaded.dropped:
            self._dir_dirty = True
        if loaded.replayed:  # so that the next start replays nothing
            self.take_snapshot()

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
    def local_log_start_offset(self) -> Offset:
        return Offset(self._log_start)

    @property
    def latest_tiered_offset(self) -> Offset:
        return Offset(self._log_start - 1)  # no object store

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
    def offline(self) -> bool:
        """True once a write or fsync failed: writes are refused until a restart."""
        return self._offline is not None

    def offline_error(self) -> StorageError:
        return StorageError(
            f"{self._topic}-{self._partition} is offline after an I/O failure "
            f"({self._offline}); it recovers at the next broker start"
        )

    def io_failed(self, what: str, exc: OSError, *, transient_ok: bool = True) -> StorageError:
        """The error for a failed I/O operation; takes the log offline unless the
        failure left every file as it was (no descriptor available) and the caller says
        that it did (``transient_ok``)."""
        if transient_ok and fileio.is_transient(exc):
            return StorageError(f"{what} of {self._topic}-{self._partition} failed: {exc}")
        if self._offline is None:
            self._offline = f"{what}: {exc}"
            log.error(
                "log.offline topic=%s partition=%d operation=%s error=%s",
                self._topic, self._partition, what, exc,
            )  # fmt: skip
        return self.offline_error()

    @property
    def durable_offset(self) -> Offset:
        """Every offset below it is fsynced (the recovery point, capped at the log
        end)."""
        return Offset(min(self.recovery_point, self._active.next_offset))

    @property
    def durability_failure(self) -> ErrorCode:
        """KAFKA_STORAGE_ERROR: a failed fsync takes the log offline with what it did
        not make durable (see :class:`~floe.storage.interface.PartitionLog`)."""
        return ErrorCode.kafka_storage_error

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def config(self) -> ResolvedTopicConfig:
        return self._config

    def _note_unexpected_producer(self, h: BatchHeader) -> None:
        """Log a batch that the producer state takes without checking its sequence,
        although the producer may have written here before: one of a producer this
        partition has no state for, past its first sequence (accepted as Kafka 2.5+
        does, KIP-360, once the state may miss producers), or of a producer's new
        epoch. Either is where a retried batch can be written twice: the line tells
        which it was, for a duplicate found later.
        """
        entry = self._producers.producers.get(h.producer_id)
        if entry is None and h.base_sequence > 0:
            seen = "no state (producers were expired or the log head deleted)"
        elif entry is not None and h.producer_epoch > entry.epoch and not h.is_transactional:
            seen = f"epoch {entry.epoch} up to sequence {entry.last_seq}"
        else:
            return
        log.info(
            "producer.unchecked_batch partition=%s-%d producer_id=%d epoch=%d "
            "first_sequence=%d records=%d seen=%s (its sequence is not checked against "
            "earlier batches)",
            self._topic, self._partition, h.producer_id, h.producer_epoch,
            h.base_sequence, h.last_offset_delta + 1, seen,
        )  # fmt: skip

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
            StorageError: the write failed (nothing is acknowledged; the partition is
                offline unless no file was touched).
        """
        if not headers:
            raise InvalidRecordError("no record batches to append")
        if self._offline is not None:
            raise self.offline_error()
        producers = self._producers
        if len(headers) == 1 and headers[0].producer_id >= 0:
            # Produce sends one batch per partition (the edge enforces it for
            # producer ids); multi-batch appends come from tests and tools only.
            h0 = headers[0]
            if h0.is_control:
                _, coordinator = control_type(buf, h0)
                producers.check_marker(h0.producer_id, h0.producer_epoch, coordinator)
            else:
                dup = producers.check(h0)
                if dup is not None:
                    return AppendResult(
                        Offset(dup.base_offset), Offset(dup.last_offset), TimestampMs(-1),
                        Offset(self._log_start),
                    )  # fmt: skip
                self._note_unexpected_producer(h0)
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
        before = seg.size
        try:
            seg.write(buf, headers, self._index_interval)
        except OSError as exc:
            # whatever reached the file is counted (the segment moved its size and
            # next offset), and nothing more is ever appended after it
            self._size += seg.size - before
            if seg.size != before:
                self._dirty[seg] = None
            raise self.io_failed("append", exc, transient_ok=seg.size == before) from exc
        self._size += len(buf)
        for h in headers:
            if h.producer_id >= 0:
                kind, coordinator = control_type(buf, h) if h.is_control else (-1, -1)
                producers.apply(h, now_ms, kind, coordinator)
        self._dirty[seg] = None
        return AppendResult(
            Offset(base),
            Offset(offset - 1),
            TimestampMs(now_ms if lat else -1),
            Offset(self._log_start),
        )

    def roll(self) -> Segment:
        """Seal the active segment, start a new one at the log end (no-op on an empty
        active segment) and snapshot the producer state there.

        Raises:
            StorageError: sealing failed (the log goes offline) or the new segment's
                file could not be created.
        """
        if self._offline is not None:
            raise self.offline_error()
        old = self._active
        if not old.size:
            return old
        try:
            old.seal()
        except OSError as exc:
            raise self.io_failed("roll", exc, transient_ok=False) from exc
        try:
            new = Segment(self.directory, old.next_offset, self._files)
        except OSError as exc:
            raise self.io_failed("roll", exc) from exc
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._active = new
        self._dirty[old] = None  # its indexes are fsynced by the next round
        self._dir_dirty = True
        self.take_snapshot()
        log.info(
            "log.segment.rolled topic=%s partition=%d base_offset=%d",
            self._topic, self._partition, new.base_offset,
        )  # fmt: skip
        return new

    def maybe_roll(self, now_ms: int) -> None:
        """Roll a non-empty active segment older than ``segment.ms``.

        Raises:
            StorageError: see :meth:`roll`.
        """
        seg = self._active
        if seg.size and now_ms - seg.roll_base_ms >= self._segment_ms:
            self.roll()

    # -- producer state snapshots ------------------------------------------------------

    def take_snapshot(self) -> None:
        """Snapshot the producer state at the log end, synced by the next fsync round.
        A failure only costs time at the next start: it is logged, not raised."""
        offset = self._active.next_offset
        try:
            path = snapshot.write_snapshot(self.directory, self._producers, offset)
        except OSError as exc:
            log.warning(
                "log.snapshot.failed topic=%s partition=%d offset=%d error=%s",
                self._topic, self._partition, offset, exc,
            )  # fmt: skip
            return
        self._unsynced[FileHandle(path)] = None
        self._dir_dirty = True

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
        """See :func:`floe.storage.local.lookup.offset_for_timestamp`."""
        return lookup.offset_for_timestamp(self._segments, timestamp_ms, log_start=self._log_start)

    def max_timestamp(self) -> tuple[Offset, TimestampMs] | None:
        """The first record carrying the largest timestamp; None for an empty log."""
        return lookup.max_timestamp(self._segments, log_start=self._log_start)

    def end_for_bytes(self, start: Offset, end: Offset, max_bytes: int) -> Offset:
        """See :func:`floe.storage.local.lookup.end_for_bytes`.

        Raises:
            ValueError: an empty range (``start >= end``).
        """
        if start >= end:
            raise ValueError(f"empty range [{start}, {end}) of {self._topic}-{self._partition}")
        return lookup.end_for_bytes(
            self._segments, self._bases, start, end, max_bytes, log_start=self._log_start
        )

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
            StorageError: the partition is offline, or the checkpoint write failed.
        """
        if self._offline is not None:
            raise self.offline_error()
        hw = self._active.next_offset
        target = hw if before == -1 else int(before)
        if target < 0 or target > hw:
            raise OffsetOutOfRangeError(f"delete_records offset {before} beyond {hw}")
        if target <= self._log_start:
            return Offset(self._log_start)
        try:
            write_offsets(self.directory / LOG_START_FILE, {"log_start_offset": target})
        except OSError as exc:
            raise self.io_failed("delete_records", exc) from exc
        self._log_start = target
        while len(self._segments) > 1 and self._segments[1].base_offset <= target:
            self.drop_oldest_segment()
        self._producers.truncate_head(self._log_start)
        return Offset(self._log_start)

    def drop_oldest_segment(self, *, evicted: bool = False) -> None:
        """Remove the oldest segment (never the active one) and advance the log start
        to the next segment's base offset. Its files are renamed to ``*.deleted`` here
        and unlinked later by the store's worker (:attr:`doomed`). ``evicted``: the
        records are kept elsewhere (the object store's bucket): the aborted transactions
        among them are kept too.

        Raises:
            StorageError: a rename failed (the log goes offline).
        """
        seg = self._segments[0]
        try:
            doomed = seg.retire()
        except OSError as exc:
            raise self.io_failed("segment delete", exc, transient_ok=False) from exc
        self._segments.pop(0)
        self._bases.pop(0)
        self._dirty.pop(seg, None)
        self._size -= seg.size
        self.doomed += doomed
        self._dir_dirty = True
        self._log_start = max(self._log_start, self._segments[0].base_offset)
        if not evicted:  # the evicted records are still the partition's
            self._producers.truncate_head(self._log_start)
        log.info(
            "log.segment.%s topic=%s partition=%d base_offset=%d next_offset=%d "
            "log_start_offset=%d",
            "evicted" if evicted else "deleted", self._topic, self._partition, seg.base_offset,
            seg.next_offset, self._log_start,
        )  # fmt: skip

    def replace_segment(self, old: Segment, cleaned: CleanedFiles) -> bool:
        """Swap the cleaner's fsynced rewrite of ``old`` (segment and both indexes) in
        place of ``old``; False (nothing done) when ``old`` is no longer in the log or
        now holds an offset at or above the retention hold.

        The old indexes are unlinked before the renames, so a crash in between leaves a
        log without indexes (rebuilt on load), never a new log with stale indexes. The
        directory is fsynced by the next round (the store fsyncs it before the cleaner
        checkpoint is written).

        Raises:
            StorageError: a rename failed (the log goes offline).
        """
        if old not in self._segments or self._offline is not None or self.closed:
            return False
        if self._hold is not None and old.next_offset > self._hold:
            return False
        i = self._segments.index(old)
        try:
            old.offset_index.path.unlink(missing_ok=True)
            old.time_index.path.unlink(missing_ok=True)
            old.close()
            os.replace(cleaned.log, old.path)
            os.replace(cleaned.offset_index, old.offset_index.path)
            os.replace(cleaned.time_index, old.time_index.path)
            new = Segment(self.directory, old.base_offset, self._files)
        except OSError as exc:
            raise self.io_failed("compaction swap", exc, transient_ok=False) from exc
        new.offset_index.keys, new.offset_index.values = cleaned.offset_entries
        new.time_index.keys, new.time_index.values = cleaned.time_entries
        new.max_timestamp = new.time_index.last_timestamp
        new.offset_of_max_timestamp = new.time_index.last_offset
        new.next_offset = old.next_offset
        new.roll_base_ms = old.roll_base_ms
        self._segments[i] = new
        self._dirty.pop(old, None)
        self._size += new.size - old.size
        self._dir_dirty = True
        return True

    # -- durability ------------------------------------------------------------------

    def flush_ticket(self, *, final: bool = False) -> FlushTicket | None:
        """The files with unsynced bytes (and the directory after a change) for one
        fsync round; None when there is nothing to sync or the log is offline.
        ``final`` (clean shutdown) also syncs the active segment's indexes."""
        if self.closed or self._offline is not None or not self.dirty:
            return None
        files: list[FileHandle] = []
        sizes: list[tuple[Segment, int]] = []
        for seg in self._dirty:
            files.append(seg.handle)
            if final or seg is not self._active:
                files += (seg.offset_index.handle, seg.time_index.handle)
            sizes.append((seg, seg.size))
        if final and self._active not in self._dirty:
            files += (self._active.offset_index.handle, self._active.time_index.handle)
        extra = list(self._unsynced)
        self._unsynced.clear()
        directory = FileHandle(self.directory) if self._dir_dirty else None
        self._dir_dirty = False
        return FlushTicket(self, files, sizes, self._active.next_offset, directory, extra)

    def flushed(self, ticket: FlushTicket) -> None:
        """Record a completed fsync round."""
        for seg, size in ticket.sizes:
            seg.synced_size = max(seg.synced_size, size)
            if seg.synced_size >= seg.size:
                self._dirty.pop(seg, None)
        self.recovery_point = max(self.recovery_point, ticket.end_offset)

    def flush_failed(self, ticket: FlushTicket, exc: OSError) -> StorageError:
        """Record a failed fsync round: when no fsync was attempted (no descriptor) the
        work is kept for the next round; otherwise the log goes offline for good (the
        page cache state is unknown after a failed fsync: it is never retried)."""
        if fileio.is_transient(exc):
            if ticket.directory is not None:
                self._dir_dirty = True
            self._unsynced.update(dict.fromkeys(ticket.extra))
        return self.io_failed("fsync", exc)

    @property
    def dirty(self) -> bool:
        """Something awaits an fsync (never for a closed or offline log)."""
        return (
            bool(self._dirty or self._dir_dirty or self._unsynced)
            and not self.closed
            and self._offline is None
        )

    def prepare_shutdown(self) -> None:
        """Before a clean shutdown: record the active segment's final max timestamp and
        snapshot the producer state at the log end, so the next start reads no segment.
        Failures take the log offline (the store then does not mark it clean)."""
        if self._offline is not None or self.closed:
            return
        try:
            self._active.seal()
        except OSError as exc:
            self.io_failed("shutdown", exc, transient_ok=False)
            return
        self.take_snapshot()

    def close(self) -> None:
        """Close every file (the store fsyncs first). Idempotent."""
        if self.closed:
            return
        self.closed = True
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
