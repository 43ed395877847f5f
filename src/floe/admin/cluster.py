"""The cluster as one broker sees it: the document of ``GET /api/v1/cluster`` (what
``floe cluster status`` prints), served by every broker of a cluster.

The writer serves it in its full admin API (:meth:`floe.admin.Admin.cluster`, with the
counts of groups, subjects and table topics, which only it keeps). A broker that is not
the writer (a member leading partitions of its own, or a standby) serves a small admin
API of its own on the admin port until it becomes the writer (:func:`member_app`): this
document, with its own role, lease and partitions and no counts it cannot know, and
``GET /metrics`` for what it leads, so that every broker can be watched and asked.

The brokers and the ownership are what this broker's last lease renewal saw
(:class:`floe.cluster.membership.ClusterView`, replaced whole by the membership thread,
so the event loop reads it without a lock): at most a third of
``cluster.session.timeout.ms`` old.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from floe import __version__
from floe.config import broker as keys
from floe.config.tabletopic import resolve_table_topic
from floe.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from floe.broker.core import Broker
    from floe.cluster.membership import Membership
    from floe.types import PartitionId, TopicName

Role = Literal["single", "writer", "member", "standby"]
"""What a broker does: alone (no cluster), the writer (it holds the writer lease: topic
metadata, table topics), a member leading partitions of its own (and coordinating the
groups and transactional ids of the ``__consumer_offsets`` and ``__transaction_state``
partitions among them), or a standby waiting for the writer lease."""


@dataclass(frozen=True)
class ClusterBroker:
    """A live broker as clients reach it; ``self``: the broker answering."""

    node_id: int
    host: str
    port: int
    rack: str | None
    self: bool


@dataclass(frozen=True)
class ClusterMembership:
    """This broker's membership of the cluster (``cluster.metadata.url``)."""

    store: str
    """The metadata store's URL, without its password."""
    session_timeout_ms: int
    lease_valid_for_ms: int
    """How long this broker may still write without another renewal (0: it may not)."""
    lease_losses: int
    """How many times the lease lapsed since the broker started."""
    fenced: str | None
    """Why this broker may not write at all any more, or None (see
    :class:`floe.cluster.membership.Membership`)."""
    seen_at_ms: int
    """When the last successful renewal read the brokers and ownership (epoch ms; 0:
    never)."""
    owned_partitions: int
    role: Role
    """``writer``, ``member`` or ``standby`` (:data:`Role`)."""


@dataclass(frozen=True)
class PartitionOwner:
    """The broker that leads a partition, and the fencing epoch it claimed it at."""

    topic: str
    partition: int
    owner: int
    epoch: int


@dataclass(frozen=True)
class TablePlace:
    """Where a table topic's rounds run: the broker whose Spark job materializes it."""

    topic: str
    coordinator: int | None
    """Its table coordinator's broker: in a cluster whose brokers share partitions the
    leader of its partition 0 (the controller for a routed table topic or one with a
    dead-letter topic), else the controller (None while there is none)."""


@dataclass(frozen=True)
class Counts:
    """What the cluster holds, as the answering broker knows it (None: only the writer
    keeps it; ask the writer's admin API). ``groups``: those the answering broker
    coordinates."""

    topics: int
    partitions: int
    groups: int | None
    subjects: int | None
    table_topics: int | None


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster, its brokers and where this broker's listeners are."""

    cluster_id: str
    version: str
    node_id: int
    kafka: str
    registry: str | None
    topics: int
    partitions: int
    groups: int | None
    """The groups the answering broker coordinates (in a cluster that shares partitions,
    those of the ``__consumer_offsets`` partitions it leads); None: a standby."""
    subjects: int | None
    """None: asked of a broker that is not the writer."""
    table_topics: int | None
    """None: asked of a broker that is not the writer."""
    storage: str
    """Where the log lives: ``local <logs dir>`` or ``s3://bucket/prefix`` (and endpoint)."""
    brokers: list[ClusterBroker]
    """The live brokers by node id (this one alone without a cluster)."""
    membership: ClusterMembership | None
    """None without a cluster."""
    ownership: list[PartitionOwner]
    """Every owned partition by topic and partition (empty without a cluster)."""
    controller: int | None
    """The writer's node id: it keeps the topic metadata (None while a standby knows no
    writer)."""
    table_coordinators: list[TablePlace]
    """Every table topic by name, with the broker whose rounds materialize it."""


