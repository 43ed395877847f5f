"""The groups other brokers coordinate, for the writer's admin API and console in a
cluster that shares partitions (each broker coordinates the groups of the
``__consumer_offsets`` partitions it leads).

They are asked of each other live broker over the Kafka protocol, as Kafka's admin
clients do: ListGroups, then DescribeGroups and OffsetFetch for each group listed.
:meth:`PeerGroups.refreshed` asks at most every :data:`REFRESH_S` (concurrent callers
share one round) and keeps the answers until the next round, so what a page shows of
another broker's groups is at most that old. A broker that does not answer is logged
once per distinct failure and its groups are left out of that round.

The connections are plaintext and unauthenticated, as the transaction coordinator's
markers are (``floe.cluster.peers``): a cluster's brokers listen in plaintext.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest
from kio.schema.types import GroupId

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import Membership
from floe.cluster.peers import PeerError, call
from floe.coordinator.group.api import CommittedOffset, GroupDescription, MemberDescription
from floe.coordinator.group.offsets import TopicPartition
from floe.coordinator.group.state import GroupState
from floe.errors import ErrorCode

log = logging.getLogger(__name__)

REFRESH_S = 2.0
"""How old the other brokers' groups may be when a page shows them."""
TIMEOUT_S = 5.0
"""How long one broker's answers are waited for."""


@dataclass(frozen=True)
class RemoteGroup:
    """A group another broker coordinates, as it answered."""

    broker: int
    description: GroupDescription
    offsets: dict[TopicPartition, CommittedOffset]


class PeerGroups:
    """See the module docstring. Owned by the broker's event loop."""

    def __init__(self, membership: Membership, me: int) -> None:
        self._membership = membership
        self._me = me
        self.groups: dict[str, RemoteGroup] = {}
        self._asked_at = float("-inf")
        self._asking: asyncio.Future[None] | None = None
        self._failing: dict[int, str] = {}

    async def refreshed(self) -> None:
        """Ask the other live brokers for their groups, unless that was done within
        :data:`REFRESH_S`."""
        if time.monotonic() - self._asked_at < REFRESH_S:
            return
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask_all())
        asking = self._asking
        try:
            await asyncio.shield(asking)
        finally:
            if self._asking is asking and asking.done():
                self._asking = None

    async def _ask_all(self) -> None:
        peers = [b for b in self._membership.view.brokers if b.broker_id != self._me]
        found: dict[str, RemoteGroup] = {}
        for groups in await asyncio.gather(*(self._ask(b) for b in peers)):
            found.update({g.description.group_id: g for g in groups})
        self.groups = found
        self._asked_at = time.monotonic()

    async def _ask(self, peer: BrokerInfo) -> list[RemoteGroup]:
        try:
            groups = await _groups_of(peer)
        except PeerError as exc:
            if self._failing.get(peer.broker_id) != str(exc):
                log.warning(
                    "admin.peer_groups_unavailable broker=%d error=%s (its groups are left "
                    "out of the admin API and console until it answers)",
                    peer.broker_id, exc,
                )  # fmt: skip
            self._failing[peer.broker_id] = str(exc)
            return []
        self._failing.pop(peer.broker_id, None)
        return groups


def _state(name: str) -> GroupState:
    try:
        return GroupState(name)
    except ValueError:
        return GroupState.DEAD


async def _groups_of(peer: BrokerInfo) -> list[RemoteGroup]:
    """The groups ``peer`` coordinates, described, with their committed offsets.

    Raises:
        PeerError: it did not answer.
    """
    listed = await call(peer.host, peer.port, ListGroupsRequest(states_filter=()), TIMEOUT_S)
    ids = [str(g.group_id) for g in listed.groups]
    if not ids:
        return []
    described = await call(
        peer.host,
        peer.port,
        DescribeGroupsRequest(
            groups=tuple(GroupId(g) for g in ids), include_authorized_operations=False
        ),
        TIMEOUT_S,
    )
    out = []
    for g in described.groups:
        if g.error_code != ErrorCode.none:
            continue  # moved or gone since it was listed
        fetched = await call(
            peer.host, peer.port, OffsetFetchRequest(group_id=g.group_id, topics=None), TIMEOUT_S
        )
        offsets = {
            (str(t.name), int(p.partition_index)): CommittedOffset(
                int(p.committed_offset), int(p.committed_leader_epoch), p.metadata
            )
            for t in fetched.topics
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }
        description = GroupDescription(
            str(g.group_id),
            _state(g.group_state),
            g.protocol_type,
            g.protocol_data,
            [
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.member_metadata,
                    m.member_assignment,
                )
                for m in g.members
            ],
        )
        out.append(RemoteGroup(peer.broker_id, description, offsets))
    return out
