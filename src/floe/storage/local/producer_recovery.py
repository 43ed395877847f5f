"""Rebuilding one partition's producer state when its log opens.

The state is the newest usable producer-state snapshot (:mod:`floe.storage.local.snapshot`)
at or below the log end, brought up to the log end by replaying the batch headers after
it; without a usable snapshot the whole log is replayed (the state is then complete
only if the log still starts at offset 0). Snapshots beyond the log end
(left by a truncation) and damaged ones are deleted, so a snapshot can cost time at
open but never give a wrong answer. Writing the snapshot that spares the next open the
replay is the caller's (:class:`~floe.storage.local.log.LocalPartitionLog`), which
syncs it with its segments.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from floe.protocol.batch import read_header
from floe.protocol.control import control_type
from floe.storage.local import snapshot
from floe.storage.local.segment import Segment
from floe.storage.producer_state import ProducerStateManager
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedProducerState:
    """What :func:`load_producer_state` found."""

    producers: ProducerStateManager
    replayed: bool
    """Batches were replayed after the snapshot (or without one): a snapshot at the
    log end spares the next open that work."""
    dropped: bool
    """Snapshot files were deleted: the directory awaits an fsync."""


def load_producer_state(
    topic: TopicName, partition: PartitionId, directory: Path, segments: Sequence[Segment]
) -> LoadedProducerState:
    """Load the newest usable snapshot at or below the log end (the last segment's next
    offset), deleting those beyond it and damaged ones, then replay the batch headers
    of ``segments`` after it (control batches are read to learn commit or abort).

    Raises:
        OSError: the directory could not be listed, or a snapshot or segment read.
    """
    end = segments[-1].next_offset
    producers = ProducerStateManager()
    start = 0
    dropped = False
    for offset in reversed(snapshot.list_snapshots(directory)):
        state = None if offset > end else snapshot.read_snapshot(directory, offset)
        if state is None:
            log.info(
                "log.snapshot.dropped topic=%s partition=%d offset=%d log_end=%d",
                topic, partition, offset, end,
            )  # fmt: skip
            snapshot.snapshot_path(directory, offset).unlink(missing_ok=True)
            dropped = True
            continue
        producers, start = state, offset
        break
    if start == 0 and segments[0].base_offset > 0:  # no snapshot, the head deleted
        producers.complete = False
    replayed = False
    first = max(bisect_right(segments, start, key=lambda s: s.base_offset) - 1, 0)
    for seg in segments[first:] if start < end else ():
        for h in seg.iter_headers(seg.offset_index.lookup(start)):
            if h.next_offset <= start:
                continue
            replayed = True
            if h.producer_id < 0:
                continue
            kind, coordinator = -1, -1
            if h.is_control:
                data = seg.read_batch(h)
                kind, coordinator = control_type(data, read_header(data))
            producers.apply(h, h.max_timestamp, kind, coordinator)
    # Aborted transactions below the log start are kept until the start next moves:
    # harmless (a range query never reaches them), and on object storage they cover
    # records that only left the cache (``drop_oldest_segment(evicted=True)``).
    return LoadedProducerState(producers, replayed, dropped)
