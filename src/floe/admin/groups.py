"""Consumer groups for the admin facade: list, and describe with members, assignments,
committed offsets and lag.

Reads the running :class:`~floe.coordinator.group.GroupCoordinator` (owned by the
broker's event loop) and the store's log end offsets; changes nothing. Lag per
partition is ``log_end_offset - committed_offset`` (``None`` without a commit).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from floe.admin.errors import NotFoundError
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.group.state import GroupState
from floe.storage.interface import NotOwnerError, Store
from floe.types import PartitionId, TopicName


@dataclass(frozen=True)
class GroupSummary:
    group: str
    state: str
    protocol_type: str
    members: int
    lag: int
    """Total lag over the partitions the group has committed."""


@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[str]
    """``topic-partition`` items (consumer protocol only)."""


@dataclass(frozen=True)
class GroupPartition:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None


@dataclass(frozen=True)
class GroupDetail:
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member]
    partitions: list[GroupPartition]
    lag: int


def parse_assignment(data: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer protocol assignment (version, then an
    array of topic + int32 partitions; user data ignored); empty when not parseable."""
    out: list[tuple[str, int]] = []
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + size].decode("utf-8")
            pos += size
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for p in struct.unpack_from(f">{max(n, 0)}i", data, pos):
                out.append((topic, p))
            pos += 4 * max(n, 0)
    except (struct.error, UnicodeDecodeError):
        return []
    return out


class GroupService:
    """Group views (owned by the broker's event loop; no state of its own)."""

    def __init__(self, groups: GroupCoordinator | None, store: Store) -> None:
        self.groups = groups
        self.store = store

    def _log_end(self, topic: str, partition: int) -> int | None:
        meta = self.store.topic(TopicName(topic))
        if meta is None or not 0 <= partition < meta.partitions:
            return None
        try:
            return int(self.store.partition(meta.name, PartitionId(partition)).log_end_offset)
        except NotOwnerError:  # another broker leads it: its end is unknown here
            return None

    def _partitions(self, group: str, owners: dict[tuple[str, int], str]) -> list[GroupPartition]:
        assert self.groups is not None
        committed = {
            tp: c.offset for tp, c in self.groups.fetch_offsets(group, None, False).items()
        }
        out = []
        for topic, p in sorted(set(committed) | set(owners)):
            offset = committed.get((topic, p), -1)
            end = self._log_end(topic, p)
            has = offset >= 0
            lag = max(0, end - offset) if has and end is not None else None
            out.append(
                GroupPartition(topic, p, offset if has else None, end, lag, owners.get((topic, p)))
            )
        return out

    def all(self) -> list[GroupSummary]:
        """Every group the coordinator knows, sorted by id."""
        if self.groups is None:
            return []
        out = []
        for g in sorted(self.groups.list_groups(), key=lambda g: g.group_id):
            desc = self.groups.describe(g.group_id)
            lag = sum(p.lag or 0 for p in self._partitions(g.group_id, {}))
            out.append(
                GroupSummary(g.group_id, str(g.state), g.protocol_type, len(desc.members), lag)
            )
        return out

    def describe(self, group: str) -> GroupDetail:
        """Members, their assignments, committed offsets and lag.

        Raises:
            NotFoundError: the coordinator does not know the group.
        """
        if self.groups is None or group not in {g.group_id for g in self.groups.list_groups()}:
            raise NotFoundError(f"unknown consumer group {group!r}")
        desc = self.groups.describe(group)
        owners: dict[tuple[str, int], str] = {}
        members = []
        for m in desc.members:
            pairs = parse_assignment(m.assignment) if desc.protocol_type == "consumer" else []
            owners.update(dict.fromkeys(pairs, m.member_id))
            members.append(
                Member(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    [f"{t}-{p}" for t, p in sorted(pairs)],
                )
            )
        partitions = self._partitions(group, owners)
        state = desc.state.value if isinstance(desc.state, GroupState) else str(desc.state)
        return GroupDetail(
            group,
            state,
            desc.protocol_type,
            desc.protocol_name,
            members,
            partitions,
            sum(p.lag or 0 for p in partitions),
        )
