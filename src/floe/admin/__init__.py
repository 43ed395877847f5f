"""The admin facade: one read/operate surface that the CLI (through the admin HTTP API)
and the web console both use.

:class:`Admin` is created by the composition root and owned by the broker's event loop
(its methods read the store on the loop and push blocking catalog and Spark work to
worker threads). One attribute per area: ``topics`` (:mod:`.topics`), ``groups``
(:mod:`.groups`), ``schemas`` (:mod:`.schemas`), ``tables`` (status, :mod:`.tables`),
``lake`` (snapshots, samples, SQL: :mod:`.lake`) and ``cluster`` (:meth:`Admin.cluster`).

The cluster's brokers and partition ownership are what this broker's last lease
renewal saw (:class:`floe.cluster.membership.ClusterView`, replaced whole by the
membership thread, so the event loop reads it without a lock): at most a third of
``cluster.session.timeout.ms`` old.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe import __version__
from floe.admin.errors import (
    AdminError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    OperationFailedError,
    QueryTimeoutError,
    UnavailableError,
)
from floe.admin.groups import GroupService
from floe.admin.lake import LakeService
from floe.admin.schemas import SchemaService
from floe.admin.tables import (
    PartitionStatus,
    TableSettings,
    TableStatus,
    TableStatusService,
)
from floe.admin.topics import TopicService
from floe.config import broker as keys

if TYPE_CHECKING:
    from floe.admin.history import History
    from floe.broker.core import Broker
    from floe.registry.core.service import Registry

__all__ = [
    "Admin",
    "AdminError",
    "BadRequestError",
    "ClusterBroker",
    "ClusterInfo",
    "ClusterMembership",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "OperationFailedError",
    "PartitionOwner",
    "PartitionStatus",
    "QueryTimeoutError",
    "TableSettings",
    "TableStatus",
    "TableStatusService",
    "UnavailableError",
]


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


@dataclass(frozen=True)
class PartitionOwner:
    """The broker that leads a partition, and the fencing epoch it claimed it at."""

    topic: str
    partition: int
    owner: int
    epoch: int


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
    groups: int
    subjects: int
    table_topics: int
    storage: str
    """Where the log lives: ``local <logs dir>`` or ``s3://bucket/prefix`` (and endpoint)."""
    brokers: list[ClusterBroker]
    """The live brokers by node id (this one alone without a cluster)."""
    membership: ClusterMembership | None
    """None without a cluster."""
    ownership: list[PartitionOwner]
    """Every owned partition by topic and partition (empty without a cluster)."""


class Admin:
    """The facade: one attribute per area (``admin.topics.create(...)``,
    ``admin.tables.status(...)``), built over the broker's in-process objects."""

    def __init__(
        self, broker: Broker, tables: TableStatusService, registry: Registry | None = None
    ) -> None:
        self.broker = broker
        self.topics = TopicService(broker)
        self.groups = GroupService(broker.groups, broker.store)
        self.schemas = SchemaService(registry)
        self.tables = tables
        self.lake = LakeService(tables)
        self.history: History | None = None
        """The charts' samples (set and started by the composition root)."""

    def decode(self, payload: bytes) -> tuple[str, str, int | None]:
        """Message bytes as text: through the registry when they carry the Confluent
        wire format, else UTF-8 text, else hex."""
        from floe.admin.topics import plain_decode

        return self.schemas.decode(payload) or plain_decode(payload)

    def cluster(self) -> ClusterInfo:
        """Cluster id, listeners, counts, and in a cluster its live brokers, this
        broker's lease and the ownership of every partition."""
        broker, config = self.broker, self.broker.config
        topics = self.topics.all()
        registry = None
        if config[keys.REGISTRY_ENABLE]:
            host = config[keys.REGISTRY_HOST] or config[keys.HOST]
            registry = f"http://{host}:{config[keys.REGISTRY_PORT]}"
        return ClusterInfo(
            broker.cluster_id,
            __version__,
            broker.node_id,
            f"{broker.advertised_host}:{broker.advertised_port}",
            registry,
            len(topics),
            sum(t.partitions for t in topics),
            len(self.groups.all()),
            len(self.schemas.subjects()),
            sum(t.table_topic for t in topics),
            self._storage(),
            self._brokers(),
            self._membership(),
            self._ownership(),
        )

    def _storage(self) -> str:
        bucket = getattr(self.broker.store, "bucket", None)
        if bucket is not None:
            return str(bucket.description)
        return f"local {self.broker.store.log_dir()}"

    def _brokers(self) -> list[ClusterBroker]:
        """The live brokers, this one included even when the last renewal's view
        predates its registration (it is live: it is answering)."""
        broker, membership = self.broker, self.broker.membership
        rack = membership.me.rack if membership is not None else None
        me = ClusterBroker(
            broker.node_id, broker.advertised_host, broker.advertised_port, rack, True
        )
        if membership is None:
            return [me]
        others = [
            ClusterBroker(b.broker_id, b.host, b.port, b.rack, False)
            for b in membership.view.brokers
            if b.broker_id != broker.node_id
        ]
        return sorted([me, *others], key=lambda b: b.node_id)

    def _membership(self) -> ClusterMembership | None:
        membership = self.broker.membership
        if membership is None:
            return None
        return ClusterMembership(
            membership.where,
            self.broker.config[keys.CLUSTER_SESSION_TIMEOUT_MS],
            max(0, round(membership.valid_for_s() * 1000)),
            membership.lease_losses,
            membership.fenced,
            int(membership.view.seen_at * 1000),
            len(membership.owned),
        )

    def _ownership(self) -> list[PartitionOwner]:
        if self.broker.membership is None:
            return []
        owners = self.broker.membership.view.owners
        return [
            PartitionOwner(topic, partition, o.owner, o.epoch)
            for (topic, partition), o in sorted(owners.items())
        ]
