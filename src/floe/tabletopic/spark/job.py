"""One commit round of a table topic as one Spark job, ending in one Iceberg commit.

The job is a DataFrame of read tasks (one row per task: a partition's offset range, large
ranges split), ``mapInArrow`` with :func:`convert_tasks`, and one
``writeTo(table).append()`` carrying the round's commit id and per-partition committed
ends as snapshot-summary properties. Spark writes the Parquet files in its tasks and
makes exactly one Iceberg commit when the write succeeds; if anything fails before, the
table is unchanged (the files already written are orphans for Iceberg's orphan-file
cleanup) and the round is simply run again.

Where the records come from: :func:`convert_tasks` runs in Spark's Python workers and
reads the partition's segment files directly (:mod:`floe.storage.local.reader`). That
works in local mode (``spark.master = local[N]``), where the workers share the broker's
file system. On a cluster the executors need the data dir on shared storage (the same
path), or a Kafka-protocol reader (a later step; the task rows then carry the bootstrap
address instead of a path).

The schema modes need the Schema Registry, which lives in the broker: :class:`JobSpec`
ships a :class:`~floe.tabletopic.schemas.RegistrySnapshot` (schema texts by id) and the
driver's decoding plan per part, so that every worker builds the same
:class:`~floe.tabletopic.convert.Converter` without reaching the broker. A worker that
meets a schema id the table was not evolved for raises
:class:`~floe.tabletopic.schemas.SchemaNotCoveredError`; the job fails before its commit
and :func:`run_round` re-raises it on the driver, which evolves the table and redoes the
round.

This module and :mod:`.session` are the only ones importing pyspark (lazily).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from floe.errors import FloeError
from floe.protocol.records import Record
from floe.storage.local.reader import Aborted, read_range
from floe.tabletopic.model import PartitionRange
from floe.tabletopic.schemas import (
    PartPlan,
    RegistrySnapshot,
    SchemaNotCoveredError,
    find_not_covered,
)
from floe.types import PartitionId

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyspark.sql import SparkSession

    from floe.tabletopic.convert import Converter

log = logging.getLogger("floe.tabletopic.job")

MAX_TASK_RECORDS = 250_000
"""Offsets per read task: a larger range is split so that partitions spread over cores."""
BATCH_ROWS = 20_000
"""Records per converted Arrow batch (bounds a worker's memory)."""
BAD_RECORDS_LOGGED = 10
"""Bad records logged per task (all are counted)."""


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
    """One task: records ``[start, end)`` of ``partition``, minus aborted transactions."""

    partition: int
    start: int
    end: int
    aborted: tuple[Aborted, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """Everything a worker needs, as plain picklable data.

    Attributes:
        topic: the Kafka topic (the name of its log directories).
        logs_dir: the broker's ``<data.dir>/logs`` (same path on every worker).
        schema: the table's Iceberg schema as loaded (field ids from the catalog).
        value / key: how each part is decoded (the driver's plan).
        flatten: ``table.topic.transform.value.type = flatten``.
        snapshot: the registry's schemas (empty for raw and string parts).
        tolerance: ``table.topic.errors.tolerance``.
        tasks: the read tasks; row ``i`` of the job's DataFrame is task ``i``.
    """

    topic: str
    logs_dir: str
    schema: Schema
    value: PartPlan
    key: PartPlan
    flatten: bool
    snapshot: RegistrySnapshot
    tolerance: str
    tasks: tuple[ReadTask, ...]


def read_tasks(
    ranges: Sequence[PartitionRange],
    aborted: Mapping[PartitionId, Sequence[Aborted]],
    max_records: int = MAX_TASK_RECORDS,
) -> tuple[ReadTask, ...]:
    """The round's ranges as tasks (split at ``max_records``), each with the aborted
    transactions of its partition that overlap it."""
    out = []
    for r in ranges:
        for piece in r.split(max_records):
            overlapping = tuple(
                a
                for a in aborted.get(r.partition, ())
                if a.last >= piece.start and a.first < piece.end
            )
            out.append(ReadTask(int(r.partition), int(piece.start), int(piece.end), overlapping))
    return tuple(out)


def convert_tasks(
    batches: Iterator[pa.RecordBatch], *, spec: JobSpec, skipped: Any = None
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function (runs in Spark's Python workers): for each task index
    in ``batches`` (column ``id``), read its records from the segment files and yield
    them converted to the table's row layout. ``skipped`` is a Spark accumulator
    counting bad records skipped by the errors tolerance.

    Raises:
        BadRecordError: a bad record under ``errors.tolerance = none``.
    """
    from floe.tabletopic.convert import Converter
    from floe.tabletopic.schemas import part_spec

    converter = Converter(
        spec.schema,
        part_spec(spec.value, spec.snapshot),
        part_spec(spec.key, spec.snapshot),
        flatten=spec.flatten,
    )
    target = spark_arrow_schema(converter.schema)
    logs_dir = Path(spec.logs_dir)
    for batch in batches:
        for index in batch.column("id").to_pylist():
            counter = [0]
            for out in _convert_task(spec.tasks[index], spec, converter, logs_dir, counter):
                yield out if target is None else out.cast(target)
            if counter[0] and skipped is not None:
                skipped.add(counter[0])


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


def _convert_task(
    task: ReadTask, spec: JobSpec, converter: Converter, logs_dir: Path, bad: list[int]
) -> Iterator[pa.RecordBatch]:
    """One task's Arrow batches; ``bad[0]`` counts the records skipped."""
    from floe.tabletopic.convert import TimestampKind

    pending: list[Record] = []
    kinds: list[TimestampKind] = []

    def flush() -> Iterator[pa.RecordBatch]:
        result = converter.convert(PartitionId(task.partition), pending, kinds)
        for error in result.errors:
            if spec.tolerance == "none":
                raise BadRecordError(
                    f"{BadRecordError.MARKER}topic {spec.topic} partition {error.partition} offset "
                    f"{error.offset}: {error.reason} (errors.tolerance=none)"
                )
            if bad[0] < BAD_RECORDS_LOGGED:
                log.warning(
                    "tabletopic.bad_record topic=%s partition=%d offset=%d reason=%s",
                    spec.topic,
                    error.partition,
                    error.offset,
                    error.reason,
                )
            bad[0] += 1
        pending.clear()
        kinds.clear()
        if result.batch.num_rows:
            yield result.batch

    for header, records in read_range(
        logs_dir, spec.topic, task.partition, task.start, task.end, aborted=task.aborted
    ):
        kind = (
            TimestampKind.LOG_APPEND_TIME if header.log_append_time else TimestampKind.CREATE_TIME
        )
        pending.extend(records)
        kinds.extend([kind] * len(records))
        if len(pending) >= BATCH_ROWS:
            yield from flush()
    if pending:
        yield from flush()


def run_round(
    spark: SparkSession, table_name: str, spec: JobSpec, properties: Mapping[str, str]
) -> int:
    """Run the round's job and make its one Iceberg commit; returns the bad records
    skipped. Blocks for seconds: call it in a worker thread.

    ``table_name`` is Spark's ``<catalog>.<namespace>.<table>``; ``properties`` go into
    the snapshot summary (``snapshot-property.<name>``).

    Raises:
        SchemaNotCoveredError: a worker met a schema id the table does not hold.
        BadRecordError: a bad record under ``errors.tolerance = none``.
        Exception: any other Spark or Iceberg failure (py4j and pyspark errors); then
            nothing was committed, unless the commit itself failed with an unknown state
            (the caller re-reads the committed offsets from the table before retrying).
    """
    skipped = spark.sparkContext.accumulator(0)
    tasks = spark.range(0, len(spec.tasks), 1, numPartitions=max(1, len(spec.tasks)))
    out_schema = spark.table(table_name).schema
    frame = tasks.mapInArrow(
        functools.partial(convert_tasks, spec=spec, skipped=skipped), out_schema
    )
    writer = frame.writeTo(table_name)
    for name, value in properties.items():
        writer = writer.option(f"snapshot-property.{name}", value)
    try:
        writer.append()
    except Exception as exc:
        _raise_known(exc)
        raise
    return int(skipped.value)
