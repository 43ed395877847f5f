"""What a WAL object's commit means for the partitions it holds (the bookkeeping of
:mod:`~floe.storage.object.wal`'s commit point, without its I/O): which ownership epoch
each entry carries, which commits an object asks for, which of them may still be sent
when the object was put while the commit before it was in flight, and how a commit's
answer moves each partition's uploaded offset or fences it.

Plain functions of the WAL writer's event loop; none of them awaits.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping

from floe.storage.object.layout import Entry
from floe.storage.object.partition import ObjectPartitionLog
from floe.types import PartitionId, TopicName

Taken = list[tuple[ObjectPartitionLog, int]]
"""The logs a WAL object read, each with the offset it read them up to."""
Ends = dict[tuple[TopicName, PartitionId], tuple[int | None, int]]
"""Each partition's commit: the committed end it starts from, and its new end."""
Split = tuple[list[Entry], Taken, Taken]
"""The entries and logs kept, and the logs left out."""
_Keep = Callable[[ObjectPartitionLog, tuple[uuid.UUID, int], int], bool]
"""Whether to keep a log, given its key and the offset the object read it up to."""


def stamped(
    entries: list[Entry], taken: Taken, epochs: Mapping[tuple[TopicName, PartitionId], int]
) -> list[Entry]:
    """``entries`` with their partitions' ownership epochs (0: not owned; refused at
    the commit)."""
    names = {(lg.topic_id, int(lg.partition)): (lg.topic, lg.partition) for lg, _ in taken}
    return [
        dataclasses.replace(e, epoch=epochs.get(names[(e.topic_id, e.partition)], 0))
        for e in entries
    ]


def ends_of(entries: list[Entry], taken: Taken) -> Ends:
    """The commit of every partition with records in ``entries``."""
    held = {(e.topic_id, e.partition) for e in entries}
    return {
        (lg.topic, lg.partition): (lg.committed, position)
        for lg, position in taken
        if (lg.topic_id, int(lg.partition)) in held
    }


def continuing(entries: list[Entry], taken: Taken) -> Split:
    """What of an object put while the commit before it was in flight may be committed
    once that commit is known: the partitions whose records before it were committed
    (their uploaded offset reached where this object starts them: the entry's base, or,
    with no records in it, the offset it read them up to). The others (fenced, their
    commit failed, or left out of it to go again into an object stamped right) are
    left out: their records in this object are never committed, and one without records
    in it (queued again while its records were in flight) must not have its uploaded
    offset moved by this object's commit either."""
    bases = {(e.topic_id, e.partition): e.base for e in entries}
    return _split(
        entries, taken,
        lambda lg, key, position: lg.fenced is None
        and lg.uploaded == bases.get(key, position),
    )  # fmt: skip


def rightly_stamped(
    entries: list[Entry], taken: Taken, now: Mapping[tuple[TopicName, PartitionId], int]
) -> Split:
    """What of an object may be committed: the partitions whose entries carry the epoch
    ``now`` says this broker owns them at. An entry's epoch decides which owner's
    records a restore keeps, so a wrong one must never be committed."""
    stamps = {(e.topic_id, e.partition): e.epoch for e in entries}
    return _split(
        entries, taken,
        lambda lg, key, _: (stamp := stamps.get(key)) is None
        or stamp == now.get((lg.topic, lg.partition), 0),
    )  # fmt: skip


def _split(entries: list[Entry], taken: Taken, keep: _Keep) -> Split:
    kept: Taken = []
    dropped: Taken = []
    for lg, position in taken:
        key = (lg.topic_id, int(lg.partition))
        (kept if keep(lg, key, position) else dropped).append((lg, position))
    names = {(lg.topic_id, int(lg.partition)) for lg, _ in kept}
    return [e for e in entries if (e.topic_id, e.partition) in names], kept, dropped


def apply_commit(
    taken: Taken, ends: Ends, done: Mapping[tuple[TopicName, PartitionId], int | None]
) -> None:
    """Move the uploaded offset of every partition committed (or with nothing to
    commit) to what its log holds now; fence those whose records are not all in it
    (another broker owns them now: what was not committed never will be)."""
    for lg, position in taken:
        key = (lg.topic, lg.partition)
        if key not in ends:  # nothing of it here: what it has is committed, unless fenced
            if lg.fenced is None:
                lg.uploaded = max(lg.uploaded, position)
            continue
        end = done.get(key)
        if end is not None:
            lg.committed = end
            lg.uploaded = max(lg.uploaded, min(end, position))
        if end is None or end < position:
            lg.fence("another broker took the partition over (its commit was refused)")
