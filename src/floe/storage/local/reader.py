"""Read-only access to a partition's segment files, from any process.

Used by table-topic Spark tasks, which run in Python workers outside the broker's event
loop and cannot touch its :class:`~floe.storage.local.log.LocalPartitionLog`. They open
``<logs dir>/<topic>-<partition>/<20-digit base>.log`` themselves, read whole batches
with ``pread`` and never write, lock or delete anything.

Invariant: :func:`scan_range` accounts for every offset of its range exactly once and
in order: as a record (:class:`Records`), as a control or aborted batch (skipped), as an
unusable batch (:class:`BadBatch`) or as an absent one (:class:`Missing`). Nothing is
dropped silently, so a caller can prove it has read everything.

Races (the broker keeps appending, rolling, cleaning meanwhile):

* Readers ask only for offsets below the partition's last stable offset, which the
  broker has already written to the OS; a torn tail of the newest segment beyond the
  last whole batch is where the log ends.
* A segment may disappear between listing and opening (retention): the listing is
  retried, and its offsets are reported missing. Compaction swaps files atomically,
  and an open file stays readable after it is unlinked or replaced.
* The offset index may be stale, torn or being appended to: a position it gives is
  used only after the batch header found there matches its entry.
* Control batches and the records of aborted transactions are skipped, given the
  aborted transactions of the range (computed by the broker, passed in as plain data).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from floe.errors import CorruptRecordError, InvalidRecordError
from floe.protocol.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, BatchHeader, read_header
from floe.protocol.records import Record, decode_batch
from floe.storage.local.index import offset_entries
from floe.storage.local.log import load_log_start

_CHUNK = 4 * 1024 * 1024


def partition_dir(logs_dir: Path, topic: str, partition: int) -> Path:
    """The directory of one partition's segments (as :class:`LocalStore` names it)."""
    return logs_dir / f"{topic}-{partition}"


@dataclass(frozen=True, slots=True)
class Aborted:
    """Records of ``producer_id`` in offsets ``[first, last]`` belong to an aborted
    transaction (``last`` is its ABORT marker)."""

    producer_id: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Records:
    """Records of one data batch with consecutive offsets inside the range. A batch
    with compacted holes yields one ``Records`` per run, sharing the header, whose
    ``position`` is the batch's byte position in its segment file."""

    header: BatchHeader
    records: list[Record]


@dataclass(frozen=True, slots=True)
class BadBatch:
    """Offsets ``[first, last]`` of the range lie in a batch that cannot be used (CRC
    mismatch, undecodable records, an unreadable header); ``reason`` is one line."""

    first: int
    last: int
    reason: str


@dataclass(frozen=True, slots=True)
class Missing:
    """Offsets ``[first, last]`` of the range are not in the log (deleted, compacted
    away, or beyond its end)."""

    first: int
    last: int


Chunk = Records | BadBatch | Missing


def _segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(".log") and len(name) == 24 and name[:20].isdigit():
            out.append((int(name[:20]), Path(entry.path)))
    out.sort()
    return out


def index_position(fd: int, index_path: Path, base: int, offset: int) -> int:
    """Where to start reading segment ``fd`` (base offset ``base``) for ``offset``:
    the position of the ``.index`` floor entry of ``offset`` when the batch header
    there carries that entry's offset, else 0 (no index, empty, torn or stale)."""
    try:
        keys, positions = offset_entries(index_path.read_bytes())
    except FileNotFoundError:
        return 0
    i = bisect_right(keys, offset - base) - 1
    if i < 0 or not 0 <= keys[i] <= offset - base:
        return 0
    position = positions[i]
    if position <= 0:
        return 0
    head = os.pread(fd, HEADER_SIZE, position)
    if len(head) < HEADER_SIZE:
        return 0
    h = read_header(head)
    return position if h.base_offset == base + keys[i] and h.magic == MAGIC_V2 else 0


def _unusable(h: BatchHeader) -> str | None:
    """Why a batch header cannot be trusted to frame the bytes after it."""
    if h.magic != MAGIC_V2:
        return f"record batch magic {h.magic}"
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"record batch length {h.batch_length}"
    if h.last_offset_delta < 0 or h.record_count < 0:
        return "negative record count or offset delta"
    return None


def _batches(
    fd: int, position: int, sealed: bool
) -> Iterator[tuple[bytes, BatchHeader, int] | str]:
    """Whole batches of one segment file from ``position``: (buffer, header positioned
    in the buffer, file position). Ends quietly at a torn tail of the newest segment;
    yields the reason and ends at an unreadable header, or at a partial batch in a
    ``sealed`` segment (nothing appends to it: the rest is damaged)."""
    want = _CHUNK
    buf = os.pread(fd, want, position)
    i = 0
    while True:
        have = len(buf) - i
        h = read_header(buf, i) if have >= HEADER_SIZE else None
        if h is not None:
            reason = _unusable(h)
            if reason is not None:
                yield f"{reason} at byte {position + i}"
                return
            if h.size <= have:
                yield buf, h, position + i
                i += h.size
                continue
        if len(buf) < want:  # the file ends inside this batch (or right before it)
            if sealed and have:
                yield f"segment ends inside the batch at byte {position + i}"
            return
        position += i
        want = max(_CHUNK, h.size if h is not None else 0)
        buf = os.pread(fd, want, position)
        i = 0


def _decode(buf: bytes, h: BatchHeader) -> list[Record] | str:
    """The batch's records, or why they cannot be used (including record offsets
    outside the batch or out of order, which would break the accounting)."""
    try:
        records = decode_batch(buf, h)
    except (CorruptRecordError, InvalidRecordError) as exc:
        return str(exc).split("\n", 1)[0]
    prev = h.base_offset - 1
    for r in records:
        if not prev < r.offset <= h.last_offset:
            return f"record offset {r.offset} out of order in its batch"
        prev = r.offset
    return records


