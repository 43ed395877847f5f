"""Producer-state snapshot files of a partition directory (Kafka's ``.snapshot``).

``<20-digit offset>.snapshot`` holds the producer state as of that offset
(:func:`floe.storage.producer_state.encode_snapshot`, checksummed). One is written at
each segment roll and at clean shutdown, and after a recovery; a start loads the newest
one at or below the log end and replays only the batch headers after it. Files are
written to a temporary name and renamed (no fsync on the append path: the partition's
next fsync round syncs them with its segments); a damaged one is deleted and an older
one (or a full replay) used instead, so a snapshot can cost time but never give a
wrong answer. The newest :data:`KEEP` are kept.
"""

from __future__ import annotations

import os
from pathlib import Path

from floe.storage.local import fileio
from floe.storage.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot

SUFFIX = ".snapshot"
KEEP = 3


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for name in os.listdir(directory):
        if name.endswith(SUFFIX) and len(name) == 20 + len(SUFFIX) and name[:20].isdigit():
            out.append(int(name[:20]))
    return sorted(out)


def write_snapshot(directory: Path, state: ProducerStateManager, offset: int) -> Path:
    """Write the snapshot of ``state`` as of ``offset`` (not fsynced), then delete all
    but the newest :data:`KEEP`; returns its path.

    Raises:
        OSError: it could not be written (a half-written file is never renamed in).
    """
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fileio.write_all(fd, encode_snapshot(state, offset))
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for old in list_snapshots(directory)[:-KEEP]:
        snapshot_path(directory, old).unlink(missing_ok=True)
    return path


def read_snapshot(directory: Path, offset: int) -> ProducerStateManager | None:
    """The state in snapshot ``offset``; None when the file is damaged or names
    another offset."""
    try:
        data = snapshot_path(directory, offset).read_bytes()
    except FileNotFoundError:
        return None
    decoded = decode_snapshot(data)
    if decoded is None or decoded[0] != offset:
        return None
    return decoded[1]
