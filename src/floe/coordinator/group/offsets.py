"""The persisted state of the group coordinator and the one function that changes it.

:func:`apply` is the replay function: start-up feeds it every record of
``__consumer_offsets`` in offset order, and the coordinator feeds it each record it has
just made durable. Invariants:

- a group is present in :attr:`PersistedGroups.groups` exactly while it has a group
  metadata record, a committed offset or a staged transactional offset (so a compacted
  journal, with tombstoned keys dropped, replays to the same state as the full one);
- staged transactional offsets are keyed by producer id; a transaction marker drops
  what is still staged for its producer (the coordinator writes the committed offsets
  as ordinary offset records in the same batch, before the marker).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from floe.coordinator.group.records import (
    GroupKey,
    GroupValue,
    Key,
    OffsetKey,
    OffsetValue,
    TxnMarkerKey,
    TxnMarkerValue,
    TxnOffsetKey,
    TxnOffsetValue,
    Value,
)

TopicPartition = tuple[str, int]


@dataclass
class GroupData:
    """What survives a restart of one group: metadata and offsets (no live members)."""

    metadata: GroupValue | None = None
    offsets: dict[TopicPartition, OffsetValue] = field(default_factory=dict)
    pending: dict[int, dict[TopicPartition, TxnOffsetValue]] = field(default_factory=dict)

    @property
    def generation(self) -> int:
        return self.metadata.generation if self.metadata else 0

    def is_void(self) -> bool:
        return self.metadata is None and not self.offsets and not self.pending


@dataclass
class PersistedGroups:
    """Every group's persisted state. Owned by the :class:`GroupCoordinator`; changed only
    through :func:`apply`."""

    groups: dict[str, GroupData] = field(default_factory=dict)


_VALUE_TYPES: dict[type[Key], tuple[type[Value], ...]] = {
    OffsetKey: (OffsetValue,),
    GroupKey: (GroupValue,),
    TxnOffsetKey: (TxnOffsetValue,),
    TxnMarkerKey: (TxnMarkerValue,),
}


def apply(state: PersistedGroups, key: Key, value: Value | None) -> None:
    """Apply one journal record (the replay function). Validates before it changes
    anything, so a refused record leaves the state as it was.

    Raises:
        TypeError: the value's type does not belong with the key's kind.
    """
    if value is not None and not isinstance(value, _VALUE_TYPES[type(key)]):
        raise TypeError(f"{type(key).__name__} record with a {type(value).__name__} value")
    data = state.groups.setdefault(key.group, GroupData())
    match key:
        case OffsetKey(_, topic, partition):
            if isinstance(value, OffsetValue):
                data.offsets[(topic, partition)] = value
            else:
                data.offsets.pop((topic, partition), None)
        case GroupKey():
            data.metadata = value if isinstance(value, GroupValue) else None
        case TxnOffsetKey(_, pid, topic, partition):
            if isinstance(value, TxnOffsetValue):
                data.pending.setdefault(pid, {})[(topic, partition)] = value
            else:
                staged = data.pending.get(pid)
                if staged is not None:
                    staged.pop((topic, partition), None)
                    if not staged:
                        del data.pending[pid]
        case TxnMarkerKey(_, pid):
            data.pending.pop(pid, None)
    if data.is_void():
        del state.groups[key.group]
