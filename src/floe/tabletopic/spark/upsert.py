"""The Spark side of an upsert round (:mod:`floe.tabletopic.upsert` says what a round
does): the last record per id, the position deletes of the rows they replace, and the
Iceberg ``DeleteFile`` objects the driver commits with the round's data files.

Why position deletes, not equality deletes: every reader applies them (pyiceberg and
DuckDB read no equality deletes), and a read never joins on the id columns; the round
pays for it by reading the id columns of the table at its base snapshot. Compaction
(``table.topic.maintenance.*``) folds the deletes into rewritten data files.

The delete files are written by the Spark tasks with pyarrow (a file per data file it
deletes from, sorted by position: Iceberg's file-scoped position deletes), named like
the round's data files, and built into ``DeleteFile`` objects by the driver from their
footers, with the spec and partition of the data file they refer to.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from floe.tabletopic.convert.layout import FIELD_ID, METADATA_COLUMN
from floe.tabletopic.spark.files import FileTarget, ParquetFiles
from floe.tabletopic.upsert import DELETE_COLUMN, Upsert

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

POSITION_DELETE_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), nullable=False, metadata={FIELD_ID: b"2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={FIELD_ID: b"2147483545"}),
    ]
)
"""A position delete file's columns, with Iceberg's reserved field ids."""
DELETES_RESULT_DDL = "path string, size long, rows long, data_file string"
_RESULT_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("rows", pa.int64()),
        ("data_file", pa.string()),
    ]
)


@dataclass(frozen=True)
class Deletes:
    """An upsert round's position deletes, for the commit (Java objects, in the driver).

    Attributes:
        files: Java ``List<DeleteFile>``.
        referenced: the data files they delete from (the commit checks they still
            exist: a compaction that rewrote one makes the round redo).
        base_snapshot: the snapshot the deleted positions were read at.
        rows: rows deleted.
    """

    files: Any
    referenced: tuple[str, ...]
    base_snapshot: int
    rows: int


def id_aliases(upsert: Upsert) -> list[str]:
    return [f"_floe_id{i}" for i in range(len(upsert.id_columns))]


def column_path(column: str) -> str:
    return ".".join(f"`{name}`" for name in column.split("."))


def latest(frame: DataFrame, upsert: Upsert) -> DataFrame:
    """One row per id: the highest offset of each partition, then the latest timestamp
    (then the highest partition) among partitions; :data:`DELETE_COLUMN` kept."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

    ids = id_aliases(upsert)
    keyed = frame.select(
        "*", *[F.col(column_path(c)).alias(a) for c, a in zip(upsert.id_columns, ids, strict=True)]
    )
    partition = F.col(f"{METADATA_COLUMN}.partition")
    in_partition = Window.partitionBy(*ids, partition).orderBy(
        F.col(f"{METADATA_COLUMN}.offset").desc()
    )
    across = Window.partitionBy(*ids).orderBy(
        F.col(f"{METADATA_COLUMN}.timestamp").desc_nulls_last(), partition.desc()
    )
    last = keyed.withColumn("_floe_rank", F.row_number().over(in_partition)).where("_floe_rank = 1")
    return (
        last.withColumn("_floe_rank", F.row_number().over(across))
        .where("_floe_rank = 1")
        .drop("_floe_rank")
    )


def replaced_positions(
    spark: SparkSession, table_name: str, snapshot_id: int, winners: DataFrame, upsert: Upsert
) -> DataFrame:
    """``(_file, _pos)`` of the table's live rows at ``snapshot_id`` whose ids are
    among ``winners``' (a frame from :func:`latest`)."""
    ids = id_aliases(upsert)
    selected = ", ".join(
        f"{column_path(c)} AS {a}" for c, a in zip(upsert.id_columns, ids, strict=True)
    )
    live = spark.sql(
        f"SELECT _file, _pos, {selected} FROM {table_name} VERSION AS OF {snapshot_id}"
    )
    return live.join(winners.select(*ids), on=ids, how="left_semi").select("_file", "_pos")


def data_rows(winners: DataFrame, upsert: Upsert) -> DataFrame:
    """The winners that are not deletes, in the table's columns."""
    return winners.where(f"NOT {DELETE_COLUMN}").drop(DELETE_COLUMN, *id_aliases(upsert))


