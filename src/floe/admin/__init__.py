"""The admin facade: one read/operate surface that the CLI (through the admin HTTP API)
and the web console both use.

:class:`Admin` is created by the composition root and owned by the broker's event loop
(its methods are coroutines that read the store on the loop and push blocking catalog
reads to worker threads). Today it answers table-topic status (:mod:`.tables`); topics,
groups, schemas and SQL come with the console.
"""

from __future__ import annotations

from floe.admin.errors import AdminError, NotFoundError
from floe.admin.tables import (
    PartitionStatus,
    TableSettings,
    TableStatus,
    TableStatusService,
)

__all__ = [
    "Admin",
    "AdminError",
    "NotFoundError",
    "PartitionStatus",
    "TableSettings",
    "TableStatus",
    "TableStatusService",
]


class Admin:
    """The facade: one attribute per area (``admin.tables.status(...)``)."""

    def __init__(self, tables: TableStatusService) -> None:
        self.tables = tables
