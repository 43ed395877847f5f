"""The system calls that change the local store's files, in one place.

Every write, fsync, fdatasync and ftruncate of the engine (segments, indexes, snapshots,
checkpoints, topic metadata) goes through these functions, so that:

* the rules for a failure live next to the calls: after a failed ``fsync``/``fdatasync``
  the page cache state of the file is unknown (Linux may have dropped the dirty pages and
  cleared the error), so callers never retry it and never report durability after it
  (see :attr:`floe.storage.local.log.LocalPartitionLog.offline`);
* tests can inject failures. **Fault-injection seam**: :func:`set_fault_hook` installs a
  callable run before each call with the operation name (``"write"``, ``"fsync"``,
  ``"fdatasync"``, ``"ftruncate"``) and the fd; it may raise :class:`OSError` (EIO,
  ENOSPC) as a failing disk would. It exists because fsync errors cannot be provoked on
  a healthy disk without root-only device mappers; production code never sets it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

FaultHook = Callable[[str, int], None]


class _Faults:
    hook: FaultHook | None = None


_faults = _Faults()

TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE})
"""Errors that say nothing about the data (no descriptor was available): the operation
may be tried again later, the partition stays online."""


def set_fault_hook(hook: FaultHook | None) -> None:
    """Install (or with None remove) the fault-injection hook (tests only)."""
    _faults.hook = hook


def _check(op: str, fd: int) -> None:
    hook = _faults.hook
    if hook is not None:
        hook(op, fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` (looping over short writes).

    Raises:
        OSError: the write failed; part of ``data`` may have reached the file.
    """
    view = memoryview(data)
    while view:
        _check("write", fd)
        view = view[os.write(fd, view) :]


def fsync(fd: int) -> None:
    """Raises: OSError: the fsync failed (never retry it: see the module docstring)."""
    _check("fsync", fd)
    os.fsync(fd)


def fdatasync(fd: int) -> None:
    """Raises: OSError: the fdatasync failed (never retry it)."""
    _check("fdatasync", fd)
    os.fdatasync(fd)


def ftruncate(fd: int, size: int) -> None:
    """Raises: OSError: the truncation failed."""
    _check("ftruncate", fd)
    os.ftruncate(fd, size)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so the entries created, renamed or removed in it are durable.

    Raises:
        OSError: it cannot be opened or fsynced.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def is_transient(exc: OSError) -> bool:
    """True for a failure that left every file as it was (no descriptor available)."""
    return exc.errno in TRANSIENT
