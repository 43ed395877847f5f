"""GroupShard: the classic-protocol consumer groups of one ``__consumer_offsets``
partition, and their committed offsets.

A group belongs to the shard of partition ``abs(hash(group id)) % partitions``
(:func:`floe.coordinator.group.coordinator.partition_for`); the broker that leads that
partition loads the shard and is the group's coordinator
(:class:`~floe.coordinator.group.coordinator.GroupCoordinator`).

Persisted state (group metadata, committed offsets, staged transactional offsets)
changes only through :func:`floe.coordinator.group.offsets.apply`: an operation
computes its records, appends them to its partition of ``__consumer_offsets``
(compacted), awaits their fsync, applies them, and only then answers. Start-up replays the same
records through the same function. A record that does not decode or apply, at start-up
or after a write, is logged with its offset, counted (``replay_skipped``) and skipped,
as Kafka's loader does: the coordinator always starts and keeps serving.

Group membership is persisted too, as Kafka's group metadata record holds it: each
generation's record carries its members (ids, group instance ids, client ids and hosts,
timeouts, subscriptions) and, once the leader's SyncGroup has completed it, their
assignments (:mod:`.membership` says when it is written). After a restart, or when a
standby takes over as the writer, or when another broker takes the partition over,
:meth:`GroupShard.load` brings every group back
from its last record: Stable with its members, whose sessions restart from the load, so
they go on heartbeating and committing with their generation and no rebalance; a group
caught between a join phase and the leader's SyncGroup comes back in PreparingRebalance
and its members rejoin. In-flight JoinGroup/SyncGroup calls are not persisted.

Operations return error codes in result objects; the broker handlers map them onto
the wire. Nothing here knows about kio or the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from floe.config import BrokerConfig
from floe.config import coordinators as keys
from floe.coordinator.group.api import (
    CommittedOffset,
    GroupDescription,
    GroupSummary,
    JoinRequest,
    JoinResult,
    MemberDescription,
    OffsetCommit,
    SyncResult,
)
from floe.coordinator.group.membership import Membership, group_id_error
from floe.coordinator.group.offsets import GroupData, PersistedGroups, TopicPartition, apply
from floe.coordinator.group.records import (
    GroupKey,
    Key,
    OffsetKey,
    OffsetValue,
    TxnMarkerKey,
    TxnOffsetKey,
    Value,
    decode,
    encode,
)
from floe.coordinator.group.state import Group, GroupState
from floe.coordinator.group.txn_offsets import TxnOffsets
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import NotOwnerError, Store
from floe.storage.journal import Journal, reason_of
from floe.types import TopicName

log = logging.getLogger("floe.coordinator.group")

OFFSET_METADATA_MAX_BYTES = 4096
"""Kafka's offset.metadata.max.bytes default."""
Record = tuple[Key, Value | None]


@dataclass(frozen=True)
class Loaded:
    """What a shard's load replayed and brought back."""

    records: int
    groups: int
    members: int
    offsets: int
    replay_skipped: int
    ms: float

    def __add__(self, other: Loaded) -> Loaded:
        return Loaded(
            self.records + other.records,
            self.groups + other.groups,
            self.members + other.members,
            self.offsets + other.offsets,
            self.replay_skipped + other.replay_skipped,
            self.ms + other.ms,
        )

    def fields(self) -> str:
        """The counts as ``key=value`` pairs for a log line."""
        return (
            f"records={self.records} groups={self.groups} members={self.members} "
            f"offsets={self.offsets} replay_skipped={self.replay_skipped} ms={self.ms:.0f}"
        )


