"""Table-topic status: what each table topic has committed, how far behind it is, and
how its last round went.

Sources, and who owns them:

* the topics and their table settings, and per partition the log start, last stable
  and log end offsets and record timestamps: the store, read on the event loop;
* the commit state: :attr:`TableTopicManager.coordinators` ``[topic].state`` (a
  :class:`~floe.tabletopic.model.TableState`, ``pending`` until the coordinator
  recovered it), read on the loop, never changed here;
* the table: snapshot count and the state Floe recorded in it (table properties, see
  :func:`floe.tabletopic.catalog.read_recorded`), read with pyiceberg in a worker thread
  (:class:`TableReader`). For a topic whose coordinator has no state yet, or that is
  disabled, the committed offsets and counts come from there, the same place recovery
  reads them.

**Lag.** Per partition ``lag_records = log_end_offset - committed_offset`` (offsets, so
transaction markers and records of open or aborted transactions count: the table
reaches the log end only once open transactions end). ``lag_seconds`` is the record
time the table is behind: the largest record timestamp in the partition minus the
timestamp of the last committed record, never negative, ``0`` when caught up. When the
last committed record is no longer in the log (nothing committed yet, or retention
deleted it) the first record not yet committed stands in for it. ``None`` when the
timestamps cannot be read.

The pure parts (:func:`lag_seconds`, :func:`partition_status`, :func:`build_status`,
:func:`explicitly_disabled`) do no I/O and are unit tested.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from floe.admin.errors import ConflictError, NotFoundError, OperationFailedError
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.partition_by import render_partition_by
from floe.config.tabletopic import (
    ENABLE,
    TableTopicConfig,
    canonical_name,
    is_table_topic_key,
    resolve_table_topic,
)
from floe.errors import ConfigError, KafkaError
from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.interface import (
    NotCachedError,
    NotOwnerError,
    OffsetOutOfRangeError,
    PartitionLog,
    Store,
    TopicMeta,
)
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from floe.tabletopic.model import MAINTENANCE_PROP, MaintenanceResult, TableState
from floe.tabletopic.partitioning import describe_spec
from floe.types import Offset, PartitionId, TopicName

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from floe.tabletopic.coordinator import MaintenanceState
    from floe.tabletopic.manager import TableTopicManager

log = logging.getLogger("floe.admin.tables")

STATUS_OK = "ok"
STATUS_STARTING = "starting"
STATUS_FAILING = "failing"
STATUS_STOPPED = "stopped"
STATUS_DISABLED = "disabled"


@dataclass(frozen=True)
class TableSettings:
    """A table topic's effective settings (``table.topic.*``)."""

    commit_interval_ms: int
    namespace: str
    convert_value_type: str
    convert_key_type: str
    transform_value_type: str
    errors_tolerance: str
    partition_by: str
    """``table.topic.partition.by`` in its canonical form; empty: the table keeps the
    spec it has."""
    id_columns: tuple[str, ...]
    """``table.topic.id.columns``: the columns identifying a row (empty: none)."""
    upsert: bool
    """Records upsert and delete rows by ``id_columns`` (``upsert.enable`` or a
    ``cdc.field``); false: append-only."""
    cdc_field: str
    """``table.topic.cdc.field`` (empty: none)."""


@dataclass(frozen=True)
class MaintenanceStatus:
    """A table's maintenance (``table.topic.maintenance.*``).

    Attributes:
        interval_ms: ``maintenance.interval.ms`` (0: never on a schedule).
        running: a run is in progress.
        last_run_time / last_duration_s / last_effect: the last run the table records
            (ISO-8601 UTC, seconds, one line: files compacted, snapshots expired...).
        last: that run's counts (``null`` before the first run).
        next_run_time: when the next scheduled run is due (``null``: none scheduled,
            or the coordinator does not run).
        error: one line when the last run failed (it is retried).
    """

    interval_ms: int
    running: bool
    last_run_time: str | None
    last_duration_s: float | None
    last_effect: str | None
    last: MaintenanceResult | None
    next_run_time: str | None
    error: str | None


