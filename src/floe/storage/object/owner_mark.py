"""Which ownership a partition's cache was written under, so that a broker opening
again serves its cache only when nobody else has owned the partition since.

In a cluster a broker's cache may hold records beyond the partition's committed end
(acks=1 records not yet uploaded, or uploaded and never committed) that another
broker, having taken the partition over, replaced with records of its own at the same
offsets. When the partition comes back to the first broker (it restarts as its owner,
or is handed it back while it starts), that cache is not the log any more, and its
batches may even line up with the bucket's, so nothing downstream would notice.

Ownership epochs grow with every claim, so a cache is the log's prefix exactly when
the metadata store still names this broker the owner at the epoch the cache was last
written under. That epoch is kept in the partition's directory (:data:`NAME`): written
when the broker leads the partition after its open and whenever a WAL upload stamps
its records with a newer epoch. A missing or unreadable mark, or any other owner or
epoch, means the cache is dropped and restored from the bucket: losing it costs a
restore, never a record of the log.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

NAME = "owner.epoch"
"""The mark's file in a partition's directory: ``<broker id> <ownership epoch>``."""


def read(directory: Path) -> tuple[int, int] | None:
    """The ``(broker, epoch)`` the cache in ``directory`` was last written under
    (None: no mark, or not one this module wrote)."""
    try:
        broker, epoch = (directory / NAME).read_text().split()
        return int(broker), int(epoch)
    except (OSError, ValueError):
        return None


def write(directory: Path, broker: int, epoch: int) -> None:
    """Record that the cache in ``directory`` is written under ``(broker, epoch)``
    (replaced atomically; not synced: a mark lost to a power cut only costs a
    restore)."""
    if not directory.is_dir():
        return
    tmp = directory / f"{NAME}.tmp"
    with contextlib.suppress(FileNotFoundError):  # the directory replaced meanwhile
        tmp.write_text(f"{broker} {epoch}\n")
        os.replace(tmp, directory / NAME)
