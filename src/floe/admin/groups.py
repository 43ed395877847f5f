"""Consumer groups for the admin facade: list, describe with members, assignments,
committed offsets and lag, and reset an empty group's offsets.

Reads the running :class:`~floe.coordinator.group.GroupCoordinator` (owned by the
broker's event loop) and the store's offsets; in a cluster that shares partitions, the
groups other brokers coordinate as they last answered (:mod:`.peer_groups`: call
:meth:`GroupService.refreshed` first), whose lag is known for the partitions this
broker leads. Lag per partition is
``log_end_offset - committed_offset`` (``None`` without a commit). A reset commits
through the coordinator's journal, as AlterConsumerGroupOffsets does, and only while
no member consumes (Kafka's rule).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from floe.admin.errors import BadRequestError, ConflictError, NotFoundError, UnavailableError
from floe.admin.peer_groups import PeerGroups, RemoteGroup
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.group.api import CommittedOffset, GroupDescription, OffsetCommit
from floe.coordinator.group.state import GroupState
from floe.errors import ErrorCode
from floe.storage.interface import NotOwnerError, PartitionLog, Store
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


RESET_TARGETS = ("earliest", "latest", "offset", "timestamp")
RESETTABLE = (GroupState.EMPTY, GroupState.DEAD)
"""Kafka's rule: a group's offsets are reset only while no member consumes."""


@dataclass(frozen=True)
class OffsetReset:
    topic: str
    partition: int
    previous: int | None
    """The committed offset before (None: none)."""
    new: int


@dataclass(frozen=True)
class ResetResult:
    group: str
    dry_run: bool
    partitions: list[OffsetReset]


class GroupService:
    """Group views (owned by the broker's event loop; no state of its own)."""

    def __init__(
        self, groups: GroupCoordinator | None, store: Store, peers: PeerGroups | None = None
    ) -> None:
        self.groups = groups
        self.store = store
        self.peers = peers

    async def refreshed(self) -> None:
        """Ask the other brokers for their groups, unless that was done a moment ago
        (:data:`~.peer_groups.REFRESH_S`); none to ask outside a shared cluster."""
        if self.peers is not None:
            await self.peers.refreshed()

    def _remote(self, group: str) -> RemoteGroup | None:
        """``group`` as another broker coordinates it (None: it is not, or this broker
        coordinates it)."""
        if self.peers is None or (self.groups is not None and self.groups.coordinates(group)):
            return None
        return self.peers.groups.get(group)

    def _offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        remote = self._remote(group)
        if remote is not None:
            return remote.offsets
        assert self.groups is not None
        return self.groups.fetch_offsets(group, None, False)

    def _description(self, group: str) -> GroupDescription:
        remote = self._remote(group)
        if remote is not None:
            return remote.description
        assert self.groups is not None
        return self.groups.describe(group)

    def _log_end(self, topic: str, partition: int) -> int | None:
        meta = self.store.topic(TopicName(topic))
        if meta is None or not 0 <= partition < meta.partitions:
            return None
        try:
            return int(self.store.partition(meta.name, PartitionId(partition)).log_end_offset)
        except NotOwnerError:  # another broker leads it: its end is unknown here
            return None

    def _partitions(self, group: str, owners: dict[tuple[str, int], str]) -> list[GroupPartition]:
        committed = {tp: c.offset for tp, c in self._offsets(group).items()}
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

    def _check_here(self, group: str) -> None:
        """Raises: UnavailableError: another broker coordinates ``group`` (the leader of
        its ``__consumer_offsets`` partition, in a cluster that shares partitions)."""
        if self.groups is not None and not self.groups.coordinates(group):
            remote = self._remote(group)
            where = f"broker {remote.broker}" if remote is not None else "another broker"
            raise UnavailableError(
                f"group {group} is coordinated by {where} (the leader of __consumer_offsets-"
                f"{self.groups.partition_of(group)}): change it there"
            )

    def names(self) -> set[str]:
        """The ids of the groups the coordinators know (this broker's and, as last
        asked, the others')."""
        local = {g.group_id for g in self.groups.list_groups()} if self.groups else set()
        remote = {g for g in self.peers.groups if self._remote(g)} if self.peers else set()
        return local | remote

    def all(self) -> list[GroupSummary]:
        """Every group the coordinators know, sorted by id."""
        out = []
        for group in sorted(self.names()):
            desc = self._description(group)
            lag = sum(p.lag or 0 for p in self._partitions(group, {}))
            out.append(
                GroupSummary(group, str(desc.state), desc.protocol_type, len(desc.members), lag)
            )
        return out

    def describe(self, group: str) -> GroupDetail:
        """Members, their assignments, committed offsets and lag.

        Raises:
            NotFoundError: no coordinator knows the group.
        """
        if group not in self.names():
            raise NotFoundError(f"unknown consumer group {group!r}")
        desc = self._description(group)
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

    async def reset_offsets(
        self,
        group: str,
        topic: str,
        to: str,
        *,
        value: int | None = None,
        partition: int | None = None,
        dry_run: bool = False,
    ) -> ResetResult:
        """Move ``group``'s committed offsets on ``topic`` (every partition, or
        ``partition``) to the log start (``earliest``), the high watermark (``latest``),
        ``value`` clamped to the log (``offset``), or the first record at or after
        ``value`` epoch ms, else the high watermark (``timestamp``). With ``dry_run``
        nothing is committed. A group the coordinator does not know yet is created by
        the commit, as Kafka does.

        Raises:
            BadRequestError: an unknown target, or a target without its value.
            NotFoundError: no such topic or partition.
            ConflictError: the group has members (stop its consumers first), or got
                some while the commit was written.
            UnavailableError: no group coordinator, another broker coordinates the
                group, or another broker leads a partition.
        """
        if to not in RESET_TARGETS:
            raise BadRequestError(f"reset to {to!r}: use one of {', '.join(RESET_TARGETS)}")
        if to in ("offset", "timestamp") and value is None:
            raise BadRequestError(f"reset to {to} needs a value")
        if self.groups is None:
            raise UnavailableError("this broker runs no group coordinator")
        self._check_here(group)
        known = {g.group_id: g.state for g in self.groups.list_groups()}
        state = GroupState(known.get(group, GroupState.DEAD))
        if state not in RESETTABLE:
            raise ConflictError(
                f"group {group} is {state.name}: stop its consumers first (offsets can only "
                "be reset for an empty group)"
            )
        meta = self.store.topic(TopicName(topic))
        if meta is None:
            raise NotFoundError(f"unknown topic {topic}")
        numbers = list(range(meta.partitions))
        if partition is not None:
            if partition not in numbers:
                raise NotFoundError(f"topic {topic} has no partition {partition}")
            numbers = [partition]
        committed = {
            tp: c.offset for tp, c in self.groups.fetch_offsets(group, None, False).items()
        }
        out = []
        for p in numbers:
            try:
                log = self.store.partition(meta.name, PartitionId(p))
                new = _target(log, to, value)
            except NotOwnerError:
                raise UnavailableError(
                    f"{topic}-{p} is led by another broker: reset there"
                ) from None
            before = committed.get((topic, p), -1)
            out.append(OffsetReset(topic, p, before if before >= 0 else None, new))
        if not dry_run:
            errors = await self.groups.commit_offsets(
                group,
                generation=-1,
                member_id="",
                instance_id=None,
                offsets=[OffsetCommit(r.topic, r.partition, r.new, -1, None) for r in out],
            )
            failed = sorted(
                f"{t}-{p}: {e.name}" for (t, p), e in errors.items() if e is not ErrorCode.none
            )
            if failed:
                raise ConflictError(f"group {group}: not reset: {', '.join(failed)}")
        return ResetResult(group, dry_run, out)


def _target(log: PartitionLog, to: str, value: int | None) -> int:
    start, end = int(log.log_start_offset), int(log.high_watermark)
    if to == "earliest":
        return start
    if to == "latest":
        return end
    assert value is not None
    if to == "offset":
        return min(max(value, start), end)
    found = log.offset_for_timestamp(value)
    return end if found is None else min(int(found[0]), end)
