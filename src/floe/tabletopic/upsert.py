"""Upsert and CDC table topics (``table.topic.id.columns`` with ``upsert.enable`` or
``cdc.field``): what each converted record does to the row its id columns name.

A round of an upsert table (:mod:`floe.tabletopic.spark.upsert` runs it on Spark):

1. the tasks convert their records as for any table and mark each row
   (:func:`mark_rows`): :data:`DELETE_COLUMN` is true for a tombstone (a null value)
   and for a record whose ``cdc.field`` starts with ``D``/``d``; a row with a null id
   column is a bad record (errors tolerance, dead-letter topic);
2. per id, the last record wins: the highest offset within a partition, then (the same
   id in several partitions of one round) the latest timestamp;
3. the table's live rows with those ids, read at the snapshot the round builds on, get
   position deletes; the winners that are not deletes are appended; both land in one
   Iceberg commit with the round's offsets (exactly once, as any round).

Iceberg's rules for identifier fields hold for the id columns (:func:`check_columns`):
primitive, not floating point, reached through structs only.

``id.columns=[_from_debezium_key_]`` is resolved at each round to the field names of
the key's record schema (:func:`debezium_key_columns`: Debezium keys are a record of the
primary-key columns), which must be columns of the table; a tombstone then takes its id
columns from the key (``Upsert.from_key``), so Debezium's tombstone after a delete
deletes (again) instead of being a record with a null id.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from floe.errors import FloeError
from floe.tabletopic.columns import ColumnPathError, field_at
from floe.tabletopic.convert.layout import KEY_COLUMN, METADATA_COLUMN

if TYPE_CHECKING:
    from pyiceberg.schema import Schema

    from floe.tabletopic.schemas import PartPlan, RegistrySnapshot

DELETE_COLUMN = "_floe_delete"
"""The column the tasks add to an upsert round's rows: true deletes the id's row."""


class UpsertSpecError(FloeError):
    """The id columns or the CDC field do not fit the table: the message says which
    and why, in one line."""


@dataclass(frozen=True, slots=True)
class Upsert:
    """How an upsert round identifies rows and finds deletes (plain, picklable data).

    Attributes:
        id_columns: dotted column paths.
        cdc_field: the column whose first letter is the operation; empty for none.
        from_key: the id columns are top-level columns named like fields of the
            ``_kafka_key`` struct, and a tombstone's ids are read from the key
            (``[_from_debezium_key_]``).
    """

    id_columns: tuple[str, ...]
    cdc_field: str = ""
    from_key: bool = False


def debezium_key_columns(
    schema: Schema, key: PartPlan, snapshot: RegistrySnapshot, candidates: Sequence[int] = ()
) -> tuple[str, ...]:
    """The id columns ``[_from_debezium_key_]`` names: the field names of the key's
    record schema, each a column of the table. The schema is the ``by_latest_schema``
    one, or the newest of ``candidates`` (the part's candidate ids, the subject's
    versions oldest first, :func:`floe.tabletopic.schemas.candidate_ids`) the table
    holds: the newest *version*, not the highest id (an id is shared by every subject
    that registered the same text, so an older one may come back as a new version).

    Raises:
        UpsertSpecError: the key is not schema-decoded, has no usable schema yet, its
            schema is not a record, or a field of it is not a column of the table.
    """
    from floe.registry.core.errors import InvalidSchemaError
    from floe.tabletopic.convert import ConvertType, UnsupportedSchemaError, codec_for
    from floe.tabletopic.convert.source import SourceStruct

    what = "id.columns [_from_debezium_key_]"
    if key.convert is ConvertType.BY_LATEST_SCHEMA:
        schema_id = key.latest if key.latest not in key.refused else None
    elif key.convert is ConvertType.BY_SCHEMA_ID:
        newest = [i for i in candidates if i in key.covered]
        schema_id = newest[-1] if newest else max(key.covered, default=None)
    else:
        raise UpsertSpecError(f"{what}: the key is {key.convert}, not decoded with a schema")
    if schema_id is None:
        raise UpsertSpecError(f"{what}: no key schema the table holds is registered yet")
    try:
        source = codec_for(snapshot.parse(schema_id), key.message_name).source
    except (KeyError, InvalidSchemaError, UnsupportedSchemaError) as exc:
        raise UpsertSpecError(f"{what}: key schema id {schema_id} is unusable: {exc}") from None
    if not isinstance(source, SourceStruct) or not source.fields:
        raise UpsertSpecError(f"{what}: key schema id {schema_id} is not a record")
    names = tuple(f.name for f in source.fields)
    for name in names:
        try:
            field_at(schema, name)
        except ColumnPathError:
            raise UpsertSpecError(
                f"{what}: key schema id {schema_id} field {name!r} is not a column of the table"
            ) from None
    return names


def check_columns(schema: Schema, upsert: Upsert) -> None:
    """Raises:
    UpsertSpecError: an id column missing, not primitive or floating point; a CDC field
        missing or not a string.
    """
    from pyiceberg.types import DoubleType, FloatType, StringType

    for column in upsert.id_columns:
        try:
            field = field_at(schema, column)
            if upsert.from_key:
                in_key = field_at(schema, f"{KEY_COLUMN}.{column}")
        except ColumnPathError as exc:
            raise UpsertSpecError(f"id.columns {column!r}: {exc}") from None
        if upsert.from_key and not _holds(field.field_type, in_key.field_type):
            raise UpsertSpecError(
                f"id.columns {column!r} is {field.field_type}: the key's {column} "
                f"({in_key.field_type}) does not fit it"
            )
        if not field.field_type.is_primitive or isinstance(
            field.field_type, (FloatType, DoubleType)
        ):
            raise UpsertSpecError(
                f"id.columns {column!r} is {field.field_type}: an id column must be a "
                "primitive type other than float or double (Iceberg's identifier rule)"
            )
    if upsert.cdc_field:
        try:
            field = field_at(schema, upsert.cdc_field)
        except ColumnPathError as exc:
            raise UpsertSpecError(f"cdc.field {upsert.cdc_field!r}: {exc}") from None
        if not isinstance(field.field_type, StringType):
            raise UpsertSpecError(
                f"cdc.field {upsert.cdc_field!r} is {field.field_type}, not a string"
            )


def _holds(column: object, key: object) -> bool:
    """A key field's type is the id column's, or one it widens to."""
    from pyiceberg.types import IntegerType, LongType

    return column == key or (isinstance(column, LongType) and isinstance(key, IntegerType))


def column(batch: pa.RecordBatch, path: str) -> pa.Array:
    """The values of a dotted column path (null where a parent struct is null)."""
    first, *rest = path.split(".")
    values = batch.column(first)
    for name in rest:
        values = pc.struct_field(values, name)
    return values


def mark_rows(
    batch: pa.RecordBatch, upsert: Upsert, tombstones: Collection[int]
) -> tuple[pa.RecordBatch, list[tuple[int, int, str]]]:
    """``batch`` with :data:`DELETE_COLUMN` appended, minus its rows with a null id
    column, which are returned as ``(partition, offset, reason)`` (bad records).
    ``tombstones`` holds the offsets of the batch's records whose value was null; with
    ``upsert.from_key`` their id columns are read from ``_kafka_key``."""
    offsets = pc.struct_field(batch.column(METADATA_COLUMN), "offset")
    deletes = pc.is_in(offsets, value_set=pa.array(sorted(tombstones), pa.int64()))
    if upsert.from_key and tombstones:
        key = batch.column(KEY_COLUMN)
        for path in upsert.id_columns:  # top-level columns (debezium_key_columns)
            at = batch.schema.get_field_index(path)
            ids = pc.struct_field(key, path).cast(batch.column(at).type)
            filled = pc.if_else(deletes, ids, batch.column(at))
            batch = batch.set_column(at, batch.schema.field(at), filled)
    if upsert.cdc_field:
        letter = pc.utf8_upper(pc.utf8_slice_codeunits(column(batch, upsert.cdc_field), 0, 1))
        deletes = pc.or_(deletes, pc.fill_null(pc.equal(letter, "D"), False))
    marked = batch.append_column(pa.field(DELETE_COLUMN, pa.bool_(), nullable=False), deletes)
    null = pa.array([False] * batch.num_rows)
    reasons: list[str | None] = [None] * batch.num_rows
    for path in upsert.id_columns:
        missing = pc.is_null(column(batch, path))
        for i in pc.indices_nonzero(pc.and_not(missing, null)).to_pylist():
            reasons[i] = f"id column {path} is null"
        null = pc.or_(null, missing)
    if not pc.any(null).as_py():
        return marked, []
    partitions = pc.struct_field(batch.column(METADATA_COLUMN), "partition").to_pylist()
    bad = [
        (partitions[i], offsets[i].as_py(), reason)
        for i, reason in enumerate(reasons)
        if reason is not None
    ]
    return marked.filter(pc.invert(null)), bad
