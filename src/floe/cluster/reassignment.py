"""Kafka's partition reassignment on Floe's placement: what the writer (the controller)
decides for AlterPartitionReassignments and reports for ListPartitionReassignments.

Floe keeps one copy of each partition, in object storage, led by one broker: a Kafka
replica list names exactly that broker, and a reassignment is a move, an assignment in
the metadata store that the partition's owner follows by handing it over (the
balancing's own moves are the same, :mod:`floe.storage.object.sharing`). A move is
ongoing while the partition is assigned to a live broker other than its owner; Kafka's
view of it: replicas ``[target, owner]``, adding ``[target]``, removing ``[owner]``.

:class:`ManualMoves` remembers the moves an operator asked for, so that the balancing
leaves those partitions where they were put for ``cluster.reassignment.hold.ms`` (it
moves the others around them).

Pure logic over a :class:`Placement` snapshot: no I/O, nothing that waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from floe.errors import ErrorCode
from floe.storage.interface import TopicMeta
from floe.types import PartitionId, TopicName

Key = tuple[TopicName, PartitionId]


@dataclass(frozen=True)
class Placement:
    """Where the partitions are and are going, as the writer sees them now."""

    topics: Mapping[TopicName, TopicMeta]
    owners: Mapping[Key, int]
    """Each claimed partition's owner; one never claimed is the writer's."""
    assignments: Mapping[Key, int]
    """Where the writer wants partitions led (its balancing and the moves asked for)."""
    live: frozenset[int]
    """The brokers a partition may move to: live and taking connections."""
    writer: int
    sharing: bool
    """``cluster.share.partitions``: brokers other than the writer lead partitions."""
    writer_only: Callable[[TopicName], bool] = lambda _topic: False
    """Whether a topic's partitions are the writer's alone (internal and table topics)."""

    def owner(self, key: Key) -> int:
        return self.owners.get(key, self.writer)

    def target(self, key: Key) -> int | None:
        """Where the partition is moving to (None: it is not moving)."""
        to = self.assignments.get(key)
        if to is None or to == self.owner(key) or to not in self.live:
            return None
        return to


@dataclass(frozen=True)
class Decision:
    """What an AlterPartitionReassignments entry does: ``error`` (with ``message``), or
    move the partition to ``move_to`` (None: nothing to record, it is there already or
    a cancelled move goes back to its owner, which ``move_to`` then names)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    move_to: int | None = None


def _refuse(code: ErrorCode, message: str) -> Decision:
    return Decision(code, message)


def decide(
    placement: Placement,
    key: Key,
    replicas: Sequence[int] | None,
    *,
    allow_replication_factor_change: bool = True,
) -> Decision:
    """Kafka's answer to a request that ``key`` be placed on ``replicas`` (None: cancel
    its ongoing reassignment), on Floe's placement (the module docstring)."""
    topic, partition = key
    meta = placement.topics.get(topic)
    if meta is None or not 0 <= partition < meta.partitions:
        return _refuse(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist")
    if replicas is None:
        if placement.target(key) is None:
            return _refuse(
                ErrorCode.no_reassignment_in_progress,
                f"no reassignment of {topic}-{partition} is in progress",
            )
        return Decision(move_to=placement.owner(key))
    if not replicas:
        return _refuse(ErrorCode.invalid_replica_assignment, "the replica list is empty")
    if len(set(replicas)) != len(replicas):
        return _refuse(
            ErrorCode.invalid_replica_assignment,
            f"the replica list {list(replicas)} names a broker twice",
        )
    if len(replicas) != 1:
        code = (
            ErrorCode.invalid_replica_assignment
            if allow_replication_factor_change
            else ErrorCode.invalid_replication_factor
        )
        return _refuse(
            code,
            f"Floe keeps one copy of each partition, in object storage, led by one broker: "
            f"name exactly one broker, not {list(replicas)}",
        )
    (to,) = replicas
    if to not in placement.live:
        return _refuse(ErrorCode.invalid_replica_assignment, f"broker {to} is not alive")
    owner = placement.owner(key)
    if to == owner and placement.target(key) is None:
        return Decision()  # there already: done at once, as Kafka does
    if not placement.sharing:
        return _refuse(
            ErrorCode.invalid_replica_assignment,
            f"with cluster.share.partitions=false the writer (broker {placement.writer}) "
            f"leads every partition",
        )
    if to != placement.writer and placement.writer_only(topic):
        return _refuse(
            ErrorCode.invalid_replica_assignment,
            f"{topic} is an internal or table topic, whose partitions the writer "
            f"(broker {placement.writer}) leads",
        )
    return Decision(move_to=to)


def ongoing(placement: Placement, keys: Sequence[Key] | None) -> list[tuple[Key, int, int]]:
    """The moves in flight among ``keys`` (None: every partition), as (partition,
    target, owner), sorted; a partition that does not exist is left out, as Kafka
    does."""
    if keys is None:
        keys = [
            (meta.name, PartitionId(p))
            for meta in placement.topics.values()
            for p in range(meta.partitions)
        ]
    found = []
    for key in sorted(set(keys)):
        meta = placement.topics.get(key[0])
        if meta is None or not 0 <= key[1] < meta.partitions:
            continue
        to = placement.target(key)
        if to is not None:
            found.append((key, to, placement.owner(key)))
    return found


class ManualMoves:
    """The partitions an operator placed (AlterPartitionReassignments), each until its
    hold ends: the writer's balancing never moves them, and evens out the other
    partitions around them. Owned by the writer's event loop; nothing to close."""

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold_s = hold_s
        self._clock = clock
        self._until: dict[Key, float] = {}

    def hold(self, key: Key) -> None:
        """Leave ``key`` where it was put for the hold time from now."""
        self._until[key] = self._clock() + self._hold_s

    def release(self, key: Key) -> None:
        """The move of ``key`` was cancelled: the balancing may move it again."""
        self._until.pop(key, None)

    def held(self) -> frozenset[Key]:
        """The partitions still held (those whose hold ended are forgotten)."""
        now = self._clock()
        for key in [k for k, until in self._until.items() if until <= now]:
            del self._until[key]
        return frozenset(self._until)