def write_position_deletes(
    batches: Iterator[pa.RecordBatch], *, target: FileTarget, set_id: str
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function writing a task's position deletes (rows of
    ``_file, _pos`` sorted by both): one file per data file, one result row
    (:data:`DELETES_RESULT_DDL`) per file written. Runs in Spark's Python workers."""
    import uuid

    from pyspark import TaskContext

    context = TaskContext.get()
    task, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
    write_id = uuid.UUID(hex=set_id)
    received = list(batches)
    if not received:  # an empty shuffle partition: no data file of this round is its
        return
    rows = pa.Table.from_batches(received).combine_chunks()
    if not rows.num_rows:
        return
    results: list[tuple[str, int, int, str]] = []
    paths = rows.column("_file").to_pylist()
    start = 0
    for end in range(1, len(paths) + 1):
        if end < len(paths) and paths[end] == paths[start]:
            continue
        files = ParquetFiles(
            target, POSITION_DELETE_SCHEMA, f"{task:05d}-{attempt}-{write_id}-deletes-{start}"
        )
        piece = rows.slice(start, end - start)
        batch = pa.RecordBatch.from_arrays(
            [piece.column("_file").combine_chunks(), piece.column("_pos").combine_chunks()],
            schema=POSITION_DELETE_SCHEMA,
        )
        try:
            files.write(batch)
            written = files.close()
        except BaseException:
            files.abort()
            raise
        for path, size, count in zip(
            *(written.column(i).to_pylist() for i in range(3)), strict=True
        ):
            results.append((path, size, count, paths[start]))
        start = end
    yield pa.RecordBatch.from_arrays(
        [
            pa.array(list(col), t.type)
            for col, t in zip(zip(*results, strict=True), _RESULT_SCHEMA, strict=True)
        ],
        schema=_RESULT_SCHEMA,
    )


def delete_files(
    table: Any, jvm: Any, written: Iterable[tuple[str, int, int, str]], snapshot_id: int
) -> Deletes:
    """The Java ``DeleteFile`` objects of the written delete files (in the driver), each
    in the spec and partition of the data file it deletes from, with the metrics Iceberg
    reads from its footer."""
    written = list(written)
    referenced = sorted({data_file for *_, data_file in written})
    where = _data_file_partitions(table, snapshot_id, set(referenced))
    config = jvm.org.apache.iceberg.MetricsConfig.forPositionDelete(table)
    util = jvm.org.apache.iceberg.parquet.ParquetUtil
    io = table.io()
    specs = table.specs()
    out = jvm.java.util.ArrayList()
    rows = 0
    for path, size, count, data_file in written:
        metrics = util.fileMetrics(io.newInputFile(path), config)
        spec_id, partition = where[data_file]
        builder = (
            jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(specs.get(spec_id))
            .ofPositionDeletes()
            .withPath(path)
            .withFormat("PARQUET")
            .withFileSizeInBytes(size)
            .withMetrics(metrics)
            .withReferencedDataFile(data_file)
        )
        if partition is not None:
            builder = builder.withPartition(partition)
        out.add(builder.build())
        rows += count
    return Deletes(out, tuple(referenced), snapshot_id, rows)


def _data_file_partitions(
    table: Any, snapshot_id: int, paths: set[str]
) -> dict[str, tuple[int, Any]]:
    """Spec id and partition (None: unpartitioned) of each data file in ``paths``, as
    the snapshot lists them. Only a table with a partitioned spec is scanned."""
    specs = table.specs()
    if all(specs.get(s).isUnpartitioned() for s in specs.keySet()):
        unpartitioned = int(table.spec().specId())
        return {p: (unpartitioned, None) for p in paths}
    found: dict[str, tuple[int, Any]] = {}
    tasks = table.newScan().useSnapshot(snapshot_id).planFiles()
    try:
        it = tasks.iterator()
        while len(found) < len(paths) and it.hasNext():
            data_file = it.next().file()
            location = str(data_file.location())
            if location in paths:
                spec_id = int(data_file.specId())
                unpartitioned = specs.get(spec_id).isUnpartitioned()
                found[location] = (spec_id, None if unpartitioned else data_file.partition())
    finally:
        tasks.close()
    missing = paths - found.keys()
    if missing:
        raise RuntimeError(f"data files not in snapshot {snapshot_id}: {sorted(missing)[:3]}")
    return found