@dataclass(frozen=True)
class PartitionStatus:
    """One partition of a table topic.

    Attributes:
        committed_offset: one past the last offset in the table (``None``: unknown, the
            table could not be read and the coordinator has no state yet).
        lag_records: ``log_end_offset - committed_offset`` (``None`` when unknown).
        lag_seconds: record time the table is behind (module docstring); ``None`` when
            unknown.
        retention_held_bytes: bytes retention would have deleted but keeps until the
            table has materialized them (``table.topic.retention.wait``).
        error: one line when the partition cannot advance (its log ends below the
            committed offset: truncated, or restored from an older copy).
    """

    partition: int
    committed_offset: int | None
    log_start_offset: int
    last_stable_offset: int
    log_end_offset: int
    lag_records: int | None
    lag_seconds: float | None
    retention_held_bytes: int = 0
    error: str | None = None


@dataclass(frozen=True)
class TableInfo:
    """What the table itself says (pyiceberg), as plain data.

    Attributes:
        exists: the table exists in the catalog.
        snapshots: number of snapshots in the table's metadata.
        committed: the committed offsets Floe recorded in the table.
        commit_id / commit_ms: the newest Floe commit and its time.
        rows / files: ``added-records`` and ``added-data-files`` of that commit's
            snapshot (``None`` once it expired).
        skipped / lost: the counts Floe recorded in the table.
        partition_spec: the table's current partition spec in the ``partition.by``
            syntax (``[]``: unpartitioned).
        error: one line when the table could not be read (the other fields are empty).
    """

    exists: bool
    partition_spec: str | None = None
    maintenance: MaintenanceResult | None = None
    snapshots: int | None = None
    committed: Mapping[PartitionId, Offset] | None = None
    commit_id: str | None = None
    commit_ms: int | None = None
    rows: int | None = None
    files: int | None = None
    skipped: int = 0
    lost: int = 0
    error: str | None = None


@dataclass(frozen=True)
class RouteStatus:
    """One table of a topic routed by record type (``route.by = record_name``): the
    fields of :class:`TableStatus` of the same names, for this table alone."""

    record: str
    table: str
    catalog_table: str
    status: str
    partitions: tuple[PartitionStatus, ...]
    last_commit_id: str | None
    last_commit_time: str | None
    last_commit_rows: int | None
    rounds: int
    snapshots: int | None
    skipped_records: int
    lost_records: int
    last_error: str | None


@dataclass(frozen=True)
class TableStatus:
    """One table topic's status.

    Attributes:
        topic: the Kafka topic.
        table: ``<namespace>.<table>`` as Spark SQL names it inside the catalog.
        catalog_table: ``<catalog>.<namespace>.<table>``, what ``floe sql`` queries.
        enabled: ``table.topic.enable``.
        status: ``ok``, ``starting`` (no commit state yet: the coordinator is starting
            or recovering), ``failing`` (the last round or recovery failed and is being
            retried, see ``last_error``; or a partition cannot advance, see its
            ``error``), ``stopped`` (a bad record under ``errors.tolerance=none``
            stopped the table until its settings change) or ``disabled``
            (``table.topic.enable=false``; the table is kept).
        last_commit_id / last_commit_ms / last_commit_time: the newest Floe commit
            (time in ms since the epoch and as ISO-8601 UTC).
        last_commit_duration_s: how long that round took (``None`` when it was not
            made by this broker process).
        last_commit_rows / last_commit_files: rows and data files that round added.
        rounds: rounds committed since the broker started.
        snapshots: snapshots in the table (``None`` when unreadable or no table yet).
        partition_spec: the table's current partition spec (``[]``: unpartitioned;
            ``None`` when unreadable or no table yet); it follows
            ``settings.partition_by`` from the next round on.
        skipped_records: bad records skipped (errors tolerance), as the table records.
        dead_letter_topic: where skipped records go (``table.topic.errors.dlq.topic``),
            ``None`` without one.
        dead_lettered_records: dead letters in the dead-letter topic so far (replay
            markers not counted; 0 before it exists).
        lost_records: records that never reached the table (deleted from the log before
            they were materialized, missing when read, or at offsets the table was
            ahead of the log by), as the table records.
        last_error: one line about the last failed round; ``None`` when it succeeded.
        note: one line worth knowing that is not an error (a recreated topic started
            at offset 0 in the same table).
        warning: one line about records the last round skipped for a reason the user
            can fix (a ``by_latest_schema`` schema the table cannot hold).
        table_error: one line when the table could not be read for this status.
        routes: with ``route.by = record_name``, each record type's table; then
            ``table`` is the tables' name pattern, ``partitions`` hold the lowest
            committed offset of the tables (the lag of the slowest), ``status`` is the
            worst, the counts are sums and the last commit is the newest.
    """

    topic: str
    table: str
    catalog_table: str
    enabled: bool
    status: str
    settings: TableSettings
    partitions: tuple[PartitionStatus, ...]
    last_commit_id: str | None
    last_commit_ms: int | None
    last_commit_time: str | None
    last_commit_duration_s: float | None
    last_commit_rows: int | None
    last_commit_files: int | None
    rounds: int
    snapshots: int | None
    partition_spec: str | None
    maintenance: MaintenanceStatus
    skipped_records: int
    dead_letter_topic: str | None
    dead_lettered_records: int
    lost_records: int
    last_error: str | None
    note: str | None
    warning: str | None
    table_error: str | None
    routes: tuple[RouteStatus, ...] = ()


