"""Accounting for every offset of a range of one partition's log, batch by batch.

Whoever reads a range ``[start, end)`` (the segment reader of the local store, the
fetch-based reader of table-topic tasks) walks its record batches in offset order and
hands each whole batch to one :class:`RangeAccount`, which says what became of every
offset: data records (:class:`Records`), a control batch or an aborted transaction
(skipped), an unusable batch (:class:`BadBatch`: CRC mismatch, undecodable records,
data that cannot be framed) or an absent offset (:class:`Missing`: below the log
start, compacted away, deleted, beyond the end).

Invariant: the chunks a range yields cover each of its offsets exactly once and in
order (skipped batches excepted), and adjacent missing offsets coalesce into one
:class:`Missing`. Nothing is dropped silently, so a caller can prove it read everything.

Sans-I/O: batches come in as buffers and headers; nothing here reads a file or a socket.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from floe.errors import CorruptRecordError, InvalidRecordError
from floe.protocol.batch import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, BatchHeader
from floe.protocol.records import Record, decode_batch


@dataclass(frozen=True, slots=True)
class Aborted:
    """Records of ``producer_id`` in offsets ``[first, last]`` belong to an aborted
    transaction (``last`` is its ABORT marker; :data:`UNTIL_MARKER` while the marker is
    not seen yet: a Fetch response names an aborted transaction by its first offset
    only, as Kafka's does)."""

    producer_id: int
    first: int
    last: int


UNTIL_MARKER = 2**63 - 1
"""The ``last`` of an aborted transaction known by its first offset: it ends at the
producer's next control batch (its ABORT marker; a producer has one transaction open
at a time)."""


@dataclass(frozen=True, slots=True)
class Records:
    """Records of one data batch with consecutive offsets inside the range. A batch
    with compacted holes yields one ``Records`` per run, sharing the header, whose
    ``position`` is the batch's byte position in what it was read from (its segment
    file, or the fetch response)."""

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


def unusable(h: BatchHeader) -> str | None:
    """Why a batch header cannot be trusted to frame the bytes after it (None: it can)."""
    if h.magic != MAGIC_V2:
        return f"record batch magic {h.magic}"
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"record batch length {h.batch_length}"
    if h.last_offset_delta < 0 or h.record_count < 0:
        return "negative record count or offset delta"
    return None


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


class RangeAccount:
    """The accounting of one range read. ``pos`` is the next offset of ``[pos, end)``
    to account for; it only moves forward. A run of missing offsets is held back until
    the next chunk (or :meth:`finish`), so adjacent missing offsets coalesce.

    Owned by one reading generator; the chunks its methods yield are that reader's.
    """

    def __init__(self, start: int, end: int, aborted: Sequence[Aborted], crc: bool) -> None:
        self.pos = start
        self.end = end
        self.aborted = list(aborted)
        self.crc = crc
        self._gap: int | None = None

    def abort(self, producer_id: int, first: int) -> None:
        """``producer_id``'s transaction from ``first`` on was aborted (a read_committed
        Fetch response says so): its records up to its marker are skipped."""
        if not any(a.producer_id == producer_id and a.first == first for a in self.aborted):
            self.aborted.append(Aborted(producer_id, first, UNTIL_MARKER))

    def _marker(self, h: BatchHeader) -> None:
        """A control batch of ``h.producer_id`` ends its aborted transaction, if open."""
        for i, a in enumerate(self.aborted):
            open_ = a.producer_id == h.producer_id and a.last == UNTIL_MARKER
            if open_ and a.first <= h.base_offset:
                self.aborted[i] = Aborted(a.producer_id, a.first, h.base_offset)

    def missing_to(self, offset: int) -> None:
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

    def bad_to(self, limit: int, reason: str) -> Iterator[Chunk]:
        """Offsets from ``pos`` up to ``limit`` (clipped to the range) lie in data that
        cannot be framed: one :class:`BadBatch`."""
        limit = min(limit, self.end)
        if self.pos < limit:
            first = self.pos
            yield from self._claim(limit)
            yield BadBatch(first, limit - 1, reason)

    def batch(self, buf: bytes, h: BatchHeader, position: int) -> Iterator[Chunk]:
        """The range's offsets in the whole batch ``h`` (framed in ``buf``; ``position``
        is where it was read from). Batches come in offset order; offsets of ``h``
        below ``pos`` are not accounted for again."""
        self.missing_to(h.base_offset)
        hi = min(h.next_offset, self.end)
        at = h.position
        result: list[Record] | str = "record batch CRC32C mismatch"
        if not self.crc or crc32c.crc32c(memoryview(buf)[at + 21 : at + h.size]) == h.crc:
            if h.is_control:
                self._marker(h)
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
            yield from self.bad_to(hi, result)
            return
        h.position = position
        for run in _runs(result, self.pos, hi):
            self.missing_to(run[0].offset)
            yield from self._claim(run[-1].offset + 1)
            yield Records(h, run)
        self.missing_to(hi)

    def finish(self) -> Iterator[Missing]:
        """The offsets still unaccounted for are missing (the log has nothing more)."""
        self.missing_to(self.end)
        yield from self._claim(self.end)
