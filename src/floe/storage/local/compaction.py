"""Log compaction for ``cleanup.policy=compact`` partitions, off the event loop.

The cleanable range is the prefix of non-active segments whose newest record is at
least ``min.compaction.lag.ms`` old, ending before the first segment that holds an
offset at or above the partition's retention hold (a table topic's data not yet in the
table). Over it the cleaner keeps only the latest record of each key; a tombstone
(null value) is kept until ``delete.retention.ms`` after its segment was last
modified. Rewritten batches keep their base offset and lastOffsetDelta, so offsets
stay monotonic and consumers step over the gaps.

Each segment is compacted once, as with Kafka's ``cleaner-offset-checkpoint``: the
store remembers per partition the first offset not yet cleaned (:class:`CleanerState`,
durable in ``logs/cleaner-offset-checkpoint``). A partition is cleaned only when a new
sealed segment passed that offset (or a kept tombstone became removable); the key map is
then built from the dirty segments only, and the already-clean segments are rewritten
only to drop what those keys supersede (they hold each key at most once already).

Control batches and transactional batches are copied untouched and their keys do not
shadow other records (dropping aborted transactions' records is not done yet). The
last batch of each idempotent producer is kept even when all its records are
superseded (Kafka's cleaner keeps it too, so the producer's sequence survives).

Three steps, so that nothing heavy runs on the event loop:

* :func:`plan` (loop): picks the segments, records their paths, sizes and file
  identities, the hold and each producer's last batch: plain data;
* :func:`run` (the store's worker thread): reads the files by path on private fds
  (checking each is still the planned file), writes ``<base>.log.cleaned`` and both
  indexes ``.cleaned``, fsyncs them; it never touches the log's objects;
* :func:`apply` (loop): swaps each rewrite in (:meth:`LocalPartitionLog.replace_segment`)
  unless the segment left the log meanwhile (retention, DeleteRecords, deletion) or a
  hold set meanwhile now covers it; anything not swapped is discarded.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from floe.errors import CorruptRecordError, InvalidRecordError
from floe.protocol.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header
from floe.protocol.records import decode_batch, decode_keys, encode_batch
from floe.storage.local import fileio
from floe.storage.local.log import CleanedFiles, LocalPartitionLog
from floe.storage.local.segment import Segment

log = logging.getLogger(__name__)

_CHUNK = 4 * 1024 * 1024
_LEN_AT_8 = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
CLEANED = ".cleaned"


@dataclass(frozen=True)
class CleanerState:
    """Per partition: offsets below ``first_dirty`` were cleaned; kept tombstones may
    be dropped from ``tombstones_due_ms`` on (None: none kept)."""

    first_dirty: int = 0
    tombstones_due_ms: int | None = None


@dataclass(frozen=True)
class SegmentSpec:
    """What the worker needs to know about one planned segment (plain data)."""

    base_offset: int
    path: Path
    size: int
    identity: tuple[int, int]
    dirty: bool


@dataclass
class CleanJob:
    """One partition's compaction. ``plog`` and ``targets`` are used on the loop only
    (:func:`plan`, :func:`apply`); :func:`run` fills in ``cleaned``, ``tombstones_due_ms``
    and ``error`` from the plain data."""

    plog: LocalPartitionLog
    targets: list[Segment]
    specs: list[SegmentSpec]
    last_batches: dict[int, int]
    now_ms: int
    delete_retention_ms: int
    index_interval: int
    upto: int
    cleaned: dict[int, CleanedFiles] = field(default_factory=dict)
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)
    tombstones_due_ms: int | None = None
    error: str | None = None

    def files(self) -> list[Path]:
        """Every file the worker wrote (for discarding)."""
        return [p for c in self.cleaned.values() for p in (c.log, c.offset_index, c.time_index)]


def plan(plog: LocalPartitionLog, now_ms: int, state: CleanerState) -> CleanJob | None:
    """The compaction ``plog`` needs now, or None (nothing new is cleanable)."""
    config = plog.config
    horizon = now_ms - config.min_compaction_lag_ms
    hold = plog.retention_hold
    cleanable: list[Segment] = []
    for seg in plog.segments[:-1]:
        if seg.max_timestamp > horizon or (hold is not None and seg.next_offset > hold):
            break
        cleanable.append(seg)
    if not cleanable:
        return None
    first_dirty = max(state.first_dirty, plog.log_start_offset)
    due = state.tombstones_due_ms is not None and now_ms >= state.tombstones_due_ms
    if cleanable[-1].next_offset <= first_dirty and not due:
        return None
    specs = [
        SegmentSpec(s.base_offset, s.path, s.size, s.identity, s.next_offset > first_dirty)
        for s in cleanable
    ]
    last_batches = {e.producer_id: e.batches[-1].last_offset for e in plog.producers() if e.batches}
    return CleanJob(
        plog, cleanable, specs, last_batches, now_ms, config.delete_retention_ms,
        config.index_interval_bytes, upto=cleanable[-1].next_offset,
    )  # fmt: skip


class _ChangedError(Exception):
    """A planned segment file is no longer the one planned (retention, deletion)."""


def run(job: CleanJob, stop: threading.Event) -> None:
    """Build the key map and write the cleaned files (worker thread; never raises:
    failures are recorded in ``job.error`` and logged)."""
    try:
        latest: dict[bytes, int] = {}
        for spec in job.specs:
            if spec.dirty:
                with _open(spec) as fd:
                    for data, h in _batches(fd, spec.size):
                        if h.is_control or h.is_transactional:
                            continue
                        for offset, key, _ in _keys(job, data, h, warn=True) or ():
                            if key is not None:
                                latest[key] = offset
        for i, spec in enumerate(job.specs):
            if stop.is_set():
                job.error = "stopped"
                return
            with _open(spec) as fd:
                _clean(job, i, spec, fd, latest)
    except (_ChangedError, FileNotFoundError) as exc:  # retention or deletion meanwhile
        job.error = f"changed: {exc}"
    except Exception as exc:  # a bad batch, a full disk: logged, retried next run
        job.error = f"{type(exc).__name__}: {exc}"
        log.exception(
            "log.compaction.failed topic=%s partition=%d", job.plog.topic, job.plog.partition
        )


class _open:  # noqa: N801 - a context manager used like open()
    """A private read-only fd of a planned segment, checked to be that very file."""

    def __init__(self, spec: SegmentSpec) -> None:
        self.spec = spec
        self.fd = -1

    def __enter__(self) -> int:
        try:
            self.fd = os.open(self.spec.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise _ChangedError(f"{self.spec.path} is gone") from None
        st = os.fstat(self.fd)
        if (st.st_dev, st.st_ino) != self.spec.identity or st.st_size < self.spec.size:
            os.close(self.fd)
            raise _ChangedError(f"{self.spec.path} was replaced")
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _batches(fd: int, size: int) -> Iterator[tuple[bytes, BatchHeader]]:
    """(batch bytes, its header positioned at 0) for every batch in ``[0, size)``."""
    position = 0
    while position < size:
        buf = os.pread(fd, min(_CHUNK, size - position), position)
        i = 0
        while i + HEADER_SIZE <= len(buf):
            length = LOG_OVERHEAD + _LEN_AT_8.unpack_from(buf, i + 8)[0]
            if length < HEADER_SIZE:
                raise CorruptRecordError(f"record batch length {length} at byte {position + i}")
            if i + length > len(buf):
                break
            data = buf[i : i + length]
            yield data, read_header(data)
            i += length
        if i == 0:  # one batch larger than the chunk (or a truncated header)
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"truncated record batch at byte {position}")
            head = read_header(buf)
            data = os.pread(fd, head.size, position)
            yield data, read_header(data)
            i = head.size
        position += i


def _keys(
    job: CleanJob, data: bytes, h: BatchHeader, *, warn: bool
) -> list[tuple[int, bytes | None, bool]] | None:
    """The batch's (offset, key, tombstone) triples, or None when its records do not
    decode (a CRC-valid batch with garbage inside, as a disk fault or an old bug may
    leave): such a batch is kept as it is and shadows nothing, so one bad batch never
    stops a partition's compaction (logged once, when its segment is first cleaned)."""
    try:
        return decode_keys(data, h)
    except (CorruptRecordError, InvalidRecordError, ValueError) as exc:
        if warn:
            log.warning(
                "log.compaction.unreadable_batch topic=%s partition=%d offset=%d reason=%s "
                "(kept as is)",
                job.plog.topic, job.plog.partition, h.base_offset, exc,
            )  # fmt: skip
        return None


