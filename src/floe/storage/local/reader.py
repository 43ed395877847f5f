"""Read-only access to a partition's segment files, from any process.

For code that reads a partition's records outside the broker's
:class:`~floe.storage.local.log.LocalPartitionLog` (the table-topic driver's schema
probe; table-topic Spark tasks read through the Kafka protocol instead, see
:mod:`floe.tabletopic.spark.fetch`). It opens
``<logs dir>/<topic>-<partition>/<20-digit base>.log`` itself, reads whole batches with
``pread`` and never writes, locks or deletes anything.

Invariant: :func:`scan_range` accounts for every offset of its range exactly once and
in order: as a record (:class:`Records`), as a control or aborted batch (skipped), as an
unusable batch (:class:`BadBatch`) or as an absent one (:class:`Missing`). Nothing is
dropped silently, so a caller can prove it has read everything. The accounting itself is
:class:`floe.protocol.ranges.RangeAccount`, shared with the fetch-based reader; this
module only finds the batches.

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
from pathlib import Path

from floe.protocol.batch import HEADER_SIZE, MAGIC_V2, BatchHeader, read_header
from floe.protocol.ranges import Aborted, BadBatch, Chunk, Missing, RangeAccount, Records, unusable
from floe.storage.local.index import offset_entries
from floe.storage.local.log import load_log_start

__all__ = [
    "Aborted",
    "BadBatch",
    "Chunk",
    "Missing",
    "Records",
    "index_position",
    "partition_dir",
    "scan_range",
]

_CHUNK = 4 * 1024 * 1024


def partition_dir(logs_dir: Path, topic: str, partition: int) -> Path:
    """The directory of one partition's segments (as :class:`LocalStore` names it)."""
    return logs_dir / f"{topic}-{partition}"


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
            reason = unusable(h)
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


class _Scan:
    """One :func:`scan_range` call: walks the segment files and hands their batches to
    its :class:`~floe.protocol.ranges.RangeAccount`. Owned by that call's generator."""

    def __init__(
        self, directory: Path, start: int, end: int, aborted: Sequence[Aborted], crc: bool
    ) -> None:
        self.directory = directory
        self.account = RangeAccount(start, end, aborted, crc)

    def run(self) -> Iterator[Chunk]:
        """Raises: FileNotFoundError: the partition directory does not exist."""
        account = self.account
        failed_at = None
        while account.pos < account.end:
            try:
                account.missing_to(load_log_start(self.directory))
                yield from self._segments()
                break
            except FileNotFoundError:
                if failed_at == account.pos or not self.directory.is_dir():
                    raise
                failed_at = account.pos  # a segment vanished: list again, from where we are
        yield from account.finish()

    def _segments(self) -> Iterator[Chunk]:
        account = self.account
        segments = _segments(self.directory)
        for i, (base, path) in enumerate(segments):
            following = segments[i + 1][0] if i + 1 < len(segments) else None
            if following is not None and following <= account.pos:
                continue
            if base >= account.end:
                return
            account.missing_to(base)
            yield from self._segment(path, base, following)
            if account.pos >= account.end:
                return

    def _segment(self, path: Path, base: int, following: int | None) -> Iterator[Chunk]:
        """The range's offsets held by one segment (``following``: the next segment's
        base offset, None for the newest).

        Raises:
            FileNotFoundError: the segment was deleted since it was listed.
        """
        account = self.account
        with open(path, "rb") as f:
            fd = f.fileno()
            floor = base
            start = index_position(fd, path.with_suffix(".index"), base, account.pos)
            for item in _batches(fd, start, sealed=following is not None):
                if isinstance(item, str):
                    reason = item
                else:
                    buf, h, position = item
                    if h.base_offset >= floor and (following is None or h.next_offset <= following):
                        floor = h.next_offset
                        if h.next_offset <= account.pos:
                            continue
                        if h.base_offset >= account.end:
                            return
                        yield from account.batch(buf, h, position)
                        if account.pos >= account.end:
                            return
                        continue
                    reason = f"batch offsets {h.base_offset}-{h.last_offset} out of sequence"
                # the rest of the segment cannot be framed
                limit = account.end if following is None else following
                yield from account.bad_to(limit, f"{reason} of segment {base}")
                return


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