def cluster_info(broker: Broker, role: Role, registry: str | None, counts: Counts) -> ClusterInfo:
    """The document for ``broker`` in ``role``."""
    controller = writer.broker_id if (writer := broker.writer()) is not None else None
    return ClusterInfo(
        broker.cluster_id,
        __version__,
        broker.node_id,
        f"{broker.advertised_host}:{broker.advertised_port}",
        registry,
        counts.topics,
        counts.partitions,
        counts.groups,
        counts.subjects,
        counts.table_topics,
        _storage(broker),
        _brokers(broker),
        _membership(broker, role),
        _ownership(broker),
        controller,
        _table_places(broker, controller),
    )


def member_app(broker: Broker, role: Role) -> Starlette:
    """The admin API of a broker that is not the writer: ``GET /api/v1/cluster`` (and
    ``GET /metrics``, which the caller mounts). It writes nothing and shows no data,
    only what ``/metrics`` shows, so it has no authentication of its own: it is served
    only where the writer's admin API would be served without any
    (``admin.authentication = none``)."""

    async def cluster(request: Request) -> JSONResponse:
        topics = broker.store.topics()
        groups = len(broker.groups.list_groups()) if broker.groups is not None else None
        counts = Counts(len(topics), sum(m.partitions for m in topics.values()), groups, None, None)
        info = cluster_info(broker, role, None, counts)
        return JSONResponse(dataclasses.asdict(info))

    return Starlette(routes=[Route("/api/v1/cluster", cluster, methods=["GET"])])


def _storage(broker: Broker) -> str:
    bucket = getattr(broker.store, "bucket", None)
    if bucket is not None:
        return str(bucket.description)
    return f"local {broker.store.log_dir()}"


def _brokers(broker: Broker) -> list[ClusterBroker]:
    """The live brokers, this one included even when the last renewal's view predates
    its registration (it is live: it is answering)."""
    membership = broker.membership
    rack = membership.me.rack if membership is not None else None
    me = ClusterBroker(broker.node_id, broker.advertised_host, broker.advertised_port, rack, True)
    if membership is None:
        return [me]
    others = [
        ClusterBroker(b.broker_id, b.host, b.port, b.rack, False)
        for b in membership.view.brokers
        if b.broker_id != broker.node_id
    ]
    return sorted([me, *others], key=lambda b: b.node_id)


def _membership(broker: Broker, role: Role) -> ClusterMembership | None:
    membership = broker.membership
    if membership is None:
        return None
    return ClusterMembership(
        membership.where,
        broker.config[keys.CLUSTER_SESSION_TIMEOUT_MS],
        max(0, round(membership.valid_for_s() * 1000)),
        membership.lease_losses,
        membership.fenced,
        int(membership.view.seen_at * 1000),
        len(membership.owned),
        role,
    )


def _table_places(broker: Broker, controller: int | None) -> list[TablePlace]:
    """The table topics of the topic list this broker holds (the writer's, or the one a
    member follows from the bucket), each with the broker running its coordinator: in a
    cluster whose brokers share partitions the leader of its partition 0 (or the
    controller: :func:`~floe.tabletopic.placement.coordinator_of`), else the
    controller."""
    from floe.tabletopic.placement import coordinator_of

    namespace = {keys.TABLE_TOPIC_NAMESPACE.name: broker.config[keys.TABLE_TOPIC_NAMESPACE]}
    membership = broker.membership
    places = []
    for name, meta in sorted(broker.store.topics().items()):
        try:
            enabled = resolve_table_topic(meta.configs, namespace).enable
        except ConfigError:  # a stored value that no longer parses: not served as one
            enabled = False
        if not enabled or meta.internal:
            continue
        if membership is None or not membership.share:
            places.append(TablePlace(name, controller))
        else:
            places.append(TablePlace(name, coordinator_of(meta, _owner(membership), controller)))
    return places


def _owner(membership: Membership) -> Callable[[tuple[TopicName, PartitionId]], int | None]:
    """A partition's owner as the last renewal saw it."""
    return lambda key: membership.owner(*key)


def _ownership(broker: Broker) -> list[PartitionOwner]:
    if broker.membership is None:
        return []
    owners = broker.membership.view.owners
    return [
        PartitionOwner(topic, partition, o.owner, o.epoch)
        for (topic, partition), o in sorted(owners.items())
    ]
