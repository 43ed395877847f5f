"""Table-topic data for the admin facade: snapshot history and a sample of rows (both
read with pyiceberg), and read-only Spark SQL with a row limit and a timeout.

Blocking work (pyiceberg, Spark) runs in worker threads; the event loop only waits.
SQL runs on the broker's Spark (the table topics' :class:`SparkManager`, started on
first use), in a session derived from it and a Spark job group of its own so a timeout
cancels exactly that query's jobs. Whether a statement is read-only is decided by
Spark's parser and analyzer (:mod:`floe.tabletopic.spark.readonly`), never by its text.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import uuid
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from floe.admin.errors import BadRequestError, QueryTimeoutError, UnavailableError
from floe.admin.tables import TableStatusService, iso_utc
from floe.config import broker as keys
from floe.errors import FloeError
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from floe.tasks import retrieve

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger("floe.admin.lake")

MAX_SAMPLE = 1000
MAX_ROWS = 10000
MAX_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Snapshot:
    """One snapshot of a table, newest first in a history; ``commit_id`` and
    ``offsets`` are Floe's (``None`` for snapshots Floe did not write)."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    time: str | None
    operation: str
    added_records: int | None
    added_files: int | None
    total_records: int | None
    commit_id: str | None
    offsets: str | None


@dataclass(frozen=True)
class SnapshotHistory:
    topic: str
    table: str
    snapshots: list[Snapshot]


@dataclass(frozen=True)
class RowSet:
    """Rows as JSON values (timestamps ISO-8601, binary base64, decimals as strings).
    ``truncated``: more rows existed than the limit let through."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    elapsed_s: float


def jsonable(value: Any) -> Any:
    """A value as JSON: ISO-8601 times, base64 bytes, decimals as strings."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):  # NaN is not JSON
        return None
    return value


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


