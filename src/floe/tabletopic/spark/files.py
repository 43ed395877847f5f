"""A round's data files written by the Spark tasks themselves, with pyarrow, and handed
to the driver's Iceberg commit as Iceberg ``DataFile`` objects.

Why: once the records are decoded natively, Spark's Iceberg writer is the round's
slowest stage (Arrow batches become JVM rows, then Parquet pages). The same tasks
writing the converter's Arrow batches straight to Parquet wrote a million clickstream
rows ~2.7 times faster on two cores (docs/table-topics.md, "How a round writes its
files"). The pipeline stays a Spark job: Spark schedules the tasks, the tasks write the
files, the driver commits them with Iceberg's Java API.

The files are good Iceberg citizens: every column carries its Iceberg field id
(``PARQUET:field_id``, from :func:`floe.tabletopic.convert.layout.arrow_schema`), the
driver reads each file's footer with Iceberg's own ``ParquetUtil.fileMetrics`` under
the table's metrics config (value counts, null counts, lower/upper bounds, as Spark's
writer records them), files roll over at ``write.target-file-size-bytes``, and the
table's Parquet compression codec and level apply.

Tables this writer does not handle, which Spark's Iceberg writer still writes
(:func:`target_of` returns None): partitioned or sorted tables, a default file format
other than Parquet, ``write.object-storage.enabled``, and codecs pyarrow has no exact
equivalent of.

Files are named ``<task>-<attempt>-<round commit id as a UUID>-<n>.parquet`` in the
table's data location, as Spark's writer names its own: a failed or speculative task
attempt leaves files no commit refers to, which Iceberg's orphan-file removal deletes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

PARQUET = "parquet"
CODECS = {"zstd": "zstd", "gzip": "gzip", "snappy": "snappy", "uncompressed": "none"}
"""Iceberg's ``write.parquet.compression-codec`` values pyarrow writes the same way."""
DEFAULT_CODEC = "zstd"  # Iceberg's default since 1.4
DEFAULT_TARGET_BYTES = 512 * 1024 * 1024  # write.target-file-size-bytes
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024  # write.parquet.row-group-size-bytes
ROW_GROUP_ARROW_BYTES_MAX = 64 * 1024 * 1024
"""Arrow bytes a task buffers before writing them as one row group, at most (a row
group per converted batch would make thousands of tiny ones; buffering the table's
whole row-group size would cost each Python worker that much memory)."""
RESULT_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64())])
"""What each task returns to the driver: one row per file it wrote."""
RESULT_DDL = "path string, size long, rows long"


@dataclass(frozen=True, slots=True)
class FileTarget:
    """Where and how the tasks write a table's data files (plain, picklable data).

    Attributes:
        directory: the table's data location (``.../data``), no trailing slash.
        compression: the pyarrow codec name.
        compression_level: the codec level, None for the codec's default.
        target_bytes: a file is closed once it reaches this size.
        row_group_bytes: Arrow bytes buffered per row group.
        io_properties: Iceberg FileIO properties (S3 endpoint, credentials).
    """

    directory: str
    compression: str
    compression_level: int | None
    target_bytes: int
    row_group_bytes: int
    io_properties: Mapping[str, str]


def target_of(table: Any, io_properties: Mapping[str, str]) -> FileTarget | None:
    """The :class:`FileTarget` of a Java Iceberg ``Table`` (through py4j, in the driver),
    or None when Spark's Iceberg writer must write its files (see the module doc)."""
    props = table.properties()
    codec = CODECS.get(_prop(props, "write.parquet.compression-codec", DEFAULT_CODEC).lower())
    if (
        not table.spec().isUnpartitioned()
        or not table.sortOrder().isUnsorted()
        or _prop(props, "write.format.default", PARQUET).lower() != PARQUET
        or _prop(props, "write.object-storage.enabled", "false").lower() == "true"
        or codec is None
    ):
        return None
    return file_target(table, io_properties)


