"""The live state of one group: members, rebalance phase, the state machine.

Each generation's members are persisted with it (:mod:`.records`, written by
:mod:`.membership`), as Apache Kafka's group metadata record holds them: after a restart
or a failover a group comes back with its generation and members (:meth:`Group.loaded`),
Stable when the leader's assignment had been written, PreparingRebalance when the crash
fell between a join phase and the leader's SyncGroup (the members rejoin), Empty when it
had none. Session deadlines restart at the load. What is not persisted: the in-flight
JoinGroup/SyncGroup calls, member ids handed out but not yet used, and the timers. The
state machine is plain data with validated transitions:

.. code-block:: text

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance
      ^                 ^    |  ^                            |
      |   no members    |    |  +------ member change -------+
      +-----------------+----+                               |
                        +------ member change --- Stable <---+ leader's SyncGroup
    any --(group deleted, or no members and no offsets left)--> Dead
    load --> Stable (members with their assignment), PreparingRebalance (members
             without), Empty (no members)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from floe.errors import KafkaError


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        }
    ),
}


class IllegalTransitionError(KafkaError):
    """A group was asked to move to a state not reachable from its current one."""


@dataclass
class Member:
    """One member of a group, as its last JoinGroup described it.

    The waiters are futures of the member's in-flight JoinGroup / SyncGroup (at most one
    each); the coordinator resolves them, or fails them when the member is removed.
    """

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline_ms: int = 0
    join_waiter: asyncio.Future[Any] | None = None
    sync_waiter: asyncio.Future[Any] | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def awaiting(self) -> bool:
        """A member blocked in JoinGroup or SyncGroup cannot heartbeat: keep it alive."""
        return self.join_waiter is not None or self.sync_waiter is not None


@dataclass
class Group:
    """One group's live state. Owned by the coordinator's event loop."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_since_ms: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> its current member id."""
    pending_ids: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED -> when they lapse (ms)."""
    join_not_before_ms: int = 0
    """group.initial.rebalance.delay.ms: the first rebalance of an empty group waits."""
    rebalance_deadline_ms: int = 0
    sync_deadline_ms: int = 0
    completing: bool = False
    """A join phase is being written to the journal: hold further completions."""
    completion: asyncio.Future[None] | None = None
    """The task completing the current join phase, if one is running."""
    assigning: bool = False
    """The leader's assignment is being written to the journal: a repeated SyncGroup
    from the leader waits for it instead of writing it again."""

    @classmethod
    def loaded(
        cls, group_id: str, *, assigned: bool, leader: str, members: list[Member], now_ms: int
    ) -> Group:
        """A group as the journal left it (start-up): Stable with ``members`` when
        their assignment was written, else PreparingRebalance, waiting for them to
        rejoin until the longest of their rebalance timeouts. Their sessions restart
        at ``now_ms``.

        Raises:
            ValueError: no members, or the leader is not one of them.
        """
        by_id = {m.member_id: m for m in members}
        if leader not in by_id:
            raise ValueError(f"group {group_id}: leader {leader!r} is not a member")
        g = cls(
            group_id,
            state=GroupState.STABLE if assigned else GroupState.PREPARING_REBALANCE,
            state_since_ms=now_ms,
            leader=leader,
            members=by_id,
            static_members={
                m.instance_id: m.member_id for m in members if m.instance_id is not None
            },
        )
        for m in members:
            m.deadline_ms = now_ms + m.session_timeout_ms
        if not assigned:
            g.rebalance_deadline_ms = now_ms + g.max_rebalance_timeout_ms()
        return g

    def transition(self, to: GroupState, now_ms: int) -> None:
        """Move to ``to``.

        Raises:
            IllegalTransitionError: ``to`` is not reachable from the current state.
        """
        if self.state not in VALID_PREVIOUS[to]:
            raise IllegalTransitionError(f"group {self.group_id}: {self.state} -> {to}")
        self.state = to
        self.state_since_ms = now_ms

    @property
    def protocol_type(self) -> str | None:
        for m in self.members.values():
            return m.protocol_type
        return None

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def accepts(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (INCONSISTENT_GROUP_PROTOCOL
        otherwise)."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred candidate protocol;
        the most votes wins, ties go to the first member's preference.

        Raises:
            KafkaError: no protocol is shared by every member.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise KafkaError(f"group {self.group_id}: no common protocol")
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        best = max(votes.values())
        first = next(iter(self.members.values()))
        return next(n for n, _ in first.protocols if n in candidates and votes[n] == best)

    def all_joined(self) -> bool:
        return all(m.join_waiter is not None for m in self.members.values())

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from their "consumer" protocol metadata
        (None when the protocol is not "consumer" or unreadable)."""
        if self.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for m in self.members.values():
            for _, metadata in m.protocols:
                parsed = parse_subscription(metadata)
                if parsed is None:
                    return None
                topics |= parsed
        return topics


def parse_subscription(metadata: bytes) -> set[str] | None:
    """Topic names of a ConsumerProtocolSubscription (``i16 version``, ``i32 count``,
    ``count`` x ``i16``-prefixed name, then fields we do not need)."""
    try:
        pos = 2
        count = int.from_bytes(metadata[pos : pos + 4], "big", signed=True)
        pos += 4
        topics: set[str] = set()
        for _ in range(count):
            n = int.from_bytes(metadata[pos : pos + 2], "big", signed=True)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode())
            pos += n
        return topics
    except (UnicodeDecodeError, ValueError):
        return None