@dataclass(frozen=True)
class LogPosition:
    """A partition's offsets and the timestamps the lag needs, read from the store."""

    partition: PartitionId
    log_start: Offset
    last_stable: Offset
    log_end: Offset
    newest_ts: int | None
    """The largest record timestamp in the partition."""
    reference_ts: int | None
    """Timestamp of the last committed record (or the first uncommitted one)."""
    unknown: str | None = None
    """Why the offsets are not known (another broker leads it and did not answer); the
    offsets are then -1."""


def lag_seconds(
    committed: int, log_end: int, newest_ts: int | None, reference_ts: int | None
) -> float | None:
    """Record time the table is behind: ``newest_ts - reference_ts`` in seconds, never
    negative; ``0.0`` when caught up; ``None`` when a timestamp is missing."""
    if committed >= log_end:
        return 0.0
    if newest_ts is None or reference_ts is None or newest_ts < 0 or reference_ts < 0:
        return None
    return max(0, newest_ts - reference_ts) / 1000


def partition_status(
    pos: LogPosition, committed: Offset | None, held_bytes: int = 0
) -> PartitionStatus:
    """A partition's status from its log position and committed offset."""
    error = None
    if pos.unknown is not None:
        return PartitionStatus(
            partition=int(pos.partition),
            committed_offset=None if committed is None else int(committed),
            log_start_offset=-1,
            last_stable_offset=-1,
            log_end_offset=-1,
            lag_records=None,
            lag_seconds=None,
            error=f"its leader cannot be read now: {pos.unknown}",
        )
    if committed is not None and committed > pos.log_end:
        error = (
            f"the table holds offsets up to {committed - 1} but the log ends at "
            f"{pos.log_end} (truncated, or restored from an older copy): this partition "
            f"waits until its log passes offset {committed}; the log's records at offsets "
            f"{pos.log_end}-{committed - 1} will not reach the table (counted as lost)"
        )
    return PartitionStatus(
        partition=int(pos.partition),
        committed_offset=None if committed is None else int(committed),
        log_start_offset=int(pos.log_start),
        last_stable_offset=int(pos.last_stable),
        log_end_offset=int(pos.log_end),
        lag_records=None if committed is None else max(0, pos.log_end - committed),
        lag_seconds=(
            None
            if committed is None
            else lag_seconds(committed, pos.log_end, pos.newest_ts, pos.reference_ts)
        ),
        retention_held_bytes=held_bytes,
        error=error,
    )


def explicitly_disabled(configs: Mapping[str, str], cfg: TableTopicConfig) -> bool:
    """The topic sets ``table.topic.enable`` (either spelling) to false: it was, or was
    meant to be, a table topic, so it may have a table worth listing."""
    return not cfg.enable and any(
        is_table_topic_key(name) and canonical_name(name) == ENABLE.name for name in configs
    )