def _runs(records: list[Record], lo: int, hi: int) -> list[list[Record]]:
    """The records within ``[lo, hi)``, split where offsets are not consecutive."""
    runs: list[list[Record]] = []
    for r in records:
        if r.offset < lo:
            continue
        if r.offset >= hi:
            break
        if runs and runs[-1][-1].offset + 1 == r.offset:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


class _Scan:
    """One :func:`scan_range` call. ``pos`` is the next offset of ``[pos, end)`` to
    account for; a run of missing offsets is held back (``_gap``) until the next
    chunk, so adjacent missing offsets coalesce. Owned by that call's generator."""

    def __init__(
        self, directory: Path, start: int, end: int, aborted: Sequence[Aborted], crc: bool
    ) -> None:
        self.directory = directory
        self.pos = start
        self.end = end
        self.aborted = aborted
        self.crc = crc
        self._gap: int | None = None

    def _missing_to(self, offset: int) -> None:
        """Offsets from ``pos`` up to ``offset`` (clipped to the range) are missing."""
        offset = min(offset, self.end)
        if offset > self.pos:
            if self._gap is None:
                self._gap = self.pos
            self.pos = offset

    def _claim(self, upto: int) -> Iterator[Missing]:
        """Report the pending missing run, then move ``pos`` to ``upto``: the caller
        yields the chunk covering the offsets in between."""
        if self._gap is not None:
            yield Missing(self._gap, self.pos - 1)
            self._gap = None
        self.pos = max(self.pos, min(upto, self.end))

    def run(self) -> Iterator[Chunk]:
        """Raises: FileNotFoundError: the partition directory does not exist."""
        failed_at = None
        while self.pos < self.end:
            try:
                self._missing_to(load_log_start(self.directory))
                yield from self._segments()
                break
            except FileNotFoundError:
                if failed_at == self.pos or not self.directory.is_dir():
                    raise
                failed_at = self.pos  # a segment vanished: list again, from where we are
        self._missing_to(self.end)
        yield from self._claim(self.end)

    def _segments(self) -> Iterator[Chunk]:
        segments = _segments(self.directory)
        for i, (base, path) in enumerate(segments):
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            if following is not None and following <= self.pos:
                continue
            if base >= self.end:
                return
            self._missing_to(base)
            yield from self._segment(path, base, following)
            if self.pos >= self.end:
                return

    def _segment(self, path: Path, base: int, following: int | None) -> Iterator[Chunk]:
        """The range's offsets held by one segment (``following``: the next segment's
        base offset, None for the newest).

        Raises:
            FileNotFoundError: the segment was deleted since it was listed.
        """
        with open(path, "rb") as f:
            fd = f.fileno()
            floor = base
            start = index_position(fd, path.with_suffix(".index"), base, self.pos)
            for item in _batches(fd, start, sealed=following is not None):
                if isinstance(item, str):
                    reason = item
                else:
                    buf, h, position = item
                    if h.base_offset >= floor and (following is None or h.next_offset <= following):
                        floor = h.next_offset
                        if h.next_offset <= self.pos:
                            continue
                        if h.base_offset >= self.end:
                            return
                        yield from self._batch(buf, h, position)
                        if self.pos >= self.end:
                            return
                        continue
                    reason = f"batch offsets {h.base_offset}-{h.last_offset} out of sequence"
                limit = self.end if following is None else min(following, self.end)
                if self.pos < limit:  # the rest of the segment cannot be framed
                    first = self.pos
                    yield from self._claim(limit)
                    yield BadBatch(first, limit - 1, f"{reason} of segment {base}")
                return

    def _batch(self, buf: bytes, h: BatchHeader, position: int) -> Iterator[Chunk]:
        """The range's offsets in batch ``h`` (at file ``position``)."""
        self._missing_to(h.base_offset)
        hi = min(h.next_offset, self.end)
        at = h.position
        result: list[Record] | str = "record batch CRC32C mismatch"
        if not self.crc or crc32c.crc32c(memoryview(buf)[at + 21 : at + h.size]) == h.crc:
            if h.is_control or (
                h.is_transactional
                and any(
                    a.producer_id == h.producer_id and a.first <= h.base_offset <= a.last
                    for a in self.aborted
                )
            ):
                yield from self._claim(hi)  # skipped silently
                return
            result = _decode(buf, h)
        if isinstance(result, str):
            first = self.pos
            yield from self._claim(hi)
            yield BadBatch(first, hi - 1, result)
            return
        h.position = position
        for run in _runs(result, self.pos, hi):
            self._missing_to(run[0].offset)
            yield from self._claim(run[-1].offset + 1)
            yield Records(h, run)
        self._missing_to(hi)


def scan_range(
    logs_dir: Path,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    aborted: Sequence[Aborted] = (),
    verify_crc: bool = True,
) -> Iterator[Chunk]:
    """Every offset of ``[start, end)``, in order, accounted for exactly once: data
    records as :class:`Records`, unusable batches as :class:`BadBatch`, absent offsets
    (below the log start, deleted or compacted away, beyond the end) as coalesced
    :class:`Missing` runs; control batches and aborted transactions are skipped.

    A segment deleted while the range is read is listed again, once per segment.

    Raises:
        FileNotFoundError: the partition directory does not exist (a deleted topic).
        OSError: a segment cannot be read.
    """
    directory = partition_dir(logs_dir, topic, partition)
    return _Scan(directory, start, end, aborted, verify_crc).run()
