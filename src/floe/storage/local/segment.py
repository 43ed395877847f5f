"""One log segment: a ``.log`` file of whole batches plus its two sparse indexes.

Files are named by the 20-digit base offset. Batches are written exactly as given
(already offset-patched by the partition log) with ``os.write`` on a raw ``O_APPEND``
fd, and read back with ``os.pread``; nothing here buffers in Python. Fds come from the
store's :class:`~floe.storage.local.fdcache.FileCache` and are asked for again at each
use (:attr:`Segment.fd`), so a segment costs no descriptor while it is not used.

Invariant: ``size`` is the number of bytes of whole, valid batches in the file, and
``next_offset`` is one past the last offset of the last batch (the base offset when
the segment is empty). Both move as soon as a batch is in the file, before its index
entries are written, so a failing index write never leaves them stale.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from floe.errors import CorruptRecordError, InvalidRecordError
from floe.protocol.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header, scan
from floe.storage.interface import StorageError
from floe.storage.local import fileio
from floe.storage.local.fdcache import FileCache, FileHandle
from floe.storage.local.index import OffsetIndex, TimeIndex

log = logging.getLogger(__name__)

_LEN_AT_8 = struct.Struct(">i")
_SCAN_CHUNK = 8 * 1024 * 1024
_HEADER_CHUNK = 16 * 1024


DELETED_SUFFIX = ".deleted"
"""Files of a segment removed from its log, waiting for the worker to unlink them."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class Segment:
    """A segment file and its indexes.

    Owned by one :class:`~floe.storage.local.log.LocalPartitionLog` on the event loop;
    created on roll or load (the ``.log`` file is created when missing), closed by the
    log on delete, swap or close. Group-commit fsync rounds and the maintenance worker
    get private fds through :meth:`FileCache.dup` or by path, never this one.

    Methods raise :class:`OSError` for I/O failures; the log decides what they mean.

    Attributes:
        roll_base_ms: when the segment started, for time-based rolling: the append time
            of its first batch, or after a restart the max timestamp of its first batch.
        synced_size: bytes known to be fdatasync'ed.
        identity: (st_dev, st_ino) of the file, so a worker thread reading it by path
            can tell it is still this segment's file.
    """

    def __init__(self, directory: Path, base_offset: int, files: FileCache) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.files = files
        stem = directory / segment_name(base_offset)
        self.path = stem.with_suffix(".log")
        self.handle = FileHandle(self.path)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = os.fstat(files.fd(self.handle))
        self.identity = (st.st_dev, st.st_ino)
        self.size = st.st_size
        self.synced_size = self.size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.roll_base_ms = -1
        self.bytes_since_index = 0
        self.offset_index = OffsetIndex(stem.with_suffix(".index"), base_offset, files)
        self.time_index = TimeIndex(stem.with_suffix(".timeindex"), base_offset, files)

    @property
    def fd(self) -> int:
        """The segment file's fd: use it at once (the next cache call may close it).

        Raises:
            OSError: the file cannot be opened.
        """
        return self.files.fd(self.handle)

    # -- writing --------------------------------------------------------------------

    def write(self, buf: bytearray, headers: list[BatchHeader], index_interval: int) -> None:
        """Append ``buf`` (whole batches described by ``headers``) and index them.

        Raises:
            OSError: the segment write failed (the file is cut back to its previous size
                when possible; ``size`` and ``next_offset`` are unchanged), or an index
                write failed after the batches reached the file (``size`` and
                ``next_offset`` already count them).
        """
        start = self.size
        fd = self.fd
        try:
            fileio.write_all(fd, buf)
        except OSError:
            try:
                fileio.ftruncate(fd, start)
            except OSError:
                log.exception("log.segment.truncate_failed path=%s", self.path)
            raise
        self.size = start + len(buf)
        self.next_offset = headers[-1].next_offset
        self._index(headers, start, index_interval)

    def _index(self, headers: list[BatchHeader], start: int, index_interval: int) -> None:
        """Track the max timestamp and add sparse index entries for ``headers``.

        Raises:
            OSError: an index file write failed (the in-memory entries are complete).
        """
        entries: list[tuple[int, int, int, int]] = []
        for h in headers:
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset
            if self.bytes_since_index > index_interval:
                entries.append((h.base_offset, start + h.position, self.max_timestamp,
                                self.offset_of_max_timestamp))  # fmt: skip
                self.bytes_since_index = 0
            self.bytes_since_index += LOG_OVERHEAD + h.batch_length
        for offset, position, max_ts, max_ts_offset in entries:
            self.offset_index.append(offset, position)
            self.time_index.maybe_append(max_ts, max_ts_offset)

    def seal(self) -> None:
        """Record the final max timestamp in the time index (on roll), so a clean
        restart knows it without scanning."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # -- reading --------------------------------------------------------------------

    def iter_headers(self, position: int = 0, chunk: int = _HEADER_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the batches from ``position`` on (positions are file positions);
        reads ``chunk`` bytes at a time and trusts the framing."""
        end = self.size
        while position < end:
            data = os.pread(self.fd, min(chunk, end - position), position)
            i = 0
            n = len(data)
            while i + HEADER_SIZE <= n:
                h = read_header(data, i)
                h.position = position + i
                yield h
                i += LOG_OVERHEAD + h.batch_length
            if i == 0:
                return
            position += i

    def locate(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (None past the end)."""
        for h in self.iter_headers(self.offset_index.lookup(offset)):
            if h.base_offset + h.last_offset_delta >= offset:
                return h
        return None

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes | None:
        """Whole batches from the one holding ``offset``, within ``max_bytes`` (or the
        first batch alone when it is larger and ``min_one``); None when the segment has
        nothing at or after ``offset``."""
        first = self.locate(offset)
        if first is None:
            return None
        start = first.position
        if first.size > max_bytes:
            return os.pread(self.fd, first.size, start) if min_one else b""
        data = os.pread(self.fd, min(max_bytes, self.size - start), start)
        n = len(data)
        # jump to the last indexed batch boundary inside the read, then walk headers
        positions = self.offset_index.values
        j = bisect_right(positions, start + n) - 1
        cut = max(first.size, positions[j] - start if j >= 0 else 0)
        while cut + LOG_OVERHEAD <= n:
            (length,) = _LEN_AT_8.unpack_from(data, cut + 8)
            if cut + LOG_OVERHEAD + length > n:
                break
            cut += LOG_OVERHEAD + length
        return data if cut == n else data[:cut]

    def boundary_within(self, position: int, limit: int, end: int) -> int | None:
        """The offset ending the last whole batch in file positions ``[position,
        limit)`` (``position`` is a batch start), or None when the first batch ends
        beyond ``limit``. Walks headers from the offset-index floor entry of ``limit``,
        and stops once a boundary reaches ``end``."""
        positions = self.offset_index.values
        j = bisect_right(positions, limit) - 1
        found = None
        if j >= 0 and positions[j] > position:  # the batch before it ends there
            position = positions[j]
            found = self.base_offset + self.offset_index.keys[j]
        for h in self.iter_headers(position):
            if h.position + h.size > limit or (found is not None and found >= end):
                break
            found = h.next_offset
        return found

    def read_batch(self, header: BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, header.position)

    # -- loading and recovery ---------------------------------------------------------

    def load(self, is_last: bool) -> bool:
        """Trust-but-check load after a clean shutdown or below the recovery point:
        read the indexes; for the last segment also scan its tail for the log end.
        Returns False when an index is unusable (the caller then calls :meth:`recover`).
        """
        if not (self.offset_index.load(self.size) and self.time_index.load()):
            return False
        if self.size and not len(self.time_index):
            return False
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        if is_last:
            start = self.offset_index.values[-1] if len(self.offset_index) else 0
            last = None
            for h in self.iter_headers(start):
                last = h
                if h.max_timestamp > self.max_timestamp:
                    self.max_timestamp = h.max_timestamp
                    self.offset_of_max_timestamp = h.base_offset
                self.bytes_since_index += h.size
            if last is not None:
                self.next_offset = last.next_offset
            first = next(self.iter_headers(0, HEADER_SIZE), None)
            if first is not None:
                self.roll_base_ms = first.max_timestamp
        return True

    def recover(self, index_interval: int, min_offset: int) -> int:
        """Re-scan the whole file with CRC checks, rebuild both indexes and cut a torn
        or corrupt tail (a bad batch, or one whose offsets go backwards from
        ``min_offset``). Returns the number of bytes cut.

        Raises:
            StorageError: the file cannot be read or truncated.
        """
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_index = 0
        self.next_offset = expected = max(self.base_offset, min_offset)
        pos = 0
        try:
            self.offset_index.reset()
            self.time_index.reset()
            file_size = os.fstat(self.fd).st_size
            while pos < file_size:
                data = os.pread(self.fd, min(_SCAN_CHUNK, file_size - pos), pos)
                if len(data) >= LOG_OVERHEAD:
                    need = LOG_OVERHEAD + _LEN_AT_8.unpack_from(data, 8)[0]
                    if len(data) < need <= file_size - pos:
                        data = os.pread(self.fd, need, pos)  # a batch larger than a chunk
                headers = _valid_prefix(data)
                good: list[BatchHeader] = []
                for h in headers:
                    if h.base_offset < expected:
                        break
                    expected = h.next_offset
                    good.append(h)
                if not good:
                    break
                if self.roll_base_ms < 0:
                    self.roll_base_ms = good[0].max_timestamp
                self._index(good, pos, index_interval)
                self.next_offset = expected
                pos += good[-1].position + good[-1].size
                if len(good) < len(headers):
                    break
            dropped = file_size - pos
            if dropped:
                fileio.ftruncate(self.fd, pos)
            self.size = self.synced_size = pos
            self.seal()
        except OSError as exc:
            raise StorageError(f"recovery of {self.path} failed: {exc}") from exc
        return dropped

    # -- lifecycle --------------------------------------------------------------------

    @property
    def handles(self) -> tuple[FileHandle, FileHandle, FileHandle]:
        """The segment file's and both indexes' handles (for fsync rounds)."""
        return (self.handle, self.offset_index.handle, self.time_index.handle)

    def fsync(self) -> None:
        """fsync the segment file and its indexes now (recovery, on open).

        Raises:
            OSError: an fsync failed.
        """
        fileio.fsync(self.fd)
        self.offset_index.fsync()
        self.time_index.fsync()

    def close(self) -> None:
        """Close the segment's fds (the object stays usable: they reopen on use)."""
        self.files.close(self.handle)
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        """Close and unlink the log first, then the indexes: an index without its log
        is removed on the next load."""
        self.close()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)

    def retire(self) -> list[Path]:
        """Close the segment and rename its files to ``*.deleted`` (cheap, on the loop),
        log file first; returns the renamed paths for a worker to unlink. Readers that
        list ``*.log`` no longer see it; the next open removes leftovers.

        Raises:
            OSError: a rename failed.
        """
        self.close()
        doomed = []
        for path in (self.path, self.offset_index.path, self.time_index.path):
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue
            doomed.append(target)
        return doomed


def _valid_prefix(data: bytes) -> list[BatchHeader]:
    """The headers of the leading whole, CRC-valid batches of ``data``."""
    try:
        return scan(data, partial_ok=True)
    except (CorruptRecordError, InvalidRecordError):
        pass
    out: list[BatchHeader] = []
    view = memoryview(data)
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        size = LOG_OVERHEAD + _LEN_AT_8.unpack_from(data, pos + 8)[0]
        if size < HEADER_SIZE or pos + size > len(data):
            break
        try:
            (h,) = scan(view[pos : pos + size])
        except (CorruptRecordError, InvalidRecordError):
            break
        h.position = pos
        out.append(h)
        pos += size
    return out
