"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

The join phase, the sync phase, session and rebalance timeouts, static members and the
initial rebalance delay all act on the live :class:`~.state.Group` objects. What
persists goes through the coordinator's journal write (append, fsync, replay) before
the members it concerns are answered, at the points where Apache Kafka writes its group
metadata record:

- the end of a join phase: the new generation, with its members and their
  subscriptions but no assignment (an Empty group when no member is left: the only
  write Kafka makes here; Floe also writes a non-empty one because its generation
  lives in the journal);
- the leader's SyncGroup: the generation's members with the leader's assignment; the
  group becomes Stable and the members get their assignment only once it is durable
  (a failed write answers NOT_COORDINATOR and rebalances, as Kafka's storeGroup);
- a static member replaced while Stable (new member id, nothing else changed).

A member that leaves or times out changes the group through the rebalance it starts,
whose join phase writes the next generation. At start-up :meth:`Membership.restore`
brings each group back from its last record (see :meth:`~.state.Group.loaded`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from floe.config import BrokerConfig
from floe.config import coordinators as keys
from floe.coordinator.group.api import JoinRequest, JoinResult, SyncResult
from floe.coordinator.group.offsets import GroupData
from floe.coordinator.group.records import GroupKey, GroupValue, Key, MemberValue, Value
from floe.coordinator.group.state import Group, GroupState, Member
from floe.errors import ErrorCode
from floe.storage.interface import StorageError

log = logging.getLogger("floe.coordinator.group")

Record = tuple[Key, Value | None]

MAX_ID_BYTES = 32767
"""The longest string (UTF-8 bytes) the int16 length of legacy request and response
versions carries. Flexible versions carry longer ones, but a group, instance or member
id past it could never be listed or described to a client on an older version."""
MEMBER_ID_PREFIX_CHARS = 1024
"""A new member id is ``<instance id or client id>-<uuid>``, its prefix cut to this many
characters so that the id fits ``MAX_ID_BYTES``."""


def id_fits(value: str | None) -> bool:
    return value is None or len(value.encode()) <= MAX_ID_BYTES


def group_id_error(group_id: str) -> ErrorCode:
    """INVALID_GROUP_ID for the ids no group may have: empty (as Kafka) or too long."""
    if not group_id or not id_fits(group_id):
        return ErrorCode.invalid_group_id
    return ErrorCode.none


def write_error(exc: BaseException) -> ErrorCode:
    """The answer to members whose group write failed, as Kafka maps a failed store:
    NOT_COORDINATOR for a storage failure (the client looks the coordinator up again and
    retries), UNKNOWN_SERVER_ERROR otherwise."""
    return (
        ErrorCode.not_coordinator
        if isinstance(exc, StorageError)
        else ErrorCode.unknown_server_error
    )


def new_member_id(client_id: str, instance_id: str | None) -> str:
    """A fresh member id, named after the static member or the client, as Kafka does."""
    prefix = instance_id if instance_id is not None else client_id or "member"
    return f"{prefix[:MEMBER_ID_PREFIX_CHARS]}-{uuid.uuid4()}"


class Membership:
    """The membership half of the group coordinator.

    Ownership: created and owned by :class:`~.coordinator.GroupCoordinator`, sharing its
    ``groups`` dict, clock and journal write; used from the broker's event loop only.
    Join-phase completions run as tasks started through ``spawn`` (the coordinator
    cancels them at stop).
    """

    def __init__(
        self,
        config: BrokerConfig,
        clock: Callable[[], int],
        groups: dict[str, Group],
        *,
        data: Callable[[str], GroupData],
        write: Callable[[list[Record]], Awaitable[None]],
        spawn: Callable[[Any], asyncio.Task[None]],
    ) -> None:
        self._config = config
        self._clock = clock
        self.groups = groups
        self._data = data
        self._write = write
        self._spawn = spawn

    def fail_waiters(self, m: Member, error: ErrorCode) -> None:
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result(JoinResult(error, member_id=m.member_id))
        if m.sync_waiter is not None and not m.sync_waiter.done():
            m.sync_waiter.set_result(SyncResult(error))
        m.join_waiter = m.sync_waiter = None

    def _fenced(self, g: Group, member_id: str, instance_id: str | None) -> bool:
        """Whether a request naming ``member_id`` and static ``instance_id`` is fenced
        (the instance now has another member id), logged as Kafka logs it: a replaced
        static member, or a client whose session expired and that cleared its id."""
        if instance_id is None:
            return False
        current = g.static_members.get(instance_id)
        if current is None or current == member_id:
            return False
        log.info(
            "group.member.fenced group=%s instance=%s member=%s current=%s "
            "(FENCED_INSTANCE_ID, as Kafka answers: a static member's session.timeout.ms "
            "should outlast a broker's failover)",
            g.group_id, instance_id, member_id or '""', current,
        )  # fmt: skip
        return True

    def member_error(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if self._fenced(g, member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in g.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def touch(self, m: Member) -> None:
        m.deadline_ms = self._clock() + m.session_timeout_ms

    # ------------------------------------------------------------------ persistence

    def restore(self, group_id: str, value: GroupValue) -> Group | None:
        """Bring back the members of a group loaded from the journal (start-up only; the
        record was validated by :func:`~.offsets.apply`). Returns the group, or None when
        the record has no members (the group stays Empty)."""
        if not value.members or value.protocol_name is None:
            return None
        members = [
            Member(
                member_id=v.member_id,
                instance_id=v.instance_id,
                client_id=v.client_id,
                client_host=v.client_host,
                session_timeout_ms=v.session_timeout_ms,
                rebalance_timeout_ms=v.rebalance_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol_name, v.subscription)],
                assignment=v.assignment if value.assigned else b"",
            )
            for v in value.members
        ]
        g = self.groups[group_id] = Group.loaded(
            group_id,
            assigned=value.assigned,
            leader=value.leader,
            members=members,
            now_ms=self._clock(),
        )
        log.debug(
            "group.members.loaded group=%s generation=%d state=%s members=%d",
            group_id,
            value.generation,
            g.state,
            len(members),
        )
        return g

    def _value(
        self,
        g: Group,
        generation: int,
        protocol: str,
        assignments: dict[str, bytes] | None,
    ) -> GroupValue:
        """The group metadata record of ``g``'s current members: with ``assignments``
        (the leader's, by member id) it is ``assigned``."""
        assert g.leader is not None
        members = tuple(
            MemberValue(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(protocol),
                b"" if assignments is None else assignments.get(m.member_id, b""),
            )
            for m in g.members.values()
        )
        ptype = g.protocol_type or ""
        return GroupValue(ptype, generation, protocol, g.leader, members, assignments is not None)

    async def join(self, req: JoinRequest) -> JoinResult:
        """JoinGroup: returns once the join phase of the next generation completes (or
        at once for an error or a MEMBER_ID_REQUIRED answer)."""
        cfg = self._config
        if not (
            cfg[keys.GROUP_MIN_SESSION_TIMEOUT_MS]
            <= req.session_timeout_ms
            <= cfg[keys.GROUP_MAX_SESSION_TIMEOUT_MS]
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=req.member_id)
        if group_id_error(req.group_id) is not ErrorCode.none or not id_fits(req.instance_id):
            return JoinResult(ErrorCode.invalid_group_id, member_id=req.member_id)
        now = self._clock()
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id=req.member_id)
            g = self.groups[req.group_id] = Group(req.group_id, state_since_ms=now)
        if g.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id=req.member_id)
        if not g.accepts(req.protocol_type, req.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=req.member_id)
        loop = asyncio.get_running_loop()
        if not req.member_id:
            if req.instance_id is not None and req.instance_id in g.static_members:
                return await self._replace_static(g, req)
            new_id = new_member_id(req.client_id, req.instance_id)
            if len(g.members) >= cfg[keys.GROUP_MAX_SIZE]:
                return JoinResult(ErrorCode.group_max_size_reached, member_id=req.member_id)
            if req.require_known_member_id and req.instance_id is None:
                g.pending_ids[new_id] = now + req.session_timeout_ms
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            return await self._add_member(g, new_id, req)
        if self._fenced(g, req.member_id, req.instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id=req.member_id)
        if req.member_id in g.pending_ids:
            del g.pending_ids[req.member_id]
            if len(g.members) >= cfg[keys.GROUP_MAX_SIZE]:
                return JoinResult(ErrorCode.group_max_size_reached, member_id=req.member_id)
            return await self._add_member(g, req.member_id, req)
        m = g.members.get(req.member_id)
        if m is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id=req.member_id)
        changed = m.protocols != req.protocols
        self._update_member(m, req)
        data = self._data(g.group_id)
        if g.state is GroupState.PREPARING_REBALANCE:
            self.fail_waiters(m, ErrorCode.rebalance_in_progress)
            waiter: asyncio.Future[JoinResult] = loop.create_future()
            m.join_waiter = waiter
            self._maybe_complete_join(g)
            return await waiter
        if not changed and req.member_id != g.leader and g.state is not GroupState.EMPTY:
            # A follower that lost its JoinGroup answer: give it the current generation.
            return self._join_result(g, data, m, with_members=False)
        return await self._rejoin_and_rebalance(g, m, f"member {m.member_id} rejoined")

    async def _add_member(self, g: Group, member_id: str, req: JoinRequest) -> JoinResult:
        m = Member(
            member_id=member_id,
            instance_id=req.instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
        )
        g.members[member_id] = m
        now = self._clock()
        if g.state is GroupState.PREPARING_REBALANCE and g.join_not_before_ms > now:
            # Kafka's delayed initial join: a newcomer during the initial delay extends
            # it by another delay, never past the rebalance timeout.
            delay = self._config[keys.GROUP_INITIAL_REBALANCE_DELAY_MS]
            g.join_not_before_ms = min(now + delay, g.rebalance_deadline_ms)
        if req.instance_id is not None:
            g.static_members[req.instance_id] = member_id
        log.info(
            "group.member.joined group=%s member=%s client=%s",
            g.group_id,
            member_id,
            req.client_id,
        )
        return await self._rejoin_and_rebalance(g, m, f"member {member_id} joined")

    async def _rejoin_and_rebalance(self, g: Group, m: Member, reason: str) -> JoinResult:
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self.fail_waiters(m, ErrorCode.rebalance_in_progress)
        m.join_waiter = waiter
        if g.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, reason)
        self._maybe_complete_join(g)
        return await waiter

    async def _replace_static(self, g: Group, req: JoinRequest) -> JoinResult:
        """A static member rejoined without its member id: give it a new id, fence the
        old one, and keep the group's assignment when nothing else changed."""
        assert req.instance_id is not None
        old_id = g.static_members[req.instance_id]
        m = g.members.pop(old_id)
        self.fail_waiters(m, ErrorCode.fenced_instance_id)
        new_id = new_member_id(req.client_id, req.instance_id)
        changed = m.protocols != req.protocols
        m.member_id = new_id
        self._update_member(m, req)
        g.members[new_id] = m
        g.static_members[req.instance_id] = new_id
        was_leader = g.leader == old_id
        if was_leader:
            g.leader = new_id
        log.info(
            "group.member.replaced group=%s instance=%s old_member=%s member=%s",
            g.group_id,
            req.instance_id,
            old_id,
            new_id,
        )
        if g.state is GroupState.STABLE and not changed and not was_leader:
            # As Kafka: persist the new member id before answering, or a restart would
            # bring back the old one and fence the member that holds the new.
            data = self._data(g.group_id)
            protocol = data.metadata.protocol_name if data.metadata else None
            if protocol is not None:
                assignments = {x.member_id: x.assignment for x in g.members.values()}
                try:
                    await self._write(
                        [
                            (
                                GroupKey(g.group_id),
                                self._value(g, data.generation, protocol, assignments),
                            )
                        ]
                    )
                except Exception as exc:
                    log.exception("group.member.replace_failed group=%s", g.group_id)
                    return JoinResult(write_error(exc), member_id=req.member_id)
            return self._join_result(g, self._data(g.group_id), m, with_members=False)
        return await self._rejoin_and_rebalance(g, m, f"static member {new_id} replaced")

    def _update_member(self, m: Member, req: JoinRequest) -> None:
        m.protocols = list(req.protocols)
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.client_id, m.client_host = req.client_id, req.client_host
        self.touch(m)

    def _join_result(
        self, g: Group, data: GroupData, m: Member, *, with_members: bool
    ) -> JoinResult:
        protocol = data.metadata.protocol_name if data.metadata else None
        members = (
            [(x.member_id, x.instance_id, x.metadata_for(protocol)) for x in g.members.values()]
            if with_members
            else []
        )
        return JoinResult(
            ErrorCode.none,
            member_id=m.member_id,
            generation=data.generation,
            protocol_type=g.protocol_type,
            protocol_name=protocol,
            leader=g.leader or "",
            members=members,
        )

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        now = self._clock()
        if g.state is GroupState.COMPLETING_REBALANCE:
            for m in g.members.values():
                self.fail_waiters(m, ErrorCode.rebalance_in_progress)
        was_empty = g.state is GroupState.EMPTY
        g.transition(GroupState.PREPARING_REBALANCE, now)
        timeout = g.max_rebalance_timeout_ms()
        g.rebalance_deadline_ms = now + timeout
        g.join_not_before_ms = (
            now + min(self._config[keys.GROUP_INITIAL_REBALANCE_DELAY_MS], timeout)
            if was_empty
            else 0
        )
        log.info(
            "group.rebalance.started group=%s generation=%d reason=%s",
            g.group_id,
            self._data(g.group_id).generation,
            reason,
        )

    def _maybe_complete_join(self, g: Group, *, deadline: bool = False) -> None:
        if g.state is not GroupState.PREPARING_REBALANCE or g.completing:
            return
        if deadline or (g.all_joined() and self._clock() >= g.join_not_before_ms):
            g.completing = True
            g.completion = self._spawn(self._complete_join(g))

    async def _complete_join(self, g: Group) -> None:
        try:
            for m in [m for m in g.members.values() if m.join_waiter is None]:
                self._remove(g, m, "did not rejoin in time", rebalance=False)
            data = self._data(g.group_id)
            ptype = g.protocol_type or (data.metadata.protocol_type if data.metadata else "")
            if not g.members:
                await self._write(
                    [(GroupKey(g.group_id), GroupValue(ptype, data.generation + 1, None, ""))]
                )
                g.leader = None
                g.transition(GroupState.EMPTY, self._clock())
                log.info(
                    "group.rebalance.completed group=%s generation=%d members=0",
                    g.group_id,
                    self._data(g.group_id).generation,
                )
                return
            protocol = g.select_protocol()
            if g.leader not in g.members:
                g.leader = next(iter(g.members))
            value = self._value(g, data.generation + 1, protocol, None)
            await self._write([(GroupKey(g.group_id), value)])
            if g.state is not GroupState.PREPARING_REBALANCE:
                return
            if g.leader not in g.members:
                g.leader = next(iter(g.members))
            now = self._clock()
            g.transition(GroupState.COMPLETING_REBALANCE, now)
            g.sync_deadline_ms = now + g.max_rebalance_timeout_ms()
            data = self._data(g.group_id)
            for m in g.members.values():
                waiter, m.join_waiter = m.join_waiter, None
                self.touch(m)
                if waiter is not None and not waiter.done():
                    waiter.set_result(
                        self._join_result(g, data, m, with_members=m.member_id == g.leader)
                    )
            log.info(
                "group.join.completed group=%s generation=%d protocol=%s members=%d leader=%s",
                g.group_id,
                data.generation,
                protocol,
                len(g.members),
                g.leader,
            )
        except Exception as exc:
            log.exception("group.join.failed group=%s", g.group_id)
            for m in g.members.values():
                self.fail_waiters(m, write_error(exc))
        finally:
            g.completing = False
            g.completion = None

    def _remove(self, g: Group, m: Member, reason: str, *, rebalance: bool = True) -> None:
        self.fail_waiters(m, ErrorCode.unknown_member_id)
        g.members.pop(m.member_id, None)
        if m.instance_id is not None and g.static_members.get(m.instance_id) == m.member_id:
            del g.static_members[m.instance_id]
        log.info(
            "group.member.removed group=%s member=%s reason=%s", g.group_id, m.member_id, reason
        )
        if not rebalance:
            return
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"member {m.member_id} {reason}")
        self._maybe_complete_join(g)

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
        """SyncGroup: followers wait for the leader's assignment; the leader's call
        distributes it and makes the group Stable."""
        if (err := self.member_error(group_id, member_id, instance_id)) is not ErrorCode.none:
            return SyncResult(err)
        g = self.groups[group_id]
        m = g.members[member_id]
        data = self._data(group_id)
        if generation != data.generation:
            return SyncResult(ErrorCode.illegal_generation)
        current_name = data.metadata.protocol_name if data.metadata else None
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != current_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        self.touch(m)
        if g.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if g.state is GroupState.STABLE:
            return SyncResult(ErrorCode.none, g.protocol_type, current_name, m.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        m.sync_waiter = waiter
        if member_id == g.leader and not g.assigning and current_name is not None:
            g.assigning = True
            self._spawn(self._complete_sync(g, data.generation, current_name, assignments))
        return await waiter

    async def _complete_sync(
        self, g: Group, generation: int, protocol: str, assignments: dict[str, bytes]
    ) -> None:
        """Write the leader's assignment, then make the group Stable and answer every
        member waiting in SyncGroup. When the group moved on meanwhile (a member joined
        or left: its waiters were answered then) the record is left for the next
        generation's to replace."""
        try:
            value = self._value(g, generation, protocol, assignments)
            try:
                await self._write([(GroupKey(g.group_id), value)])
            except Exception as exc:
                log.exception("group.sync.failed group=%s generation=%d", g.group_id, generation)
                if self._completing(g, generation):
                    for m in g.members.values():
                        self.fail_waiters(m, write_error(exc))
                    self._prepare_rebalance(g, "the assignment could not be written")
                return
            if not self._completing(g, generation):
                return
            g.transition(GroupState.STABLE, self._clock())
            for x in g.members.values():
                x.assignment = assignments.get(x.member_id, b"")
                w, x.sync_waiter = x.sync_waiter, None
                self.touch(x)
                if w is not None and not w.done():
                    w.set_result(
                        SyncResult(ErrorCode.none, g.protocol_type, protocol, x.assignment)
                    )
            log.info(
                "group.rebalance.completed group=%s generation=%d members=%d",
                g.group_id,
                generation,
                len(g.members),
            )
        finally:
            g.assigning = False

    def _completing(self, g: Group, generation: int) -> bool:
        """Whether ``g`` still waits for the assignment of ``generation``."""
        return (
            g.state is GroupState.COMPLETING_REBALANCE
            and self.groups.get(g.group_id) is g
            and self._data(g.group_id).generation == generation
        )

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """Heartbeat: keeps the member's session; tells it when to rejoin."""
        if (err := self.member_error(group_id, member_id, instance_id)) is not ErrorCode.none:
            return err
        g = self.groups[group_id]
        self.touch(g.members[member_id])
        if g.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if generation != self._data(group_id).generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> list[tuple[str, str | None, ErrorCode]]:
        """LeaveGroup for a batch of ``(member_id, instance_id)``; an empty member id
        with an instance id names the static member (admin removal)."""
        out: list[tuple[str, str | None, ErrorCode]] = []
        g = self.groups.get(group_id)
        for member_id, instance_id in members:
            if g is None:
                out.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            mid = member_id
            if instance_id is not None:
                current = g.static_members.get(instance_id)
                if current is None:
                    out.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and member_id != current:
                    out.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                mid = current
            m = g.members.get(mid)
            if m is None:
                out.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            self._remove(g, m, "left the group")
            out.append((mid, instance_id, ErrorCode.none))
        return out

    def tick(self) -> None:
        """Run the timers that are due (the timer task calls this every 100 ms)."""
        now = self._clock()
        for g in list(self.groups.values()):
            for pid, until in list(g.pending_ids.items()):
                if now >= until:
                    del g.pending_ids[pid]
            for m in list(g.members.values()):
                if not m.awaiting and now >= m.deadline_ms:
                    self._remove(g, m, "session timed out")
            if g.state is GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(g, deadline=now >= g.rebalance_deadline_ms)
            elif g.state is GroupState.COMPLETING_REBALANCE and now >= g.sync_deadline_ms:
                for m in [m for m in g.members.values() if m.sync_waiter is None]:
                    self._remove(g, m, "did not sync in time", rebalance=False)
                if g.state is GroupState.COMPLETING_REBALANCE:
                    self._prepare_rebalance(g, "members did not sync in time")
                self._maybe_complete_join(g)
