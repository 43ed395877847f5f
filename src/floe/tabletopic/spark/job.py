"""One commit round of a table topic: a Spark job that writes the data files, then one
Iceberg commit made by the driver that only lands if the round is still the table's
next.

**Write** (:func:`write_round`): a DataFrame of read tasks (one row per task: a piece of
a partition's offset range) and ``mapInArrow``. The tasks write their converted records
to Parquet files themselves (:func:`write_files`, :mod:`.files`) and the driver builds
Iceberg ``DataFile`` objects from their footers; for a table that needs Spark's Iceberg
writer (partitioned, sorted, not Parquet) the tasks yield the rows
(:func:`convert_tasks`) and that writer writes them. Either way the files are *staged*,
not committed: handed to Iceberg's ``FileRewriteCoordinator`` in the driver JVM under
the round's commit id (for Spark's writer, with the write option Iceberg's own
``rewrite_data_files`` uses).

**Commit** (:func:`commit_round`, in the driver, through Iceberg's Java API): one
transaction appends the staged files and writes the round's recorded state (offsets,
topic identity, counters: :meth:`~floe.tabletopic.model.TableState.record`) into the
snapshot summary and the table properties, and is committed with a compare-and-swap on
exactly the table metadata it was built on. Before building it, the driver checks that
the table's newest Floe commit is still the one the round started from; the
compare-and-swap makes that check part of the commit. A concurrent commit by anyone
makes the swap fail and the round is rebuilt on the new metadata and checked again; a
concurrent *Floe* commit (another writer generation: a coordinator restarted while this
round ran, another broker) fences the round: :class:`~floe.tabletopic.model.FencedError`,
its staged files are deleted and nothing lands. So one round's range can never be
committed twice.

Where the records come from: :func:`convert_tasks` runs in Spark's Python workers and
reads its range through the Kafka protocol: read_committed Fetch requests to the
listener of the broker leading its partition (:attr:`ReadTask.address`: this broker's
advertised listener, :attr:`JobSpec.bootstrap`, or in a cluster whose brokers share
partitions another broker's), one connection per leader per Spark task
(:func:`floe.tabletopic.spark.fetch.fetch_range`). That accounts for every offset of the
range: records, skipped control and aborted batches (each response names the aborted
transactions it overlaps; the round ends at or below the last stable offset), unusable
batches (CRC checked; bad records for the errors tolerance), and offsets
missing from the log (counted lost, reported to the driver with an accumulator). So the
workers need no access to the broker's files, only a route to its Kafka port: the same
job runs in local mode (``spark.master = local[N]``) and on a Spark standalone cluster
(``spark://host:port``) whose executors can reach every broker's advertised address.

Memory: a task reads at most its piece of a range (the coordinator cuts ranges by
records and bytes), holds one Fetch response at a time (at most
:data:`~floe.tabletopic.spark.fetch.FETCH_BYTES` of records, or one larger batch) and
converts at most :data:`BATCH_ROWS` records or :data:`BATCH_BYTES` bytes of payload at
a time.

The schema modes need the Schema Registry, which lives in the broker: :class:`JobSpec`
ships a :class:`~floe.tabletopic.schemas.RegistrySnapshot` (schema texts by id) and the
driver's decoding plan per part, so that every worker builds the same
:class:`~floe.tabletopic.convert.Converter`. A worker that meets a schema id the table
was not evolved for raises :class:`~floe.tabletopic.schemas.SchemaNotCoveredError`; the
write fails before anything is staged and the driver evolves the table and redoes it.

This module and :mod:`.session` are the only ones importing pyspark (lazily).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from floe.errors import FloeError
from floe.protocol.ranges import BadBatch, Missing, Records
from floe.protocol.records import Record
from floe.tabletopic.convert import wire
from floe.tabletopic.model import (
    COMMIT_ID_PROP,
    OFFSETS_PROP,
    UNUSABLE_BATCH,
    DeadRecord,
    FencedError,
    Gap,
    PartitionRange,
    RowsMovedError,
)
from floe.tabletopic.routes import RouteFilter, Verdict
from floe.tabletopic.schemas import (
    PartPlan,
    RegistrySnapshot,
    SchemaNotCoveredError,
    find_not_covered,
)
from floe.tabletopic.spark.fetch import BrokerConnection, FetchAccess, Source, fetch_range
from floe.tabletopic.spark.files import (
    RESULT_DDL,
    FileTarget,
    ParquetFiles,
    data_files,
    file_target,
    target_of,
)
from floe.tabletopic.upsert import DELETE_COLUMN, Upsert, mark_rows
from floe.types import PartitionId

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyspark.sql import DataFrame, SparkSession

    from floe.tabletopic.convert import Converter
    from floe.tabletopic.spark.upsert import Deletes

log = logging.getLogger("floe.tabletopic.job")

BATCH_ROWS = 20_000
"""Records per converted Arrow batch at most."""
BATCH_BYTES = 16 * 1024 * 1024
"""Key and value bytes per converted Arrow batch at most (bounds a worker's memory)."""
BAD_RECORDS_LOGGED = 10
"""Bad records logged per task (all are counted)."""
GAPS_KEPT = 32
"""Missing ranges reported to the driver per round (all are counted)."""
COMMIT_ATTEMPTS = 10
"""Commits tried when other writers' commits (compaction, ALTER TABLE...) keep moving
the table between building and swapping the round's commit."""
RETRY_WAIT_S = 0.2


class BadRecordError(FloeError):
    """A record that cannot be converted under ``errors.tolerance = none``: the round
    fails and the table stops advancing (see the coordinator) until the topic's table
    settings change. Its message starts with :attr:`MARKER` so that the driver finds it
    in Spark's error text."""

    MARKER = "[floe-bad-record] "


def _raise_known(exc: Exception) -> None:
    """Re-raise, as itself, a worker's :class:`SchemaNotCoveredError` or
    :class:`BadRecordError` quoted inside a Spark error; return for anything else."""
    text = str(exc)
    found = find_not_covered(text)
    if found is not None:
        raise SchemaNotCoveredError(*found) from None
    at = text.find(BadRecordError.MARKER)
    if at >= 0:
        line = text[at + len(BadRecordError.MARKER) :].splitlines()[0]
        raise BadRecordError(line) from None


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One task: records ``[start, end)`` of ``partition``, minus aborted transactions,
    fetched from ``address`` (the ``host:port`` of the broker leading the partition
    when the round was planned; empty: :attr:`JobSpec.bootstrap`)."""

    partition: int
    start: int
    end: int
    address: str = ""


@dataclass(frozen=True)
class JobSpec:
    """Everything a worker needs, as plain picklable data.

    Attributes:
        topic: the Kafka topic.
        bootstrap: ``host:port`` of the broker's Kafka listener the workers fetch from.
        access: how they get in on a secured listener (TLS pin, SCRAM user).
        schema: the table's Iceberg schema as loaded (field ids from the catalog).
        value / key: how each part is decoded (the driver's plan).
        flatten: ``table.topic.transform.value.type = flatten`` (or ``flatten_debezium``).
        snapshot: the registry's schemas (empty for raw and string parts).
        tolerance: ``table.topic.errors.tolerance``.
        tasks: the read tasks; row ``i`` of the job's DataFrame is task ``i``.
        dead_letter: report each skipped record (the topic has a dead-letter topic).
        upsert: the id columns and CDC field of an upsert table, else None.
        debezium: values are Debezium envelopes (``flatten_debezium``).
        route: in ``route.by = record_name`` mode, which records this table keeps
            (others are dropped uncounted; unroutable ones are bad records).
    """

    topic: str
    bootstrap: str
    schema: Schema
    value: PartPlan
    key: PartPlan
    flatten: bool
    snapshot: RegistrySnapshot
    tolerance: str
    tasks: tuple[ReadTask, ...]
    dead_letter: bool = False
    upsert: Upsert | None = None
    debezium: bool = False
    route: RouteFilter | None = None
    access: FetchAccess = field(default_factory=FetchAccess)


@dataclass(frozen=True, slots=True)
class Written:
    """What a round's Spark job did: staged files under ``set_id`` (nothing committed).

    Attributes:
        skipped: bad records skipped under the errors tolerance.
        lost: offsets of the round's ranges that were missing from the log.
        gaps: the first :data:`GAPS_KEPT` missing ranges.
        dead: the skipped records, when the spec asked for them (``dead_letter``).
        deletes: an upsert round's position deletes (None: nothing to delete).
    """

    set_id: str
    skipped: int
    lost: int
    gaps: tuple[Gap, ...]
    dead: tuple[DeadRecord, ...] = ()
    deletes: Deletes | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The snapshot a round's commit made."""

    snapshot_id: int
    timestamp_ms: int
    rows: int
    files: int


def read_tasks(
    pieces: Sequence[PartitionRange], leaders: Mapping[PartitionId, str]
) -> tuple[ReadTask, ...]:
    """The round's pieces (ranges already cut to task size) as tasks, each fetched
    from its partition's leader (absent from ``leaders``: the spec's bootstrap)."""
    return tuple(
        ReadTask(int(r.partition), int(r.start), int(r.end), leaders.get(r.partition, ""))
        for r in pieces
    )


class GapsParam:
    """Spark accumulator parameter: ``(lost offsets, first GAPS_KEPT gaps)``, merged
    from every task (Spark only calls ``zero`` and ``addInPlace``)."""

    def zero(self, value: tuple[int, tuple[Gap, ...]]) -> tuple[int, tuple[Gap, ...]]:
        return 0, ()

    def addInPlace(  # noqa: N802 - Spark's name
        self, a: tuple[int, tuple[Gap, ...]], b: tuple[int, tuple[Gap, ...]]
    ) -> tuple[int, tuple[Gap, ...]]:
        return a[0] + b[0], (a[1] + b[1])[:GAPS_KEPT]


class DeadParam:
    """Spark accumulator parameter: the skipped records of every task, for the
    dead-letter topic (a list; bad records are few, each a few bytes here)."""

    def zero(self, value: tuple[DeadRecord, ...]) -> tuple[DeadRecord, ...]:
        return ()

    def addInPlace(  # noqa: N802 - Spark's name
        self, a: tuple[DeadRecord, ...], b: tuple[DeadRecord, ...]
    ) -> tuple[DeadRecord, ...]:
        return a + b


def convert_tasks(
    batches: Iterator[pa.RecordBatch],
    *,
    spec: JobSpec,
    skipped: Any = None,
    gaps: Any = None,
    dead: Any = None,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of a round Spark's Iceberg writer writes (runs in
    Spark's Python workers): for each task index in ``batches`` (column ``id``), fetch
    its records from the broker and yield them converted to the table's row layout.
    ``skipped`` (bad records skipped), ``gaps`` (:class:`GapsParam`) and ``dead``
    (:class:`DeadParam`) are Spark accumulators.

    Raises:
        BadRecordError: a bad record or batch under ``errors.tolerance = none``.
        FetchError: the broker cannot be read (the message names its address).
    """
    converter = _converter(spec)
    target = spark_arrow_schema(converter.schema)
    if target is not None and spec.upsert is not None:
        target = target.append(pa.field(DELETE_COLUMN, pa.bool_(), nullable=False))
    for out in _converted(batches, spec, converter, skipped=skipped, gaps=gaps, dead=dead):
        yield out if target is None else out.cast(target)


def write_files(
    batches: Iterator[pa.RecordBatch],
    *,
    spec: JobSpec,
    target: FileTarget,
    set_id: str,
    skipped: Any = None,
    gaps: Any = None,
    dead: Any = None,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of a round whose tasks write their own Parquet files
    (:mod:`.files`): as :func:`convert_tasks`, but the converted batches go to files in
    ``target`` and the task yields one row per file
    (:data:`~floe.tabletopic.spark.files.RESULT_SCHEMA`). ``set_id`` is the round's
    commit id (a UUID in hex)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
    write_id = uuid.UUID(hex=set_id)  # named as Spark's writer names its files
    converter = _converter(spec)
    files = ParquetFiles(target, converter.schema, f"{attempt[0]:05d}-{attempt[1]}-{write_id}")
    try:
        for out in _converted(batches, spec, converter, skipped=skipped, gaps=gaps, dead=dead):
            files.write(out)
    except BaseException:
        files.abort()
        raise
    yield files.close()


def _converter(spec: JobSpec) -> Converter:
    from floe.tabletopic.convert import Converter
    from floe.tabletopic.schemas import part_spec

    return Converter(
        spec.schema,
        part_spec(spec.value, spec.snapshot),
        part_spec(spec.key, spec.snapshot),
        flatten=spec.flatten,
        debezium=spec.debezium,
    )


def _converted(
    batches: Iterator[pa.RecordBatch],
    spec: JobSpec,
    converter: Converter,
    *,
    skipped: Any,
    gaps: Any,
    dead: Any = None,
) -> Iterator[pa.RecordBatch]:
    """The converted records of the tasks whose indexes ``batches`` carry."""
    with contextlib.ExitStack() as connections:
        brokers: dict[str, BrokerConnection] = {}
        for batch in batches:
            for index in batch.column("id").to_pylist():
                task = spec.tasks[index]
                address = task.address or spec.bootstrap
                broker = brokers.get(address)
                if broker is None:  # one connection per leader, for all its tasks here
                    broker = BrokerConnection(address, access=spec.access)
                    brokers[address] = connections.enter_context(broker)
                counts = _Counts()
                yield from _convert_task(task, spec, converter, broker, counts)
                if counts.bad and skipped is not None:
                    skipped.add(counts.bad)
                if counts.lost and gaps is not None:
                    gaps.add((counts.lost, tuple(counts.gaps)))
                if counts.dead and dead is not None:
                    dead.add(tuple(counts.dead))


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema | None:
    """The Arrow schema Spark accepts for ``schema`` from ``mapInArrow``, or None when
    it is the same: Spark reads Iceberg ``fixed(n)`` (Arrow ``fixed_size_binary``)
    as its binary type, so those become variable-size binary (same bytes)."""

    def fix(t: pa.DataType) -> pa.DataType:
        if pa.types.is_fixed_size_binary(t):
            return pa.binary()
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(fix(f.type)) for f in t])
        if pa.types.is_map(t):
            return pa.map_(
                t.key_field.with_type(fix(t.key_type)), t.item_field.with_type(fix(t.item_type))
            )
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(fix(t.value_type)))
        return t

    fixed = pa.schema([f.with_type(fix(f.type)) for f in schema], metadata=schema.metadata)
    return None if fixed.equals(schema) else fixed


class _Counts:
    """One task's tallies: bad records skipped (and which, for the dead-letter topic),
    offsets missing and where."""

    __slots__ = ("bad", "dead", "gaps", "lost")

    def __init__(self) -> None:
        self.bad = 0
        self.lost = 0
        self.gaps: list[Gap] = []
        self.dead: list[DeadRecord] = []


def _bad(
    spec: JobSpec, counts: _Counts, where: tuple[int, int], reason: str, last: int | None = None
) -> None:
    """Account for the bad record at ``where`` (partition, offset), or the unusable
    batch from there to ``last``: stop under tolerance none, else count (and log the
    first few) and report it for the dead-letter topic when the spec asks."""
    partition, offset = where
    n = 1 if last is None else last - offset + 1
    if spec.tolerance == "none":
        raise BadRecordError(
            f"{BadRecordError.MARKER}topic {spec.topic} partition {partition} offset "
            f"{offset}: {reason} (errors.tolerance=none)"
        )
    if counts.bad < BAD_RECORDS_LOGGED:
        log.warning(
            "tabletopic.bad_record topic=%s partition=%d offset=%d records=%d reason=%s",
            spec.topic,
            partition,
            offset,
            n,
            reason,
        )
    counts.bad += n
    if spec.dead_letter:
        kind = "conversion" if last is None else UNUSABLE_BATCH
        counts.dead.append(DeadRecord(partition, offset, kind, reason, last))


def _convert_task(
    task: ReadTask, spec: JobSpec, converter: Converter, broker: Source, counts: _Counts
) -> Iterator[pa.RecordBatch]:
    """One task's Arrow batches, tallying bad records and missing offsets."""
    from floe.tabletopic.convert import TimestampKind

    pending: list[Record] = []
    kinds: list[TimestampKind] = []
    size = 0
    route = spec.route

    def flush() -> Iterator[pa.RecordBatch]:
        nonlocal size
        result = converter.convert(PartitionId(task.partition), pending, kinds)
        for error in result.errors:
            _bad(spec, counts, (error.partition, error.offset), error.reason)
        batch = result.batch
        if spec.upsert is not None:
            tombstones = [r.offset for r in pending if r.value is None]
            batch, bad = mark_rows(batch, spec.upsert, tombstones)
            for partition, offset, reason in bad:
                _bad(spec, counts, (partition, offset), reason)
        pending.clear()
        kinds.clear()
        size = 0
        if batch.num_rows:
            yield batch

    for chunk in fetch_range(broker, spec.topic, task.partition, task.start, task.end):
        if isinstance(chunk, Records):
            header = chunk.header
            kind = (
                TimestampKind.LOG_APPEND_TIME
                if header.log_append_time
                else TimestampKind.CREATE_TIME
            )
            for record in chunk.records:
                if route is not None:
                    verdict = route.verdict(record.value)
                    if verdict is Verdict.OTHER:
                        continue  # another record type's table holds it
                    if verdict is Verdict.NEW:
                        assert record.value is not None
                        raise SchemaNotCoveredError("value", int(wire.split(record.value)[0]))
                    if isinstance(verdict, str):
                        _bad(spec, counts, (task.partition, record.offset), verdict)
                        continue
                pending.append(record)
                kinds.append(kind)
                size += len(record.value or b"") + len(record.key or b"")
                if len(pending) >= BATCH_ROWS or size >= BATCH_BYTES:
                    yield from flush()
        elif isinstance(chunk, BadBatch):
            where = (task.partition, chunk.first)
            _bad(spec, counts, where, f"unusable batch: {chunk.reason}", chunk.last)
        elif isinstance(chunk, Missing):
            counts.lost += chunk.last - chunk.first + 1
            if len(counts.gaps) < GAPS_KEPT:
                counts.gaps.append(Gap(task.partition, chunk.first, chunk.last))
    if pending:
        yield from flush()


def write_round(
    spark: SparkSession,
    table_name: str,
    spec: JobSpec,
    set_id: str,
    io_properties: Mapping[str, str],
) -> Written:
    """Run the round's Spark job: the data files are written and staged under
    ``set_id`` in the driver, nothing is committed. Blocks for seconds (call it in a
    worker thread); the job belongs to Spark job group ``set_id`` (see :func:`cancel`).

    The tasks write the files themselves (:mod:`.files`) unless the table needs Spark's
    Iceberg writer (partitioned, sorted, not Parquet...). ``table_name`` is Spark's
    ``<catalog>.<namespace>.<table>``; ``io_properties`` are the Iceberg FileIO
    properties the tasks write the table's files with.

    Raises:
        SchemaNotCoveredError: a worker met a schema id the table does not hold.
        BadRecordError: a bad record under ``errors.tolerance = none``.
        Exception: any other Spark failure (py4j and pyspark errors).
    """
    sc = spark.sparkContext
    sc.setJobGroup(set_id, f"floe table topic {spec.topic}", interruptOnCancel=True)
    skipped = sc.accumulator(0)
    gaps = sc.accumulator((0, ()), GapsParam())  # type: ignore[arg-type]
    dead = sc.accumulator((), DeadParam())  # type: ignore[arg-type]
    jvm = spark._jvm
    assert jvm is not None
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, table_name
    )
    target = target_of(table, io_properties)
    deletes: Deletes | None = None
    try:
        if spec.upsert is not None:
            frame = converted(spark, table_name, spec, skipped=skipped, gaps=gaps, dead=dead)
            deletes = _write_upsert(
                spark,
                table,
                table_name,
                frame,
                upsert=spec.upsert,
                set_id=set_id,
                target=file_target(table, io_properties),
            )
        elif target is None:
            frame = converted(spark, table_name, spec, skipped=skipped, gaps=gaps, dead=dead)
            frame.writeTo(table_name).option("rewritten-file-scan-task-set-id", set_id).append()
        else:
            write = functools.partial(
                write_files,
                spec=spec,
                target=target,
                set_id=set_id,
                skipped=skipped,
                gaps=gaps,
                dead=dead,
            )
            rows = task_rows(spark, spec).mapInArrow(write, RESULT_DDL).collect()
            written = data_files(table, jvm, ((r.path, r.size, r.rows) for r in rows))
            jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get().stageRewrite(
                table, set_id, written
            )
    except Exception as exc:
        _raise_known(exc)
        raise
    lost, found = gaps.value
    # a retried task's records once, in log order
    values: tuple[DeadRecord, ...] = dead.value
    reported = {(d.partition, d.offset): d for d in values}
    ordered = tuple(reported[k] for k in sorted(reported))
    return Written(set_id, int(skipped.value), int(lost), tuple(found), ordered, deletes)


def task_rows(spark: SparkSession, spec: JobSpec) -> DataFrame:
    """One row per read task of ``spec`` (column ``id``: its index), a task per row."""
    return spark.range(0, len(spec.tasks), 1, numPartitions=max(1, len(spec.tasks)))


def converted(
    spark: SparkSession, table_name: str, spec: JobSpec, **accumulators: Any
) -> DataFrame:
    """The records of ``spec``'s read tasks converted (:func:`convert_tasks`, with its
    ``accumulators``), in the table's current columns plus the delete marker of an upsert
    table; evaluated lazily, nothing written."""
    schema = spark.table(table_name).schema
    if spec.upsert is not None:
        schema = with_delete_column(schema)
    convert = functools.partial(convert_tasks, spec=spec, **accumulators)
    return task_rows(spark, spec).mapInArrow(convert, schema)


def with_delete_column(schema: Any) -> Any:
    from pyspark.sql.types import BooleanType, StructField, StructType

    return StructType([*schema.fields, StructField(DELETE_COLUMN, BooleanType(), False)])


def _write_upsert(
    spark: SparkSession,
    table: Any,
    table_name: str,
    rows: Any,
    *,
    upsert: Upsert,
    set_id: str,
    target: FileTarget,
) -> Deletes | None:
    """An upsert round's writes (:mod:`.upsert`): the winners' data files staged under
    ``set_id`` as any round's; the position deletes of the rows they replace written
    and returned for the commit (None: the table had no such row)."""
    from pyspark import StorageLevel

    from floe.tabletopic.spark import upsert as up

    jvm = spark._jvm
    winners = up.latest(rows, upsert).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        winners.count()  # converts once: the accumulators count each record once
        deletes = None
        base = table.currentSnapshot()
        if base is not None:
            base_id = int(base.snapshotId())
            written = (
                up.replaced_positions(spark, table_name, base_id, winners, upsert)
                .repartition("_file")
                .sortWithinPartitions("_file", "_pos")
                .mapInArrow(
                    functools.partial(up.write_position_deletes, target=target, set_id=set_id),
                    up.DELETES_RESULT_DDL,
                )
                .collect()
            )
            if written:
                deletes = up.delete_files(
                    table, jvm, ((r.path, r.size, r.rows, r.data_file) for r in written), base_id
                )
        up.data_rows(winners, upsert).writeTo(table_name).option(
            "rewritten-file-scan-task-set-id", set_id
        ).append()
        return deletes
    finally:
        winners.unpersist()


def cancel(spark: SparkSession, set_id: str) -> None:
    """Cancel the Spark jobs of the round staging under ``set_id`` (if still running)."""
    spark.sparkContext.cancelJobGroup(set_id)


def commit_round(
    spark: SparkSession,
    table_name: str,
    set_id: str | None,
    *,
    expected: str | None,
    record: Mapping[str, str],
    deletes: Deletes | None = None,
) -> Committed:
    """Commit the files staged under ``set_id`` (none: a commit of ``record`` alone)
    with ``record`` in the snapshot summary and the table properties, if and only if
    the table's newest Floe commit is still ``expected`` when the commit lands. An
    upsert round's ``deletes`` land in the same commit (a row delta), if and only if
    every data file they refer to is still in the table.

    Raises:
        FencedError: the table's newest Floe commit is not ``expected`` (the staged
            files are deleted; nothing landed).
        RowsMovedError: a data file the deletes refer to is gone (as for FencedError).
        Exception: any other Iceberg failure (py4j errors); for an unknown commit state
            the caller re-reads the table before planning again.
    """
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    assert jvm is not None
    staging = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, table_name
    )
    files = list(staging.fetchNewFiles(table, set_id)) if set_id is not None else []
    try:
        for attempt in range(COMMIT_ATTEMPTS):
            if attempt:
                time.sleep(RETRY_WAIT_S * attempt)
                table.refresh()
            txn = table.newTransaction()
            base = txn.startMetadata()
            found = _newest_commit_id(base)
            if found != expected:
                raise FencedError(
                    f"table {table_name}: the newest Floe commit is {found}, the round "
                    f"started from {expected}: another writer committed meanwhile"
                )
            update = _new_update(txn, jvm, files, deletes)
            for name, value in record.items():
                update.set(name, value)
            try:
                update.commit()  # into the transaction; one pending update at a time
            except Py4JJavaError as exc:
                if _java_class(exc) != "org.apache.iceberg.exceptions.ValidationException":
                    raise
                raise RowsMovedError(
                    f"table {table_name}: {_one_line(exc)} (a data file the round's "
                    "deletes refer to was rewritten meanwhile)"
                ) from None
            properties = txn.updateProperties()
            for name, value in record.items():
                properties.set(name, value)
            properties.commit()
            try:
                # the swap succeeds only if the table is still exactly `base`
                txn.underlyingOps().commit(base, txn.currentMetadata())
            except Py4JJavaError as exc:
                if _java_class(exc) != "org.apache.iceberg.exceptions.CommitFailedException":
                    raise
                log.info(
                    "tabletopic.commit_conflict table=%s attempt=%d (the table moved; "
                    "rebuilding the commit)",
                    table_name,
                    attempt + 1,
                )
                continue
            snapshot = txn.currentMetadata().currentSnapshot()
            summary = snapshot.summary()
            return Committed(
                snapshot_id=int(snapshot.snapshotId()),
                timestamp_ms=int(snapshot.timestampMillis()),
                rows=int(summary.get("added-records") or 0),
                files=int(summary.get("added-data-files") or 0),
            )
        raise RuntimeError(
            f"table {table_name}: {COMMIT_ATTEMPTS} commits in a row lost the race "
            "against other writers"
        )
    except FencedError:  # RowsMovedError too
        io = table.io()
        for data_file in files:
            io.deleteFile(data_file.location())
        for delete_file in deletes.files if deletes is not None else ():
            io.deleteFile(delete_file.location())
        raise
    finally:
        if set_id is not None:
            staging.clearRewrite(table, set_id)


def _new_update(txn: Any, jvm: Any, files: list[Any], deletes: Deletes | None) -> Any:
    """The round's snapshot update in ``txn``: an append, or with deletes a row delta
    checked against the files they refer to."""
    if deletes is None:
        append = txn.newAppend()
        for data_file in files:
            append.appendFile(data_file)
        return append
    delta = txn.newRowDelta()
    for data_file in files:
        delta.addRows(data_file)
    for delete_file in deletes.files:
        delta.addDeletes(delete_file)
    referenced = jvm.java.util.ArrayList()
    for path in deletes.referenced:
        referenced.add(path)
    return (
        delta.validateFromSnapshot(deletes.base_snapshot)
        .validateDataFilesExist(referenced)
        .validateDeletedFiles()
    )


def _one_line(exc: Any) -> str:
    message = exc.java_exception.getMessage()
    return str(message).splitlines()[0] if message is not None else type(exc).__name__


def _java_class(exc: Any) -> str:
    return str(exc.java_exception.getClass().getName())


def _newest_commit_id(metadata: Any) -> str | None:
    """The newest Floe commit id of Java ``TableMetadata``: its table property, else
    (a table written before Floe kept it there) the newest snapshot summary carrying
    offsets, as :meth:`floe.tabletopic.model.Recorded.read` finds it."""
    properties = metadata.properties()
    if properties.containsKey(OFFSETS_PROP):
        value = properties.get(COMMIT_ID_PROP)
        return None if value is None else str(value)
    snapshot = metadata.currentSnapshot()
    while snapshot is not None:
        summary = snapshot.summary()
        if summary.containsKey(OFFSETS_PROP):
            value = summary.get(COMMIT_ID_PROP)
            return None if value is None else str(value)
        parent = snapshot.parentId()
        snapshot = None if parent is None else metadata.snapshot(parent)
    return None
