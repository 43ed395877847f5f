"""Opening a partition directory: trust what was fsynced, re-scan the rest.

After a clean shutdown every segment's indexes are trusted (after a sanity check).
Otherwise each segment that may hold offsets at or beyond the partition's recovery
point is re-scanned with CRC checks: a torn or corrupt tail is cut (one WARNING line
``log.recovery.truncated``), later segments are dropped, indexes are rebuilt, and the
recovered files are fsynced so the recovery point can move to the log end.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from floe.config.topic import ResolvedTopicConfig
from floe.storage.local.fdcache import FileCache
from floe.storage.local.log import LocalPartitionLog, load_log_start
from floe.storage.local.segment import DELETED_SUFFIX, Segment
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

_STALE_SUFFIXES = (".tmp", ".cleaned", DELETED_SUFFIX)


def _segment_bases(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files; removes leftovers of interrupted work
    (temporary and cleaned files, indexes whose log is gone)."""
    bases: set[int] = set()
    indexes: list[Path] = []
    for p in directory.iterdir():
        if p.name.endswith(_STALE_SUFFIXES):
            p.unlink()
        elif p.suffix == ".log" and p.stem.isdigit():
            bases.add(int(p.stem))
        elif p.suffix in (".index", ".timeindex") and p.stem.isdigit():
            indexes.append(p)
    for p in indexes:
        if int(p.stem) not in bases:
            p.unlink()
    return sorted(bases)


def open_log(
    topic: TopicName,
    partition: PartitionId,
    directory: Path,
    config: ResolvedTopicConfig,
    *,
    clean: bool,
    recovery_point: int,
    files: FileCache,
    new: bool = False,
) -> LocalPartitionLog:
    """Load (and if needed recover) one partition directory, creating it when missing
    (``new``: the store just created it for a new partition).

    Raises:
        StorageError: a segment cannot be read or truncated.
        OSError: the directory cannot be created or listed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    log_start = load_log_start(directory)
    bases = _segment_bases(directory) or [log_start]
    interval = config.index_interval_bytes
    segments: list[Segment] = []
    prev_next = 0
    for i, base in enumerate(bases):
        seg = Segment(directory, base, files)
        segments.append(seg)
        last = i == len(bases) - 1
        beyond = last or bases[i + 1] > recovery_point
        if (not clean and beyond) or not seg.load(last):
            dropped = seg.recover(interval, prev_next)
            seg.fsync()
            if dropped and not last:  # a corrupt middle: later segments cannot follow
                dropped += _delete_segments(bases[i + 1 :], directory, files)
            if dropped:
                log.warning(
                    "log.recovery.truncated topic=%s partition=%d offset=%d bytes=%d",
                    topic, partition, seg.next_offset, dropped,
                )  # fmt: skip
                break
        elif not last:
            seg.next_offset = bases[i + 1]
        prev_next = seg.next_offset
    if segments[-1].size and segments[-1].roll_base_ms < 0:
        segments[-1].roll_base_ms = int(os.stat(segments[-1].path).st_mtime * 1000)
    return LocalPartitionLog(
        topic, partition, directory, config=config, segments=segments,
        log_start_offset=log_start, files=files, new=new,
    )  # fmt: skip


def _delete_segments(bases: list[int], directory: Path, files: FileCache) -> int:
    """Delete the segments at ``bases``; returns their total size."""
    dropped = 0
    for base in bases:
        seg = Segment(directory, base, files)
        dropped += seg.size
        seg.delete()
    return dropped