def file_target(table: Any, io_properties: Mapping[str, str]) -> FileTarget:
    """Where and how the tasks write Parquet files of a Java Iceberg ``Table`` whatever
    its spec: its data location (a partitioned table's files still go to
    ``.../data``), its codec (Iceberg's default where pyarrow has no equivalent)."""
    props = table.properties()
    codec = CODECS.get(_prop(props, "write.parquet.compression-codec", DEFAULT_CODEC).lower())
    probe = "f.parquet"
    location = str(table.locationProvider().newDataLocation(probe))
    level = _prop(props, "write.parquet.compression-level", "")
    return FileTarget(
        directory=location[: -len(probe)].rstrip("/"),
        compression=codec or CODECS[DEFAULT_CODEC],
        compression_level=int(level) if level and codec else None,
        target_bytes=int(_prop(props, "write.target-file-size-bytes", str(DEFAULT_TARGET_BYTES))),
        row_group_bytes=min(
            int(_prop(props, "write.parquet.row-group-size-bytes", str(DEFAULT_ROW_GROUP_BYTES))),
            ROW_GROUP_ARROW_BYTES_MAX,
        ),
        io_properties=dict(io_properties),
    )


def _prop(props: Any, name: str, default: str) -> str:
    value = props.get(name)
    return default if value is None else str(value)


class ParquetFiles:
    """One task's data files: :meth:`write` buffers Arrow batches into row groups and
    rolls files at the target size; :meth:`close` returns the files as
    :data:`RESULT_SCHEMA` rows. Runs in Spark's Python workers."""

    def __init__(self, target: FileTarget, schema: pa.Schema, name_prefix: str) -> None:
        from pyiceberg.io import load_file_io

        self._target = target
        self._schema = schema
        self._prefix = name_prefix
        self._io = load_file_io(dict(target.io_properties), target.directory)
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._writer: Any = None
        self._sink: Any = None
        self._path = ""
        self._rows = 0
        self._done: list[tuple[str, int, int]] = []

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes >= self._target.row_group_bytes:
            self._flush()

    def close(self) -> pa.RecordBatch:
        """Write what is buffered, close the open file; the files written, as rows."""
        self._flush()
        self._finish()
        paths, sizes, rows = zip(*self._done, strict=True) if self._done else ((), (), ())
        return pa.RecordBatch.from_arrays(
            [pa.array(paths, pa.string()), pa.array(sizes, pa.int64()), pa.array(rows, pa.int64())],
            schema=RESULT_SCHEMA,
        )

    def abort(self) -> None:
        """Close the open file without reporting it (a failed task: no commit refers to
        its files)."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None

    def _flush(self) -> None:
        import pyarrow.parquet as pq

        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        self._pending.clear()
        self._pending_bytes = 0
        if self._writer is None:
            self._path = f"{self._target.directory}/{self._prefix}-{len(self._done):05d}.parquet"
            self._sink = self._io.new_output(self._path).create(overwrite=False)
            self._writer = pq.ParquetWriter(
                self._sink,
                self._schema,
                compression=self._target.compression,
                compression_level=self._target.compression_level,
                store_schema=False,
            )
            self._rows = 0
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._rows += table.num_rows
        if self._sink.tell() >= self._target.target_bytes:
            self._finish()

    def _finish(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        size = self._sink.tell()
        self._sink.close()
        self._writer = None
        self._done.append((self._path, size, self._rows))


def data_files(table: Any, jvm: Any, written: Iterable[tuple[str, int, int]]) -> Any:
    """The Java ``Set<DataFile>`` of the files the tasks wrote, each with the metrics
    Iceberg reads from its footer under the table's metrics config (in the driver)."""
    config = jvm.org.apache.iceberg.MetricsConfig.forTable(table)
    util = jvm.org.apache.iceberg.parquet.ParquetUtil
    out = jvm.java.util.HashSet()
    io = table.io()
    for path, size, rows in written:
        metrics = util.fileMetrics(io.newInputFile(path), config)
        if int(metrics.recordCount()) != rows:
            found = metrics.recordCount()
            raise RuntimeError(f"{path}: its footer counts {found} rows, its task wrote {rows}")
        out.add(
            jvm.org.apache.iceberg.DataFiles.builder(table.spec())
            .withPath(path)
            .withFormat("PARQUET")
            .withFileSizeInBytes(size)
            .withMetrics(metrics)
            .build()
        )
    return out