class LakeService:
    """Snapshot history, samples and SQL (owned by the broker's event loop; no state of
    its own besides what :class:`TableStatusService` holds)."""

    def __init__(self, status: TableStatusService) -> None:
        from floe.tabletopic.spark.readonly import ReadOnlySql

        self.status = status
        self.read_only = ReadOnlySql()

    def _identifier(self, topic: str) -> tuple[str, str]:
        """Raises:
        NotFoundError: not a (once) table topic.
        """
        ((name, cfg),) = self.status._table_topics(topic)
        return table_identifier(cfg.namespace, name)

    def _load(self, ident: tuple[str, str]) -> Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return cat.load_table(self.status.reader.catalog(), *ident)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    async def snapshots(self, topic: str, limit: int = 100) -> SnapshotHistory:
        """The table's snapshots, newest first (at most ``limit``); empty before the
        first commit.

        Raises:
            NotFoundError: not a table topic. BadRequestError: a bad limit.
        """
        if not 1 <= limit <= 1000:
            raise BadRequestError(f"limit must be 1..1000, got {limit}")
        ident = self._identifier(topic)

        def read() -> list[Snapshot]:
            table = self._load(ident)
            if table is None:
                return []
            out = []
            for info in cat.snapshots(table):
                s = info.summary
                out.append(
                    Snapshot(
                        info.snapshot_id,
                        info.parent_id,
                        info.timestamp_ms,
                        iso_utc(info.timestamp_ms),
                        info.operation,
                        _int(s.get("added-records")),
                        _int(s.get("added-data-files")),
                        _int(s.get("total-records")),
                        s.get("floe.commit-id"),
                        s.get("floe.offsets"),
                    )
                )
                if len(out) >= limit:
                    break
            return out

        return SnapshotHistory(topic, f"{ident[0]}.{ident[1]}", await asyncio.to_thread(read))

    async def sample(self, topic: str, limit: int = 20) -> RowSet:
        """Up to ``limit`` rows of the table (a pyiceberg scan; no order promised).

        Raises:
            NotFoundError: not a table topic. BadRequestError: a bad limit.
        """
        if not 1 <= limit <= MAX_SAMPLE:
            raise BadRequestError(f"limit must be 1..{MAX_SAMPLE}, got {limit}")
        ident = self._identifier(topic)

        def read() -> RowSet:
            import time as clock

            started = clock.monotonic()
            table = self._load(ident)
            if table is None:
                return RowSet([], [], False, 0.0)
            arrow = table.scan(limit=limit + 1).to_arrow()
            columns = list(arrow.column_names)
            rows = [[jsonable(r[c]) for c in columns] for r in arrow.to_pylist()]
            return RowSet(
                columns, rows[:limit], len(rows) > limit, round(clock.monotonic() - started, 3)
            )

        return await asyncio.to_thread(read)

    async def sql(
        self, statement: str, limit: int = 100, timeout_s: float = 30.0, fresh: bool = False
    ) -> RowSet:
        """Run one read-only Spark SQL statement, at most ``limit`` rows back, cancelled
        after ``timeout_s``. ``fresh``: the table topics it reads include the records
        not committed yet (:mod:`floe.tabletopic.hybrid`).

        Raises:
            BadRequestError: empty, not read-only (Spark's parser and analyzer decide: see
                :mod:`floe.tabletopic.spark.readonly`), a bad limit or timeout, or Spark
                refused the statement (its one-line message).
            QueryTimeoutError: it ran longer than ``timeout_s`` (its jobs are cancelled).
            UnavailableError: table topics (Spark) are not running, or Spark cannot start.
        """
        from floe.tabletopic.hybrid import fresh_views
        from floe.tabletopic.spark.readonly import NotReadOnlyError
        from floe.tabletopic.spark.sql import SqlError

        text = statement.strip()
        if not text.rstrip(";").strip():
            raise BadRequestError("empty statement")
        if not 1 <= limit <= MAX_ROWS:
            raise BadRequestError(f"limit must be 1..{MAX_ROWS}, got {limit}")
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise BadRequestError(f"timeout must be in (0, {MAX_TIMEOUT_S:g}] s, got {timeout_s}")
        manager = self.status.manager
        if manager is None:
            raise UnavailableError("table topics are not running: no Spark for SQL")
        tables = manager.tables()
        config = self.status.config
        try:

            def prepare() -> None:
                catalog = tables.catalog()  # creates the JDBC catalog tables Spark expects
                cat.ensure_namespace(catalog, config[keys.TABLE_TOPIC_NAMESPACE])

            await asyncio.to_thread(prepare)
            session = await tables.spark.get_session()
        except FloeError as exc:
            raise UnavailableError(str(exc)) from None
        group = f"floe-admin-sql-{uuid.uuid4().hex[:12]}"
        views = fresh_views(manager, asyncio.get_running_loop()) if fresh else None

        def run() -> RowSet:
            import time as clock

            started = clock.monotonic()
            session.sparkContext.setJobGroup(group, "admin SQL", interruptOnCancel=True)
            try:
                columns, rows = self.read_only.run(session, text, limit + 1, views)
            finally:
                session.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            return RowSet(
                columns,
                [[jsonable(v) for v in row] for row in rows[:limit]],
                len(rows) > limit,
                round(clock.monotonic() - started, 3),
            )

        task = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            result = await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            session.sparkContext.cancelJobGroup(group)
            task.add_done_callback(retrieve)
            log.warning("admin.sql_timeout group=%s timeout_s=%s", group, timeout_s)
            raise QueryTimeoutError(
                f"the query ran longer than {timeout_s:g} s and was cancelled"
            ) from None
        except NotReadOnlyError as exc:
            log.warning("admin.sql_refused reason=%s", exc)
            raise BadRequestError(str(exc)) from None
        except SqlError as exc:
            raise BadRequestError(str(exc)) from None
        log.info(
            "admin.sql rows=%d elapsed_s=%s fresh=%s",
            len(result.rows),
            result.elapsed_s,
            "yes" if fresh else "no",
        )
        return result
