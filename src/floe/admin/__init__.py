"""The admin facade: one read/operate surface that the CLI (through the admin HTTP API)
and the web console both use.

:class:`Admin` is created by the composition root and owned by the broker's event loop
(its methods read the store on the loop and push blocking catalog and Spark work to
worker threads). One attribute per area: ``topics`` (:mod:`.topics`), ``groups``
(:mod:`.groups`), ``schemas`` (:mod:`.schemas`), ``tables`` (status, :mod:`.tables`),
``lake`` (snapshots, samples, SQL: :mod:`.lake`) and ``cluster`` (:meth:`Admin.cluster`).
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
    from floe.broker.core import Broker
    from floe.registry.core.service import Registry

__all__ = [
    "Admin",
    "AdminError",
    "BadRequestError",
    "ClusterInfo",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "PartitionStatus",
    "QueryTimeoutError",
    "TableSettings",
    "TableStatus",
    "TableStatusService",
    "UnavailableError",
]


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster (one broker) and where its listeners are."""

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

    def decode(self, payload: bytes) -> tuple[str, str, int | None]:
        """Message bytes as text: through the registry when they carry the Confluent
        wire format, else UTF-8 text, else hex."""
        from floe.admin.topics import plain_decode

        return self.schemas.decode(payload) or plain_decode(payload)

    def cluster(self) -> ClusterInfo:
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
        )

    def _storage(self) -> str:
        bucket = getattr(self.broker.store, "bucket", None)
        if bucket is not None:
            return str(bucket.description)
        return f"local {self.broker.store.log_dir()}"