NOTHING = Loaded(0, 0, 0, 0, 0, 0.0)


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupShard:
    """The groups of one ``__consumer_offsets`` partition (its journal).

    Ownership and lifecycle: created and driven by the broker's
    :class:`~floe.coordinator.group.coordinator.GroupCoordinator` while this broker
    leads the partition: :meth:`load` replays it, :meth:`tick` and
    :meth:`expire_offsets` run its timers, :meth:`unload` fails the JoinGroup/SyncGroup
    calls still waiting. All state is used from the broker's event loop only.
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        journal: Journal,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self._store = store
        self._config = config
        self._clock = clock
        self._journal = journal
        self.partition = int(journal.partition)
        self.persisted = PersistedGroups()
        self.groups: dict[str, Group] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_retention_ms = clock()
        self.unloaded = False
        self.loaded = NOTHING
        """What the last :meth:`load` found."""
        self.txn_offsets = TxnOffsets(
            self.persisted, data=self._data, write=self._write, clock=clock
        )
        self.membership = Membership(
            config,
            clock,
            self.groups,
            data=self._data,
            write=self._write,
            spawn=self._spawn,
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def replay_skipped(self) -> int:
        """Journal batches and records skipped because they could not be used."""
        return self._journal.skipped

    def load(self) -> Loaded:
        """Rebuild the persisted state by replaying the journal, then bring back each
        group's members from its last group metadata record; returns what it loaded
        (the caller logs it).

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        started = time.monotonic()
        count = 0
        for record in self._journal.replay():
            try:
                key, value = decode(record.key, record.value)
            except Exception as exc:  # whatever the bytes, start anyway
                self._journal.skip(record.offset, reason_of(exc))
                continue
            count += self._apply_at(record.offset, key, value)
        members = 0
        for gid, data in self.persisted.groups.items():
            if data.metadata is None:
                continue
            try:
                g = self.membership.restore(gid, data.metadata)
            except Exception:  # validated when applied; whatever it holds, start anyway
                log.exception("group.members.load_failed group=%s", gid)
                continue
            members += len(g.members) if g is not None else 0
        self.loaded = Loaded(
            count,
            len(self.persisted.groups),
            members,
            sum(len(g.offsets) for g in self.persisted.groups.values()),
            self.replay_skipped,
            (time.monotonic() - started) * 1000,
        )
        return self.loaded

    async def unload(self, code: ErrorCode) -> None:
        """Stop: fail every waiting JoinGroup/SyncGroup with ``code`` (NOT_COORDINATOR
        when the partition moves to another broker, COORDINATOR_NOT_AVAILABLE when this
        broker stops) and cancel the work they started."""
        self.unloaded = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for g in self.groups.values():
            for m in g.members.values():
                self.membership.fail_waiters(m, code)

    # ------------------------------------------------------------------ journal

    def _apply_at(self, offset: int, key: Key, value: Value | None) -> bool:
        """Apply the record at ``offset``; one that fails is skipped (logged and
        counted) so that neither a replay nor a live write can be wedged by it."""
        try:
            self._apply(key, value)
        except Exception as exc:
            self._journal.skip(offset, reason_of(exc))
            return False
        return True

    def _apply(self, key: Key, value: Value | None) -> None:
        apply(self.persisted, key, value)
        gid = key.group
        if gid in self.persisted.groups:
            self.groups.setdefault(gid, Group(gid, state_since_ms=self._clock()))
        else:
            g = self.groups.get(gid)
            if g is not None and not g.members and g.state is GroupState.EMPTY:
                g.transition(GroupState.DEAD, self._clock())
                del self.groups[gid]

    async def _write(self, records: list[Record]) -> None:
        """Append, await durability, then apply (the only way persisted state changes).

        Raises:
            StorageError: the append failed (nothing is applied).
            KafkaError: NOT_COORDINATOR: the partition is not led here any more.
        """
        if not records:
            return
        if self.unloaded:
            raise KafkaError(
                f"__consumer_offsets-{self.partition} moved to another broker",
                ErrorCode.not_coordinator,
            )
        try:
            last = self._journal.append([encode(k, v) for k, v in records])
            await self._journal.durable()
        except NotOwnerError as exc:  # handed over or taken over meanwhile
            raise KafkaError(
                f"__consumer_offsets-{self.partition} is not led here: {exc}",
                ErrorCode.not_coordinator,
            ) from exc
        self._apply_written(last, records)

    def _apply_written(self, last: int, records: list[Record]) -> None:
        """Apply records just appended as one batch ending at offset ``last``."""
        first = last - len(records) + 1
        for i, (k, v) in enumerate(records):
            self._apply_at(first + i, k, v)

    def _data(self, group_id: str) -> GroupData:
        return self.persisted.groups.get(group_id) or GroupData()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ membership

    async def join(self, req: JoinRequest) -> JoinResult:
        """JoinGroup (see :meth:`.membership.Membership.join`)."""
        return await self.membership.join(req)

    async def sync(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """SyncGroup (see :meth:`.membership.Membership.sync`)."""
        return await self.membership.sync(
            group_id,
            generation=generation,
            member_id=member_id,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
        )

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Heartbeat (see :meth:`.membership.Membership.heartbeat`)."""
        return self.membership.heartbeat(group_id, generation, member_id, instance_id)

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[tuple[str, str | None, ErrorCode]]:
        """LeaveGroup (see :meth:`.membership.Membership.leave`)."""
        return self.membership.leave(group_id, members)

    def tick(self) -> None:
        """Run the membership timers that are due (:meth:`timers`, every 100 ms)."""
        self.membership.tick()

    # ------------------------------------------------------------------ timers

    async def timers(self) -> None:
        """Run the membership timers that are due, and the offsets retention when it
        is (every ``offsets.retention.check.interval.ms``)."""
        self.tick()
        now = self._clock()
        if now >= self._next_retention_ms:
            self._next_retention_ms = now + self._config[keys.OFFSETS_RETENTION_CHECK_INTERVAL_MS]
            await self.expire_offsets()

    async def expire_offsets(self) -> None:
        """Remove offsets of empty groups older than offsets.retention.ms (or their
        explicit expiry), and empty groups that have no offsets left."""
        now = self._clock()
        retention = self._config[keys.OFFSETS_RETENTION_MS]
        records: list[Record] = []
        for gid, data in self.persisted.groups.items():
            g = self.groups.get(gid)
            if g is not None and g.state is not GroupState.EMPTY:
                continue
            expired = [
                tp
                for tp, v in data.offsets.items()
                if now >= (v.expire_ms if v.expire_ms >= 0 else v.commit_ms + retention)
            ]
            records += [(OffsetKey(gid, t, p), None) for t, p in expired]
            if len(expired) == len(data.offsets) and not data.pending and data.metadata:
                records.append((GroupKey(gid), None))
        if records:
            await self._write(records)
            log.info("group.offsets.expired partition=%d records=%d", self.partition, len(records))

    # ------------------------------------------------------------------ offsets

    def _partition_known(self, topic: str, partition: int) -> bool:
        meta = self._store.topic(TopicName(topic))
        return meta is not None and 0 <= partition < meta.partitions

    def _commit_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if (err := group_id_error(group_id)) is not ErrorCode.none:
            return err
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            return ErrorCode.none if g is None or not g.members else ErrorCode.unknown_member_id
        if (
            err := self.membership.member_error(group_id, member_id, instance_id)
        ) is not ErrorCode.none:
            return err
        assert g is not None
        if generation != self._data(group_id).generation:
            return ErrorCode.illegal_generation
        if g.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self.membership.touch(g.members[member_id])
        return ErrorCode.none

    def _offset_errors(self, offsets: Iterable[OffsetCommit]) -> dict[TopicPartition, ErrorCode]:
        errors: dict[TopicPartition, ErrorCode] = {}
        for o in offsets:
            if not self._partition_known(o.topic, o.partition):
                errors[(o.topic, o.partition)] = ErrorCode.unknown_topic_or_partition
            elif o.metadata is not None and len(o.metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[(o.topic, o.partition)] = ErrorCode.offset_metadata_too_large
            else:
                errors[(o.topic, o.partition)] = ErrorCode.none
        return errors

    async def commit_offsets(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[OffsetCommit],
        retention_ms: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: per-partition errors (a group-level failure applies to all).

        Raises:
            StorageError: the journal append failed.
        """
        err = self._commit_error(group_id, generation, member_id, instance_id)
        if err is not ErrorCode.none:
            return {(o.topic, o.partition): err for o in offsets}
        errors = self._offset_errors(offsets)
        now = self._clock()
        expire = now + retention_ms if retention_ms >= 0 else -1
        records: list[Record] = [
            (
                OffsetKey(group_id, o.topic, o.partition),
                OffsetValue(o.offset, o.leader_epoch, o.metadata, now, expire),
            )
            for o in offsets
            if errors[(o.topic, o.partition)] is ErrorCode.none
        ]
        await self._write(records)
        return errors

    async def stage_txn_offsets(
        self,
        group_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (see :meth:`.txn_offsets.TxnOffsets.stage`)."""
        err = group_id_error(group_id)
        if err is ErrorCode.none and member_id and generation >= 0:
            err = self._commit_error(group_id, generation, member_id, instance_id)
        if err is not ErrorCode.none:
            return {(o.topic, o.partition): err for o in offsets}
        return await self.txn_offsets.stage(
            group_id, producer_id, producer_epoch, offsets, self._offset_errors(offsets)
        )

    async def complete_transaction(
        self, group_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """See :meth:`.txn_offsets.TxnOffsets.complete`."""
        await self.txn_offsets.complete(group_id, producer_id, producer_epoch, commit)

    async def complete_producer(self, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """See :meth:`.txn_offsets.TxnOffsets.complete_producer`."""
        return await self.txn_offsets.complete_producer(producer_id, producer_epoch, commit)

    def pending_transaction(self, group_id: str, producer_id: int) -> bool:
        """Whether ``producer_id`` has offsets staged in ``group_id``."""
        return producer_id in self._data(group_id).pending

    def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool,
    ) -> dict[TopicPartition, CommittedOffset]:
        """OffsetFetch: the committed offsets (all of the group's when ``partitions``
        is None); -1 for none; UNSTABLE_OFFSET_COMMIT where a transaction is pending
        and ``require_stable``."""
        data = self._data(group_id)
        wanted = partitions if partitions is not None else sorted(data.offsets)
        pending = {tp for staged in data.pending.values() for tp in staged}
        out: dict[TopicPartition, CommittedOffset] = {}
        for tp in wanted:
            if require_stable and tp in pending:
                out[tp] = CommittedOffset(-1, -1, "", ErrorCode.unstable_offset_commit)
            elif (v := data.offsets.get(tp)) is not None:
                out[tp] = CommittedOffset(v.offset, v.leader_epoch, v.metadata)
            else:
                out[tp] = CommittedOffset(-1, -1, "")
        return out

    def list_groups(self) -> list[GroupSummary]:
        out = []
        for gid, g in self.groups.items():
            data = self._data(gid)
            ptype = g.protocol_type or (data.metadata.protocol_type if data.metadata else "")
            out.append(GroupSummary(gid, g.state, ptype))
        return out

    def describe(self, group_id: str) -> GroupDescription:
        g = self.groups.get(group_id)
        if g is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", [])
        data = self._data(group_id)
        protocol = data.metadata.protocol_name if data.metadata else None
        ptype = g.protocol_type or (data.metadata.protocol_type if data.metadata else "")
        stable = g.state is GroupState.STABLE
        return GroupDescription(
            group_id,
            g.state,
            ptype,
            (protocol or "") if stable else "",
            [
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in g.members.values()
            ],
        )

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only groups without members.

        Raises:
            StorageError: the journal append failed.
        """
        g = self.groups.get(group_id)
        if g is not None and not g.members and g.completion is not None:
            # The last member just left: let the group finish becoming Empty.
            await asyncio.shield(g.completion)
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.group_id_not_found
        if g.members or g.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        data = self._data(group_id)
        records: list[Record] = [(OffsetKey(group_id, t, p), None) for t, p in data.offsets]
        for pid, staged in data.pending.items():
            records += [(TxnOffsetKey(group_id, pid, t, p), None) for t, p in staged]
            records.append((TxnMarkerKey(group_id, pid), None))
        records.append((GroupKey(group_id), None))
        await self._write(records)
        if group_id in self.groups and group_id not in self.persisted.groups:
            self.groups.pop(group_id).transition(GroupState.DEAD, self._clock())
        log.info("group.deleted group=%s", group_id)
        return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused for topics the group's members subscribe to.

        Raises:
            StorageError: the journal append failed.
        """
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if g.members:
            topics = g.subscribed_topics()
            if topics is None:
                return ErrorCode.non_empty_group, {}
            subscribed = topics
        errors = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in partitions
        }
        data = self._data(group_id)
        await self._write(
            [
                (OffsetKey(group_id, t, p), None)
                for (t, p), e in errors.items()
                if e is ErrorCode.none and (t, p) in data.offsets
            ]
        )
        return ErrorCode.none, errors

    def topic_deleted(self, topic: str) -> None:
        """Remove every group's offsets of a deleted topic. The tombstones are applied
        once written to the OS; the store's background flush makes them durable (the
        DeleteTopics answer does not depend on them)."""
        records: list[Record] = []
        for gid, data in self.persisted.groups.items():
            records += [(OffsetKey(gid, t, p), None) for t, p in data.offsets if t == topic]
            for pid, staged in data.pending.items():
                records += [(TxnOffsetKey(gid, pid, t, p), None) for t, p in staged if t == topic]
        if not records:
            return
        last = self._journal.append([encode(k, v) for k, v in records])
        self._apply_written(last, records)
        log.info("group.offsets.topic_deleted topic=%s records=%d", topic, len(records))
