"""Offset lookups in one partition's segments: the first record at or after a
timestamp, the record with the largest timestamp, and how far a byte budget reaches.

They back the :class:`~floe.storage.local.log.LocalPartitionLog` methods of the same
names. Each function only reads: the segments' in-memory indexes first, then batch
headers from where they point, decoding only batches that may hold the answer. Records
below ``log_start`` (DeleteRecords can leave some in the oldest segment) are never an
answer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

from floe.protocol.batch import BatchHeader, read_header
from floe.protocol.records import decode_batch
from floe.storage.local.segment import Segment
from floe.types import Offset, TimestampMs


def offset_for_timestamp(
    segments: Sequence[Segment], timestamp_ms: int, *, log_start: int
) -> tuple[Offset, TimestampMs] | None:
    """First record at or after ``log_start`` with timestamp >= ``timestamp_ms``: the
    time index finds where to scan from, the batch is decoded for the exact record."""
    for seg in segments:
        if seg.max_timestamp < timestamp_ms:
            continue
        start = seg.offset_index.lookup(seg.time_index.lookup(timestamp_ms))
        for h in seg.iter_headers(start):
            if h.max_timestamp < timestamp_ms or h.next_offset <= log_start:
                continue
            found = _first_record(seg, h, log_start, lambda ts: ts >= timestamp_ms)
            if found is not None:
                return found
    return None


def max_timestamp(
    segments: Sequence[Segment], *, log_start: int
) -> tuple[Offset, TimestampMs] | None:
    """The first record carrying the largest timestamp; None for an empty log."""
    if segments[-1].next_offset == log_start:
        return None
    best = None
    for seg in segments:
        if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None:
        return None
    target = best.max_timestamp
    start = best.offset_index.lookup(best.offset_of_max_timestamp)
    for h in best.iter_headers(start):
        if h.max_timestamp == target:
            found = _first_record(best, h, log_start, lambda ts: ts == target)
            if found is not None:
                return found
    return None


def _first_record(
    seg: Segment, header: BatchHeader, log_start: int, match: Callable[[int], bool]
) -> tuple[Offset, TimestampMs] | None:
    data = seg.read_batch(header)
    for r in decode_batch(data, read_header(data)):
        if r.offset >= log_start and match(r.timestamp):
            return Offset(r.offset), TimestampMs(r.timestamp)
    return None


def end_for_bytes(
    segments: Sequence[Segment],
    bases: list[int],
    start: int,
    end: int,
    max_bytes: int,
    *,
    log_start: int,
) -> Offset:
    """See :meth:`floe.storage.interface.PartitionLog.end_for_bytes` (``bases``: the
    segments' base offsets; ``start < end``). Offsets below ``log_start`` cost nothing.
    Whole segments are counted by their in-memory size; only the first and the last
    segment touched are located, each through its offset index and a few batch headers.
    """
    first = max(start, log_start)
    budget = max_bytes
    reached = first
    counting = False
    for seg in segments[max(bisect_right(bases, first) - 1, 0) :]:
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
    return Offset(end)
