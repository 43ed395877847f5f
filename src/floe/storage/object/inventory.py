"""What this broker knows the bucket holds, kept current as it writes and deletes
(:class:`Inventory`), and what a partition's last committed manifest names
(:class:`Manifested`). Taken from a :class:`~.state.BucketState` at open and at each
takeover; plain data owned by the broker's event loop, never persisted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from floe.storage.object.layout import Entry, PartObject
from floe.storage.object.state import BucketState, Key


@dataclass(frozen=True)
class Manifested:
    """What a partition's last committed manifest names (in a cluster)."""

    key: str
    """Its key (the one before is deleted once it is committed: a broker restoring the
    partition claimed it first, so it reads this one or a later one)."""
    parts: tuple[str, ...]
    """The partition objects it names, in offset order."""
    snapshots: tuple[int, ...]
    """The producer-state snapshots it names, by offset."""
    end: int
    """Where the objects it names end (a WAL entry below is covered)."""

    @classmethod
    def read(cls, state: BucketState, key: Key) -> Manifested | None:
        """What ``state`` read of ``key`` from its manifest (None: it was listed)."""
        manifest = state.manifests.get(key)
        if manifest is None:
            return None
        parts = state.parts.get(key, [])
        return cls(
            manifest, tuple(o.key for o in parts), tuple(state.snapshots.get(key, ())),
            parts[-1].end if parts else 0,
        )  # fmt: skip


@dataclass
class Inventory:
    """What this broker knows the bucket holds, kept current as it writes and deletes
    objects: taken from a :class:`BucketState` at open and at each takeover, changed by
    the upload pass, retention and deletions. Plain data owned by the broker's event
    loop (the store, its upload pass and its cache eviction share it); never persisted:
    the next open reads the bucket again."""

    parts: dict[Key, list[PartObject]]
    """Each partition's objects, in offset order."""
    log_starts: dict[Key, int]
    """Each partition's log start as recorded in the bucket."""
    snapshots: dict[Key, list[int]]
    """Each partition's producer-state snapshots in the bucket, by offset, oldest first."""
    wal_pending: dict[str, list[Entry]]
    """WAL objects of other runs and brokers not deleted yet (this run's own are the
    WAL writer's ``written``), with their entries."""
    wal_floors: dict[str, int]
    """Each WAL stream's floor as recorded in the bucket."""
    streams: set[str]
    """The WAL streams whose covered objects this broker deletes: its own and those it
    fenced (a dead broker's, whose partitions it took)."""
    deleted: set[uuid.UUID] = field(default_factory=set)
    """Topics deleted whose objects the next upload pass deletes."""
    manifested: dict[Key, Manifested] = field(default_factory=dict)
    """In a cluster, what each partition's last committed manifest names, as read or
    as this broker committed it."""
    doomed: dict[Key, list[str]] = field(default_factory=dict)
    """Objects an upload pass replaced, deleted once a manifest that does not name them
    is committed."""
    swept: set[Key] = field(default_factory=set)
    """In a cluster, the partitions whose objects no committed manifest names this
    broker deleted since it took them (see :meth:`~.uploads.Uploader.upload`)."""

    @classmethod
    def of(cls, state: BucketState, streams: set[str]) -> Inventory:
        """What ``state`` read (its dicts are shared, not copied, but the log starts)."""
        held = cls(
            state.parts, dict(state.log_starts), state.snapshots, state.wal,
            dict(state.floors), streams,
        )  # fmt: skip
        for key in state.manifests:
            if (manifested := Manifested.read(state, key)) is not None:
                held.manifested[key] = manifested
        return held

    def take(self, state: BucketState, key: Key) -> None:
        """Take what ``state`` read of partition ``key`` (one this broker now leads)."""
        self.parts[key] = state.parts.get(key, [])
        self.log_starts[key] = state.log_starts.get(key, 0)
        self.snapshots[key] = state.snapshots.get(key, [])
        manifested = Manifested.read(state, key)
        if manifested is None:
            self.manifested.pop(key, None)
        else:
            self.manifested[key] = manifested
        self.doomed.pop(key, None)  # an earlier lead's: the manifest read may name them
        self.swept.discard(key)

    def take_wal(self, state: BucketState) -> None:
        """Take the WAL objects ``state`` read that this broker did not know of, so that
        the upload pass deletes them too once they are covered."""
        for wal_key, entries in state.wal.items():
            self.wal_pending.setdefault(wal_key, entries)
