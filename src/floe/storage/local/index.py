"""Sparse segment indexes, kept in memory and appended to a file as they grow.

Both indexes are derived data: the log segment is the truth. A file that fails the
sanity check on load (bad size, entries out of order, positions past the log) is
rebuilt from the segment, so a torn or stale index can cost time but never give a
wrong answer.

File formats (big endian, as Kafka's):
    ``.index``      (relative offset int32, file position int32) per entry
    ``.timeindex``  (timestamp int64, relative offset int32) per entry
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from floe.storage.local import fileio
from floe.storage.local.fdcache import FileCache, FileHandle

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """An append-only file of fixed-size entries mirrored in two in-memory columns.

    Owned by its segment (event loop); its fd lives in the store's
    :class:`~floe.storage.local.fdcache.FileCache`, opened only to append, reset or
    fsync; the file is created by the first of those (a segment that never needed an
    entry has none, which loads as empty). Closed with its segment.
    """

    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, files: FileCache) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")
        self.files = files
        self.handle = FileHandle(path)

    def _read(self) -> bytes:
        """The file's bytes (a private fd, not cached: loading touches every index
        once); empty when the file does not exist."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)

    def _load(self) -> bool:
        data = self._read()
        if len(data) % self.entry.size:
            return False
        for a, b in self.entry.iter_unpack(data):
            self.keys.append(a)
            self.values.append(b)
        return True

    def _append(self, a: int, b: int) -> None:
        """Add an entry in memory, then to the file.

        Raises:
            OSError: the file write failed (the in-memory entry stays: it is right).
        """
        self.keys.append(a)
        self.values.append(b)
        fileio.write_all(self.files.fd(self.handle), self.entry.pack(a, b))

    def reset(self) -> None:
        """Drop every entry (before a rebuild).

        Raises:
            OSError: the file cannot be truncated.
        """
        del self.keys[:]
        del self.values[:]
        fileio.ftruncate(self.files.fd(self.handle), 0)

    def fsync(self) -> None:
        """Raises: OSError: the fsync failed."""
        if self.keys or self.path.exists():
            fileio.fsync(self.files.fd(self.handle))

    def close(self) -> None:
        self.files.close(self.handle)

    def __len__(self) -> int:
        return len(self.keys)


class OffsetIndex(_IndexFile):
    """Base offset of an indexed batch -> its position in the segment file."""

    entry = _OFFSET_ENTRY

    def load(self, log_size: int) -> bool:
        """Read the file; False when it is inconsistent and must be rebuilt (every
        entry is checked: offsets and positions strictly increasing, inside the log)."""
        data = self._read()
        if len(data) % self.entry.size:
            return False
        self.keys, self.values = offset_entries(data)
        keys, values = self.keys, self.values
        return not keys or (
            keys[0] >= 0
            and values[0] >= 0
            and values[-1] < log_size
            and all(map(operator.lt, keys, keys[1:]))
            and all(map(operator.lt, values, values[1:]))
        )

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or below ``offset`` (else 0)."""
        i = bisect_right(self.keys, offset - self.base_offset) - 1
        return self.values[i] if i >= 0 else 0


def offset_entries(data: bytes) -> tuple[array[int], array[int]]:
    """The (relative offsets, positions) columns of raw ``.index`` bytes. A partial
    trailing entry is ignored: the broker may be appending it while another process
    reads the file."""
    pairs = array("i", data[: len(data) - len(data) % _OFFSET_ENTRY.size])
    if sys.byteorder == "little":
        pairs.byteswap()
    return array("q", pairs[0::2]), array("q", pairs[1::2])


class TimeIndex(_IndexFile):
    """Running max timestamp -> base offset of the batch where that max was reached."""

    entry = _TIME_ENTRY

    def load(self) -> bool:
        """Read the file; False when it is inconsistent and must be rebuilt."""
        if not self._load():
            return False
        prev_ts = -(2**63)
        for ts, rel in zip(self.keys, self.values, strict=True):
            if ts <= prev_ts or rel < 0:
                return False
            prev_ts = ts
        return True

    @property
    def last_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.values[-1] if self.values else self.base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record a new running maximum (ignored unless it grows)."""
        if timestamp > self.last_timestamp:
            self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which scanning finds the first batch whose max timestamp is
        >= ``timestamp``: every batch before it has only smaller timestamps."""
        i = bisect_left(self.keys, timestamp) - 1
        return self.base_offset + self.values[i] if i >= 0 else self.base_offset
