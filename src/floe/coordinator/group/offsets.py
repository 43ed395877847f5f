"""The persisted state of the group coordinator and the one function that changes it.

:func:`apply` is the replay function: start-up feeds it every record of
``__consumer_offsets`` in offset order, and the coordinator feeds it each record it has
just made durable. Invariants:

- a group is present in :attr:`PersistedGroups.groups` exactly while it has a group
  metadata record, a committed offset or a staged transactional offset (so a compacted
  journal, with tombstoned keys dropped, replays to the same state as the full one);
- staged transactional offsets are keyed by producer id; a transaction marker drops
  what is still staged for its producer (the coordinator writes the committed offsets
  as ordinary offset records in the same batch, before the marker);
- a group metadata value with members names a protocol, its members' ids and
  group instance ids are distinct, and its leader is one of them (the coordinator
  brings such a group back with those members at start-up).
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
    """What survives a restart of one group: its metadata (generation, protocol and the
    members of the last written generation: see :mod:`.records`) and offsets."""

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
        ValueError: a group metadata value whose members cannot form a group.
    """
    if value is not None and not isinstance(value, _VALUE_TYPES[type(key)]):
        raise TypeError(f"{type(key).__name__} record with a {type(value).__name__} value")
    if isinstance(value, GroupValue) and value.members:
        _check_members(value)
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


def _check_members(value: GroupValue) -> None:
    """Raises ValueError unless the members of ``value`` can be brought back as a group."""
    ids = [m.member_id for m in value.members]
    instances = [m.instance_id for m in value.members if m.instance_id is not None]
    if value.protocol_name is None:
        raise ValueError("group members without a protocol")
    if len(set(ids)) != len(ids) or len(set(instances)) != len(instances):
        raise ValueError("duplicate member or group instance ids")
    if value.leader not in ids:
        raise ValueError(f"leader {value.leader!r} is not a member")
