"""What an object store's open does before it serves (:func:`open_cache`): read the
bucket, make the cache agree with it, take this broker's partitions in the metadata
store, read up to their committed ends and restore what the cache lacks. One job, in
that order: the order is what makes it safe (the lease before the listing, the
ownership before the committed ends: ``docs/architecture.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.storage.interface import WriteGuard
from floe.storage.local import LocalStore
from floe.storage.object.bucket import Bucket
from floe.storage.object.restore import (
    adopt_topics,
    drop_stale_partitions,
    mark_owned,
    read_at_open,
    read_partitions_at_open,
    restore_partitions,
    to_commit_point,
)
from floe.storage.object.state import BucketState, WalIndexes
from floe.storage.object.topics import take_at_open
from floe.types import PartitionId, TopicName


@dataclass
class OpenedCache:
    """What :func:`open_cache` leaves: the bucket as read (up to the committed ends), the
    cache brought to it, the dead streams it fenced (stream -> epoch) and the partitions
    it restored."""

    state: BucketState
    local: LocalStore
    fences: dict[str, int]
    restored: list[tuple[TopicName, PartitionId]]


def open_cache(
    data_dir: Path,
    config: BrokerConfig,
    bucket: Bucket,
    guard: WriteGuard | None,
    indexes: WalIndexes,
    *,
    holds: Callable[[TopicName, int], bool] | None,
    member: bool,
    bounded: bool,
) -> OpenedCache:
    """Read the bucket (``indexes``: the WAL indexes known, updated to the listed ones)
    and bring the cache under ``data_dir`` to it; in a cluster (``guard``), once this
    broker holds its lease: drop partitions another broker may have written since,
    take this broker's partitions (``holds``: those it leads at start; None: all) and
    fence the dead streams, and read up to their committed ends. A ``member`` lists
    the partition objects of the partitions it leads and of those its own WAL
    objects hold (its upload pass deletes those once covered) alone: not every
    partition of the bucket (8.8 s of a restart at 50k partition objects).

    Raises:
        StorageError: the bucket cannot be read, lacks committed records, or the cache
            cannot be opened.
        FloeError: the metadata store refused this broker its partitions.
    """
    me = config[keys.NODE_ID]
    state = read_at_open(bucket, indexes, guard, partitions=() if member else None)
    adopt_topics(data_dir, state)
    fences: dict[str, int] = {}
    if guard is not None:
        drop_stale_partitions(data_dir, state, guard, me)
        fences, holds = take_at_open(guard, state, me, member=member, holds=holds)
        held = [
            (meta.topic_id, p)
            for meta in (state.topics or {}).values()
            for p in range(meta.partitions)
            if holds is None or holds(meta.name, PartitionId(p))
        ]
        listed = None
        if member:  # its own partitions, and those its WAL objects hold, not the bucket
            listed = sorted({*held, *state.written_by(str(me))})
            read_partitions_at_open(bucket, state, listed)
        state = to_commit_point(bucket, state, guard, indexes, restored=held, only=listed)
    local = LocalStore(data_dir, config, holds)
    restored = restore_partitions(
        local, bucket, state,
        [(meta, PartitionId(p)) for meta in local.topics().values()
         for p in range(meta.partitions) if local.holds(meta.name, PartitionId(p))],
        bounded=bounded,
    )  # fmt: skip
    if guard is not None:
        mark_owned(data_dir, local, guard, me)
    return OpenedCache(state, local, fences, restored)