def _clean(job: CleanJob, i: int, spec: SegmentSpec, fd: int, latest: dict[bytes, int]) -> None:
    """Rewrite one segment keeping, per key, the record ``latest`` names (a key absent
    from ``latest`` is not superseded), each producer's last batch, and tombstones not
    yet removable; records the rewrite in ``job.cleaned`` when anything changed."""
    st = os.fstat(fd)
    mtime_ms = st.st_mtime_ns // 1_000_000
    drop_tombstones = job.now_ms - mtime_ms > job.delete_retention_ms
    out = _Rewrite(spec, job.index_interval)
    changed = kept_tombstone = False
    try:
        for data, h in _batches(fd, spec.size):
            if h.is_control or h.is_transactional:
                out.write(data, h)
                continue
            keys = _keys(job, data, h, warn=False)
            if keys is None:  # unreadable: copied as is, it shadows nothing
                out.write(data, h)
                continue
            mask = []
            for offset, key, tomb in keys:
                keep = key is None or latest.get(key, offset) == offset
                if keep and tomb:
                    keep = not drop_tombstones
                    kept_tombstone |= keep
                mask.append(keep)
            keep_whole = job.last_batches.get(h.producer_id, -1) == h.last_offset
            if all(mask) or (keep_whole and not any(mask)):  # copied without decoding
                out.write(data, h)
                continue
            changed = True
            if any(mask):
                records = decode_batch(data, h)
                kept = [r for r, k in zip(records, mask, strict=True) if k]
                new = encode_batch(
                    kept, base_offset=h.base_offset, compression=h.compression,
                    producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                    base_sequence=h.base_sequence,
                    timestamp_type=1 if h.log_append_time else 0,
                    last_offset_delta=h.last_offset_delta,
                    partition_leader_epoch=h.partition_leader_epoch,
                )  # fmt: skip
                out.write(new, read_header(new))
        if kept_tombstone:
            due = mtime_ms + job.delete_retention_ms + 1
            job.tombstones_due_ms = min(job.tombstones_due_ms or due, due)
        if changed:
            job.cleaned[i] = out.finish(st.st_atime_ns, st.st_mtime_ns)
            job.sizes[i] = (spec.size, out.position)
    finally:
        out.close(keep=changed)


