"""A bounded LRU of open file descriptors for every segment and index file of a store.

A partition has at least three files (segment, offset index, time index) per segment, so
keeping them all open would need tens of thousands of descriptors for a few thousand
partitions. Instead each file is a :class:`FileHandle`, opened on first use, kept in an
LRU of at most ``log.max.open.files`` descriptors (capped at half the process's open-file
limit), and closed when it falls out; the next use reopens it (``O_APPEND`` keeps
appends at the end). Nothing is buffered in Python, so closing an fd loses nothing.

Rules that keep an fd number from ever naming the wrong file:

* only the owning thread (the broker's event loop) opens, evicts and closes cached fds,
  and it uses an fd right after :meth:`FileCache.fd` returned it, never across another
  call that may evict (so readers re-ask per ``pread``);
* other threads (fsync rounds, the maintenance worker) never borrow a cached fd: they
  call :meth:`FileCache.dup`, which, under the lock that guards every close, dups the
  cached fd or opens the path itself, and they close what they got.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class FileHandle:
    """One file of a segment, opened through a :class:`FileCache` when used.

    Identity (not the path) is the cache key: a segment replaced by compaction gets new
    handles, and the old ones are closed with it.
    """

    __slots__ = ("__weakref__", "path")

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileHandle({str(self.path)!r})"


def fd_budget(configured: int) -> int:
    """The number of descriptors the cache may hold: ``configured``, but at most half
    the current soft RLIMIT_NOFILE (the rest is for sockets, Spark, journals), and at
    least 8."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        configured = min(configured, soft // 2)
    return max(configured, 8)


class FileCache:
    """LRU of open fds, one per :class:`FileHandle`.

    Owned by the store's event loop (see the module docstring for what other threads
    may do); lives as long as the store, whose ``close`` closes every handle.

    Attributes:
        opens: files opened so far (a metric: a high rate means the cache is too small).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.opens = 0
        self._fds: OrderedDict[FileHandle, int] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._fds)

    def fd(self, handle: FileHandle) -> int:
        """An open fd of ``handle``'s file (created if missing), most recently used.
        Use it at once: a later call may close it.

        Raises:
            OSError: the file cannot be opened (EMFILE only after evicting and retrying).
        """
        fds = self._fds
        fd = fds.get(handle)
        if fd is not None:
            fds.move_to_end(handle)
            return fd
        fd = self._open(handle.path)
        with self._lock:
            fds[handle] = fd
            while len(fds) > self.capacity:
                os.close(fds.popitem(last=False)[1])
        return fd

    def _open(self, path: Path) -> int:
        try:
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._fds:
                raise
            log.warning("store.fd_cache.exhausted open=%d error=%s", len(self._fds), exc)
            self._evict(max(len(self._fds) // 2, 1))
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        self.opens += 1
        return fd

    def _evict(self, n: int) -> None:
        with self._lock:
            for _ in range(min(n, len(self._fds))):
                os.close(self._fds.popitem(last=False)[1])

    def dup(self, handle: FileHandle) -> int | None:
        """A private fd of ``handle``'s file for another thread (which closes it): a dup
        of the cached fd, else the file opened read-only; None when the file is gone.
        Safe from any thread.

        Raises:
            OSError: no descriptor is available, or the file cannot be opened.
        """
        with self._lock:
            fd = self._fds.get(handle)
            if fd is not None:
                return os.dup(fd)
        try:
            return os.open(handle.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None

    def close(self, handle: FileHandle) -> None:
        """Close ``handle``'s fd if it is open (it may be used again: it reopens)."""
        with self._lock:
            fd = self._fds.pop(handle, None)
            if fd is not None:
                os.close(fd)

    def close_all(self) -> None:
        self._evict(len(self._fds))
