"""The admin facade: one read/operate surface that the CLI (through the admin HTTP API)
and the web console both use.

:class:`Admin` is created by the composition root and owned by the broker's event loop
(its methods read the store on the loop and push blocking catalog and Spark work to
worker threads). One attribute per area: ``topics`` (:mod:`.topics`), ``groups``
(:mod:`.groups`), ``schemas`` (:mod:`.schemas`), ``tables`` (status, :mod:`.tables`),
``lake`` (snapshots, samples, SQL: :mod:`.lake`) and ``cluster`` (:meth:`Admin.cluster`,
:mod:`.cluster`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from floe.admin.cluster import (
    ClusterBroker,
    ClusterInfo,
    ClusterMembership,
    Counts,
    PartitionOwner,
    Role,
    cluster_info,
)
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


class Admin:
    """The facade: one attribute per area (``admin.topics.create(...)``,
    ``admin.tables.status(...)``), built over the broker's in-process objects."""

    def __init__(
        self, broker: Broker, tables: TableStatusService, registry: Registry | None = None
    ) -> None:
        self.broker = broker
        self.topics = TopicService(broker)
        peers = None
        if broker.membership is not None and broker.shares_partitions:
            from floe.admin.peer_groups import PeerGroups

            peers = PeerGroups(broker.membership, broker.node_id)
        self.groups = GroupService(broker.groups, broker.store, peers)
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
        config = self.broker.config
        topics = self.topics.all()
        registry = None
        if config[keys.REGISTRY_ENABLE]:
            host = config[keys.REGISTRY_HOST] or config[keys.HOST]
            registry = f"http://{host}:{config[keys.REGISTRY_PORT]}"
        counts = Counts(
            len(topics),
            sum(t.partitions for t in topics),
            len(self.groups.all()),
            len(self.schemas.subjects()),
            sum(t.table_topic for t in topics),
        )
        role: Role = "writer" if self.broker.membership is not None else "single"
        return cluster_info(self.broker, role, registry, counts)