def settings_of(cfg: TableTopicConfig) -> TableSettings:
    return TableSettings(
        commit_interval_ms=cfg.commit_interval_ms,
        namespace=cfg.namespace,
        convert_value_type=cfg.convert_value_type,
        convert_key_type=cfg.convert_key_type,
        transform_value_type=cfg.transform_value_type,
        errors_tolerance=cfg.errors_tolerance,
        partition_by=render_partition_by(cfg.partition_by),
        id_columns=cfg.id_columns,
        upsert=cfg.upserts,
        cdc_field=cfg.cdc_field,
    )


def maintenance_status(
    cfg: TableTopicConfig, info: TableInfo, running: MaintenanceState | None
) -> MaintenanceStatus:
    """The maintenance part of a status: the coordinator's view when it runs (it knows
    a run in progress, a failure and the next due time), else the table's record."""
    known = [r for r in (running.last if running else None, info.maintenance) if r is not None]
    last = max(known, key=lambda r: r.started_ms, default=None)  # the newer run
    return MaintenanceStatus(
        interval_ms=cfg.maintenance_interval_ms,
        running=running is not None and running.running,
        last_run_time=None if last is None else iso_utc(last.started_ms),
        last_duration_s=None if last is None else last.duration_s,
        last_effect=None if last is None else last.describe(),
        last=last,
        next_run_time=None if running is None else iso_utc(running.next_ms),
        error=None if running is None else running.error,
    )