class _Rewrite:
    """The ``.cleaned`` segment file being written, with its indexes built alongside
    (the same sparse rule as :meth:`Segment.write`). Owned by one :func:`_clean` call."""

    def __init__(self, spec: SegmentSpec, index_interval: int) -> None:
        self.path = spec.path.with_name(spec.path.name + CLEANED)
        stem = spec.path.with_suffix("")
        self.index_path = stem.with_name(stem.name + ".index" + CLEANED)
        self.time_path = stem.with_name(stem.name + ".timeindex" + CLEANED)
        self.base = spec.base_offset
        self.interval = index_interval
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.position = 0
        self.since_index = 0
        self.max_ts = -1
        self.max_ts_offset = spec.base_offset
        self.offsets: tuple[array[int], array[int]] = (array("q"), array("q"))
        self.times: tuple[array[int], array[int]] = (array("q"), array("q"))

    def write(self, data: bytes, h: BatchHeader) -> None:
        if h.max_timestamp > self.max_ts:
            self.max_ts, self.max_ts_offset = h.max_timestamp, h.base_offset
        if self.since_index > self.interval:
            self.offsets[0].append(h.base_offset - self.base)
            self.offsets[1].append(self.position)
            self._time_entry()
            self.since_index = 0
        self.since_index += len(data)
        fileio.write_all(self.fd, data)
        self.position += len(data)

    def _time_entry(self) -> None:
        keys, values = self.times
        if not keys or self.max_ts > keys[-1]:
            keys.append(self.max_ts)
            values.append(self.max_ts_offset - self.base)

    def finish(self, atime_ns: int, mtime_ns: int) -> CleanedFiles:
        """fsync the segment and write and fsync both indexes; the rewrite keeps the
        original's modification time (tombstone age).

        Raises:
            OSError: a write or fsync failed.
        """
        self._time_entry()  # the final max timestamp, as a sealed segment has
        fileio.fsync(self.fd)
        os.utime(self.path, ns=(atime_ns, mtime_ns))
        for path, entry, (keys, values) in (
            (self.index_path, _OFFSET_ENTRY, self.offsets),
            (self.time_path, _TIME_ENTRY, self.times),
        ):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                fileio.write_all(
                    fd, b"".join(entry.pack(a, b) for a, b in zip(keys, values, strict=True))
                )
                fileio.fsync(fd)
            finally:
                os.close(fd)
        return CleanedFiles(self.path, self.index_path, self.time_path, self.offsets, self.times)

    def close(self, *, keep: bool) -> None:
        os.close(self.fd)
        if not keep:
            for path in (self.path, self.index_path, self.time_path):
                path.unlink(missing_ok=True)


def apply(job: CleanJob) -> tuple[bool, list[Path]]:
    """Swap the job's rewrites in (on the loop); returns whether the whole plan was
    carried out (the cleaner checkpoint may then move to ``job.upto``) and the files to
    discard. Logs one ``log.compaction.cleaned`` line per rewritten segment.

    Raises:
        StorageError: a swap failed (the log went offline).
    """
    plog = job.plog
    if job.error is not None:
        if job.error != "stopped":
            log.info(
                "log.compaction.skipped topic=%s partition=%d reason=%s",
                plog.topic, plog.partition, job.error,
            )  # fmt: skip
        return False, job.files()
    complete = True
    discard: list[Path] = []
    for i, cleaned in job.cleaned.items():
        seg = job.targets[i]
        if plog.replace_segment(seg, cleaned):
            before, after = job.sizes[i]
            log.info(
                "log.compaction.cleaned topic=%s partition=%d base_offset=%d "
                "bytes_before=%d bytes_after=%d",
                plog.topic, plog.partition, seg.base_offset, before, after,
            )  # fmt: skip
        else:
            complete = False
            discard += (cleaned.log, cleaned.offset_index, cleaned.time_index)
    return complete, discard
