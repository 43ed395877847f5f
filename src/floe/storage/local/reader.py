"""Read-only access to a partition's segment files, from any process.

Used by table-topic Spark tasks, which run in Python workers outside the broker's event
loop and cannot touch its :class:`~floe.storage.local.log.LocalPartitionLog`. They open
``<logs dir>/<topic>-<partition>/<20-digit base>.log`` themselves, read whole batches
with ``pread`` and never write, lock or delete anything.

Invariants and races (the broker keeps appending, rolling, cleaning meanwhile):

* Readers ask only for offsets below the partition's last stable offset, which the
  broker has already written to the OS; a torn tail beyond it is ignored
  (``partial_ok``).
* A segment may disappear between listing and opening (retention, compaction swaps):
  the listing is retried once; records removed by retention are simply absent, and a
  compacted segment has offset gaps, which readers must accept.
* Control batches and the records of aborted transactions are skipped, given the
  aborted transactions of the range (computed by the broker, passed in as plain data).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from floe.protocol.batch import BatchHeader, scan
from floe.protocol.records import Record, decode_batch

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


def _segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(".log") and len(name) == 24 and name[:20].isdigit():
            out.append((int(name[:20]), Path(entry.path)))
    out.sort()
    return out


def _batches(path: Path, start: int, end: int) -> Iterator[tuple[bytes, BatchHeader]]:
    """Whole batches of one segment file overlapping ``[start, end)``."""
    with open(path, "rb") as f:
        fd = f.fileno()
        pos = 0
        while True:
            buf = os.pread(fd, _CHUNK, pos)
            if not buf:
                return
            headers = scan(buf, verify_crc=False, partial_ok=True)
            if not headers:
                if len(buf) < _CHUNK:
                    return  # a torn tail
                # one batch larger than the chunk: read it whole
                big = os.pread(fd, headers_size(buf), pos)
                headers = scan(big, verify_crc=False, partial_ok=True)
                if not headers:
                    return
                buf = big
            for h in headers:
                if h.base_offset >= end:
                    return
                if h.next_offset > start:
                    yield buf, h
            last = headers[-1]
            pos += last.position + last.size


def headers_size(buf: bytes) -> int:
    """The size of the batch starting at ``buf[0]`` (from its length field)."""
    return 12 + int.from_bytes(buf[8:12], "big", signed=True)


def read_range(
    logs_dir: Path,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    aborted: Sequence[Aborted] = (),
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """The committed data records of ``[start, end)``, batch by batch, in offset order.

    Yields each data batch's header with its records inside the range (control batches
    and aborted transactional batches are skipped).

    Raises:
        FileNotFoundError: the partition directory does not exist.
        CorruptRecordError: a batch that cannot be decoded.
    """
    directory = partition_dir(logs_dir, topic, partition)
    position = start
    for attempt in range(2):
        try:
            for header, records in _read(directory, position, end, aborted):
                position = records[-1].offset + 1
                yield header, records
            return
        except FileNotFoundError:
            if attempt or not directory.exists():
                raise
            # a segment vanished between listing and opening: list again, from where we are


def _read(
    directory: Path, start: int, end: int, aborted: Sequence[Aborted]
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    segments = _segments(directory)
    for i, (base, path) in enumerate(segments):
        if base >= end:
            return
        following = segments[i + 1][0] if i + 1 < len(segments) else None
        if following is not None and following <= start:
            continue
        for buf, h in _batches(path, start, end):
            if h.is_control:
                continue
            if h.is_transactional and any(
                a.producer_id == h.producer_id and a.first <= h.base_offset <= a.last
                for a in aborted
            ):
                continue
            records = [r for r in decode_batch(buf, h) if start <= r.offset < end]
            if records:
                yield h, records