def iso_utc(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def committed_offsets(
    state: TableState | None, info: TableInfo
) -> Mapping[PartitionId, Offset] | None:
    """The committed ends: the coordinator's state, else the table's, else nothing
    committed (no table); ``None`` when neither can be read."""
    if state is not None and not state.pending:
        return state.committed
    if info.error is not None:
        return None
    return info.committed if info.committed is not None else {}


SEVERITY = (STATUS_STOPPED, STATUS_FAILING, STATUS_STARTING, STATUS_OK)


def route_of(record: str, s: TableStatus) -> RouteStatus:
    """A route table's status, from the status built for it alone."""
    return RouteStatus(
        record=record,
        table=s.table,
        catalog_table=s.catalog_table,
        status=s.status,
        partitions=s.partitions,
        last_commit_id=s.last_commit_id,
        last_commit_time=s.last_commit_time,
        last_commit_rows=s.last_commit_rows,
        rounds=s.rounds,
        snapshots=s.snapshots,
        skipped_records=s.skipped_records,
        lost_records=s.lost_records,
        last_error=s.last_error,
    )


def routed_status(base: TableStatus, routes: list[TableStatus], records: list[str]) -> TableStatus:
    """A routed topic's status: ``base`` (built with no state) summing up ``routes``
    (one status per record type's table, in ``records``' order). Pure."""
    from dataclasses import replace

    namespace = base.table.split(".", 1)[0]
    pattern = f"{base.table.split('.', 1)[1]}_<record>"
    if not routes:
        return replace(
            base,
            table=f"{namespace}.{pattern}",
            catalog_table=base.catalog_table.rsplit(".", 1)[0] + f".{pattern}",
            status=STATUS_STARTING if base.enabled else base.status,
            note="no record type yet: a subject <topic>-<record full name> (Confluent's "
            "TopicRecordNameStrategy) holding an Avro record starts its table",
        )
    partitions = []
    for i, p in enumerate(base.partitions):  # the slowest table's, per partition
        candidates = [r.partitions[i] for r in routes if i < len(r.partitions)]
        partitions.append(
            min(
                candidates,
                key=lambda q: -1 if q.committed_offset is None else q.committed_offset,
                default=p,
            )
        )
    newest = max(routes, key=lambda r: r.last_commit_ms or -1)
    return replace(
        base,
        table=f"{namespace}.{pattern}",
        catalog_table=base.catalog_table.rsplit(".", 1)[0] + f".{pattern}",
        status=min((r.status for r in routes), key=SEVERITY.index),
        partitions=tuple(partitions),
        last_commit_id=newest.last_commit_id,
        last_commit_ms=newest.last_commit_ms,
        last_commit_time=newest.last_commit_time,
        last_commit_duration_s=newest.last_commit_duration_s,
        last_commit_rows=newest.last_commit_rows,
        last_commit_files=newest.last_commit_files,
        rounds=sum(r.rounds for r in routes),
        snapshots=sum(r.snapshots or 0 for r in routes),
        skipped_records=sum(r.skipped_records for r in routes),
        lost_records=sum(r.lost_records for r in routes),
        last_error=next((r.last_error for r in routes if r.last_error), None),
        note=next((r.note for r in routes if r.note), None),
        warning=next((r.warning for r in routes if r.warning), None),
        table_error=next((r.table_error for r in routes if r.table_error), None),
        routes=tuple(route_of(rec, r) for rec, r in zip(records, routes, strict=True)),
    )


def build_status(
    topic: TopicName,
    cfg: TableTopicConfig,
    *,
    catalog_name: str,
    state: TableState | None,
    info: TableInfo,
    positions: list[LogPosition],
    held_bytes: Mapping[PartitionId, int] | None = None,
    running: MaintenanceState | None = None,
    dead_lettered: int = 0,
    table_id: tuple[str, str] | None = None,
    elsewhere: bool = False,
) -> TableStatus:
    """Assemble one topic's status from what was read (no I/O); ``running`` is the
    coordinator's maintenance state when it runs; ``table_id`` a route table's;
    ``elsewhere``: another broker runs its rounds (its state is the table's)."""
    namespace, table = table_id or table_identifier(cfg.namespace, topic)
    committed = committed_offsets(state, info)
    partitions = tuple(
        partition_status(
            pos,
            None if committed is None else committed.get(pos.partition, Offset(0)),
            (held_bytes or {}).get(pos.partition, 0),
        )
        for pos in positions
    )
    if not cfg.enable:
        status = STATUS_DISABLED
    elif state is not None and state.stopped:
        status = STATUS_STOPPED
    elif (state is not None and state.last_error is not None) or any(p.error for p in partitions):
        status = STATUS_FAILING
    elif elsewhere:
        status = STATUS_OK if info.exists else STATUS_STARTING
    elif state is None or state.pending:
        status = STATUS_STARTING
    else:
        status = STATUS_OK
    known = state if state is not None and not state.pending else None
    made_here = known is not None and known.rounds > 0
    commit_id = known.last_commit_id if known is not None else info.commit_id
    commit_ms = known.last_commit_ms if known is not None else info.commit_ms
    same_commit = commit_id is not None and commit_id == info.commit_id
    return TableStatus(
        topic=topic,
        table=f"{namespace}.{table}",
        catalog_table=f"{catalog_name}.{namespace}.{table}",
        enabled=cfg.enable,
        status=status,
        settings=settings_of(cfg),
        partitions=partitions,
        last_commit_id=commit_id,
        last_commit_ms=commit_ms,
        last_commit_time=iso_utc(commit_ms),
        last_commit_duration_s=(
            round(state.last_duration_s, 3)
            if state is not None and state.last_duration_s is not None
            else None
        ),
        last_commit_rows=(
            state.last_rows if made_here and state else info.rows if same_commit else None
        ),
        last_commit_files=(
            state.last_files if made_here and state else info.files if same_commit else None
        ),
        rounds=state.rounds if state is not None else 0,
        snapshots=info.snapshots,
        partition_spec=info.partition_spec,
        maintenance=maintenance_status(cfg, info, running),
        skipped_records=known.skipped_total if known is not None else info.skipped,
        dead_letter_topic=cfg.dead_letter_topic(topic),
        dead_lettered_records=dead_lettered,
        lost_records=known.lost_total if known is not None else info.lost,
        last_error=state.last_error if state is not None else None,
        note=state.note if state is not None else None,
        warning=state.warning if state is not None else None,
        table_error=info.error,
    )


def record_timestamp(plog: PartitionLog, offset: Offset) -> int | None:
    """The timestamp of the record at ``offset`` (its batch's max timestamp when that
    record is gone, e.g. compacted away); ``None`` outside the log."""
    try:
        data = plog.read(offset, 1, min_one=True)
    except (OffsetOutOfRangeError, NotCachedError):  # status does not wait on the bucket
        return None
    for header in scan(data, verify_crc=False, partial_ok=True):
        if header.base_offset <= offset <= header.last_offset:
            for record in decode_batch(data, header):
                if record.offset == offset:
                    return record.timestamp
            return header.max_timestamp
    return None


def log_position(plog: PartitionLog, committed: Offset | None) -> LogPosition:
    """Read a partition's offsets and lag timestamps (on the event loop: the store is
    loop-owned). Timestamps are read only when the partition is behind."""
    start, end = plog.log_start_offset, plog.log_end_offset
    newest = reference = None
    if committed is not None and committed < end:
        try:
            found = plog.max_timestamp()
        except NotCachedError:
            found = None
        newest = None if found is None else int(found[1])
        last = Offset(committed - 1)
        reference = record_timestamp(plog, last if last >= start else Offset(max(committed, start)))
    return LogPosition(plog.partition, start, plog.last_stable_offset, end, newest, reference)


class TableReader:
    """Reads tables with pyiceberg, for status. Its methods block: run them in a worker
    thread. ``catalog`` returns the catalog client (the table-topic manager's shared one
    when it runs). Nothing to clean up.
    """

    def __init__(self, catalog: Callable[[], Catalog]) -> None:
        self.catalog = catalog

    def read(self, namespace: str, table: str) -> TableInfo:
        """The table's snapshot count and newest Floe commit; never raises (a failure is
        returned as ``TableInfo.error``)."""
        try:
            from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

            try:
                loaded = cat.load_table(self.catalog(), namespace, table)
            except (NoSuchTableError, NoSuchNamespaceError):
                return TableInfo(exists=False)
            snapshots = len(loaded.metadata.snapshots)
            spec = describe_spec(loaded.spec(), loaded.schema())
            recorded_run = loaded.properties.get(MAINTENANCE_PROP)
            maintained = None if recorded_run is None else MaintenanceResult.from_json(recorded_run)
            recorded = cat.read_recorded(loaded)
            if recorded.commit_id is None and not recorded.committed:
                return TableInfo(
                    exists=True,
                    partition_spec=spec,
                    maintenance=maintained,
                    snapshots=snapshots,
                )
            summary = cat.summary_of_commit(loaded, recorded.commit_id)
            return TableInfo(
                exists=True,
                partition_spec=spec,
                maintenance=maintained,
                snapshots=snapshots,
                committed=recorded.committed,
                commit_id=recorded.commit_id,
                commit_ms=recorded.commit_ms,
                rows=_int_or_none(summary.get("added-records")),
                files=_int_or_none(summary.get("added-data-files")),
                skipped=recorded.skipped,
                lost=recorded.lost,
            )
        except Exception as exc:  # status must answer even when the catalog does not
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            log.warning("admin.table_read_failed table=%s.%s error=%s", namespace, table, error)
            return TableInfo(exists=False, error=error)


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


class TableStatusService:
    """Answers ``status(topic=None)`` for table topics.

    Owned by the broker's event loop (created by the composition root with the store,
    the configuration and the running :class:`TableTopicManager`, or ``None`` when it is
    not running). Holds no state of its own besides the catalog client of its
    :class:`TableReader` (the manager's shared catalog client when there is a manager).
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        manager: TableTopicManager | None,
        reader: TableReader | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.manager = manager
        if reader is None:
            catalog = (
                manager.tables().catalog
                if manager is not None
                else cat.SharedCatalog(cat.CatalogSettings.from_config(config))
            )
            reader = TableReader(catalog)
        self.reader = reader

    def _table_topics(
        self, only: str | None, coordinated: bool = False
    ) -> list[tuple[TopicName, TableTopicConfig]]:
        """Topics to report (enabled ones and explicitly disabled ones; the latter are
        kept only if their table exists, decided later); ``coordinated``: only those
        this broker coordinates.

        Raises:
            NotFoundError: ``only`` is not a topic, or not a (once) table topic.
        """
        broker = {keys.TABLE_TOPIC_NAMESPACE.name: self.config[keys.TABLE_TOPIC_NAMESPACE]}
        topics = self.store.topics()
        if only is not None and (only not in topics or topics[TopicName(only)].internal):
            raise NotFoundError(f"unknown topic {only!r}")
        out = []
        for name, meta in sorted(topics.items()):
            if meta.internal or (only is not None and name != only):
                continue
            if coordinated and self.manager is not None and self.manager.elsewhere(meta):
                continue
            try:
                cfg = resolve_table_topic(meta.configs, broker)
            except ConfigError as exc:
                log.warning("admin.bad_table_config topic=%s error=%s", name, exc)
                continue
            if cfg.enable or explicitly_disabled(meta.configs, cfg):
                out.append((name, cfg))
        if only is not None and not out:
            raise NotFoundError(f"topic {only!r} is not a table topic")
        return out

    async def status(
        self, topic: str | None = None, *, coordinated: bool = False
    ) -> list[TableStatus]:
        """The status of every table topic (sorted by name), or of ``topic`` only;
        ``coordinated``: only of those this broker coordinates (the metrics: each
        broker exports its own).

        Disabled topics (``table.topic.enable=false`` set explicitly) are listed when
        their table exists, with the committed offsets recorded in it.

        Raises:
            NotFoundError: ``topic`` is not a topic, or is not a table topic (nor a
                disabled one with a table).
        """
        wanted = self._table_topics(topic, coordinated)
        coordinators = self.manager.coordinators if self.manager is not None else {}
        infos = await asyncio.gather(
            *(
                asyncio.to_thread(self.reader.read, *table_identifier(cfg.namespace, name))
                for name, cfg in wanted
            )
        )
        catalog_name = self.config[keys.CATALOG_NAME]
        out = []
        for (name, cfg), info in zip(wanted, infos, strict=True):
            if not cfg.enable and not info.exists:
                continue  # disabled and never materialized: not a table topic
            if cfg.enable and cfg.routes:
                routed = await self._routed(name, cfg, catalog_name)
                if routed is not None:
                    out.append(routed)
                continue
            coordinator = coordinators.get(name) if cfg.enable else None
            state = coordinator.state if coordinator is not None else None
            committed = committed_offsets(state, info)
            meta = self.store.topic(name)
            if meta is None:  # deleted while the table was read
                continue
            positions, held = await self._positions(meta, committed)
            elsewhere = cfg.enable and self.manager is not None and self.manager.elsewhere(meta)
            out.append(
                build_status(
                    name,
                    cfg,
                    catalog_name=catalog_name,
                    state=state,
                    info=info,
                    positions=positions,
                    held_bytes=held,
                    running=coordinator.maintenance if coordinator is not None else None,
                    dead_lettered=await self._dead_lettered(cfg.dead_letter_topic(name)),
                    elsewhere=elsewhere,
                )
            )
        if topic is not None and not out:
            raise NotFoundError(f"topic {topic!r} is not a table topic")
        return out

    async def _positions(
        self, meta: TopicMeta, committed: Mapping[PartitionId, Offset] | None
    ) -> tuple[list[LogPosition], dict[PartitionId, int]]:
        """Each partition's log position and the bytes retention keeps for the table:
        read here, or (in a cluster whose brokers share partitions) asked of the broker
        leading it, whose held bytes are its own (0 here)."""
        positions: list[LogPosition] = []
        held: dict[PartitionId, int] = {}
        remote: list[PartitionId] = []
        for p in map(PartitionId, range(meta.partitions)):
            try:
                plog = self.store.partition(meta.name, p)
            except NotOwnerError:
                remote.append(p)
                continue
            mark = None if committed is None else committed.get(p, Offset(0))
            positions.append(log_position(plog, mark))
            held[p] = plog.held_bytes
        if remote:
            unknown: str | None = "no broker leads it"
            if self.manager is not None:
                try:
                    asked = await self.manager.partitions_of(meta.name).remote_ends(remote)
                except NotOwnerError as exc:
                    unknown = str(exc)
                else:
                    unknown = None
            for p in remote:
                if unknown is not None:
                    pos = LogPosition(p, Offset(-1), Offset(-1), Offset(-1), None, None, unknown)
                else:
                    pos = LogPosition(
                        p, asked.starts[p], asked.stable[p], asked.ends[p], None, None
                    )
                positions.append(pos)
            positions.sort(key=lambda pos: pos.partition)
        return positions, held

    async def _routed(
        self, name: TopicName, cfg: TableTopicConfig, catalog_name: str
    ) -> TableStatus | None:
        """A routed topic's status: one per record type's table, summed up."""
        routes = self.manager.route_coordinators(name) if self.manager is not None else []
        infos = await asyncio.gather(
            *(asyncio.to_thread(self.reader.read, *c.table) for c in routes)
        )
        meta = self.store.topic(name)
        if meta is None:
            return None
        dead = await self._dead_lettered(cfg.dead_letter_topic(name))
        held = {
            p: self.store.partition(name, p).held_bytes
            for p in map(PartitionId, range(meta.partitions))
        }

        def one(
            state: TableState | None, info: TableInfo, table_id: tuple[str, str] | None
        ) -> TableStatus:
            committed = committed_offsets(state, info)
            positions = [
                log_position(
                    self.store.partition(name, p),
                    None if committed is None else committed.get(p, Offset(0)),
                )
                for p in map(PartitionId, range(meta.partitions))
            ]
            return build_status(
                name,
                cfg,
                catalog_name=catalog_name,
                state=state,
                info=info,
                positions=positions,
                held_bytes=held,
                dead_lettered=dead,
                table_id=table_id,
            )

        tables = [one(c.state, i, c.table) for c, i in zip(routes, infos, strict=True)]
        base = one(None, TableInfo(exists=False), None)
        return routed_status(base, tables, [c.route or "" for c in routes])

    async def _dead_lettered(self, dlq: str | None) -> int:
        """Dead letters in a dead-letter topic so far (0 before it exists, or without
        a running pipeline to count them)."""
        letters = self.manager.tables().dead_letters if self.manager is not None else None
        if dlq is None or letters is None:
            return 0
        try:
            return await letters.count(TopicName(dlq))
        except KafkaError:  # another broker leads it (a cluster): not known here
            return 0

    async def maintain(self, topic: str) -> MaintenanceResult:
        """Run the table's maintenance now (after a run in progress) and return what it
        did.

        Raises:
            NotFoundError: ``topic`` is not a table topic.
            ConflictError: it is disabled or starting, or its table does not exist yet.
            Exception: a maintenance step failed (the message says which).
        """
        from floe.tabletopic.coordinator import NoTableError

        [(_, cfg)] = self._table_topics(topic)  # 404 when it is no table topic at all
        if not cfg.enable:
            raise ConflictError(f"table topic {topic!r} is disabled: enable it to maintain it")
        coordinators = self.manager.coordinators if self.manager is not None else {}
        coordinator = coordinators.get(TopicName(topic))
        if coordinator is not None:
            found = [coordinator]
        elif self.manager is not None and cfg.routes:  # a table per record type: each
            found = self.manager.route_coordinators(TopicName(topic))
        else:
            found = []
        meta = self.store.topic(TopicName(topic))
        if not found and meta is not None and self.manager and self.manager.elsewhere(meta):
            raise ConflictError(
                f"table topic {topic!r} is coordinated by another broker (the leader of "
                f"its partition 0: floe cluster status names it), where its maintenance "
                f"runs on schedule; maintenance on demand is for the table topics this "
                f"broker coordinates"
            )
        if not found:  # enabled a moment ago: the manager starts it within 1 s
            raise ConflictError(f"table topic {topic!r} is starting: try again in a second")
        runs = []
        for one in found:
            try:
                runs.append(await one.maintain_now())
            except NoTableError as exc:
                if len(found) == 1:
                    raise ConflictError(str(exc)) from None
            except Exception as exc:  # the coordinator logged it and shows it in status
                raise OperationFailedError(f"maintenance failed: {one.maintenance.error}") from exc
        if not runs:
            raise ConflictError(f"table topic {topic!r} has no table yet")
        return runs[0] if len(runs) == 1 else MaintenanceResult.total(runs)
