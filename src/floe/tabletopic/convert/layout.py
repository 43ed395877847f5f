"""Row layout of a table topic (version :data:`ROW_LAYOUT_VERSION`) and table names.

Columns, in order: the value part (the value's top-level fields when the transform is
``flatten``; the row's fields and ``_cdc`` for ``flatten_debezium``, see :mod:`.debezium`;
else one column ``_kafka_value``), then ``_kafka_key``, ``_kafka_header``
(map<string, binary>) and ``_kafka_metadata`` struct<partition int, offset long,
timestamp timestamptz, timestamp_type string>. docs/table-topics-row-layout.md is the
contract; changing the layout is a breaking change and bumps the version.

Invariants: every column and nested field is optional except map keys (a tombstone or a
record of another schema version may leave any value column null); field ids are
assigned depth-first from 1 for a new table, and the Arrow schema of a table carries each
Iceberg field id as ``PARQUET:field_id`` metadata; Iceberg ``timestamptz`` is Arrow
``timestamp("us", tz="UTC")`` (what Spark's ``timestamp`` reads).
"""

from __future__ import annotations

import enum
import hashlib
import re

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from floe.tabletopic.convert.debezium import CDC_COLUMN, cdc_type, envelope
from floe.tabletopic.convert.source import (
    SourceField,
    SourceList,
    SourceMap,
    SourceStruct,
    SourceType,
    UnsupportedSchemaError,
)

ROW_LAYOUT_VERSION = 1
"""Bumped on any change to the columns below or to the type mapping."""

VALUE_COLUMN = "_kafka_value"
KEY_COLUMN = "_kafka_key"
HEADER_COLUMN = "_kafka_header"
METADATA_COLUMN = "_kafka_metadata"
RESERVED_COLUMNS = frozenset({VALUE_COLUMN, KEY_COLUMN, HEADER_COLUMN, METADATA_COLUMN})
FIELD_ID = b"PARQUET:field_id"

UTC_MICROS = pa.timestamp("us", tz="UTC")


class ConvertType(enum.StrEnum):
    """How a key or value is decoded (``table.topic.convert.*.type``)."""

    RAW = "raw"
    STRING = "string"
    BY_SCHEMA_ID = "by_schema_id"
    BY_LATEST_SCHEMA = "by_latest_schema"


class TimestampKind(enum.StrEnum):
    """``_kafka_metadata.timestamp_type``: the record batch's timestamp type."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


METADATA_TYPE = SourceStruct(
    (
        SourceField("partition", IntegerType()),
        SourceField("offset", LongType()),
        SourceField("timestamp", TimestamptzType()),
        SourceField("timestamp_type", StringType()),
    )
)
HEADER_TYPE = SourceMap(StringType(), BinaryType())

_VALID_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_INVALID_CHAR = re.compile(r"[^a-z0-9_]")


def sql_name(name: str) -> str:
    """A Spark SQL identifier for a Kafka topic (or namespace) name, deterministically.

    A name that is already a lowercase identifier (``[a-z_][a-z0-9_]*``) is kept. Any
    other name is lowercased, every character outside ``[a-z0-9_]`` becomes ``_``, a
    leading digit gets a ``t_`` prefix, and ``_`` plus the first 8 hex digits of the
    SHA-256 of the original name is appended, so ``a-b``, ``a.b`` and ``A_b`` (distinct
    topics) never share a table.
    """
    if _VALID_NAME.fullmatch(name):
        return name
    base = _INVALID_CHAR.sub("_", name.lower())
    if not base or base[0].isdigit():
        base = f"t_{base}"
    return f"{base}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def table_identifier(namespace: str, topic: str) -> tuple[str, str]:
    """The (namespace, table) of a topic's table; both go through :func:`sql_name`."""
    return sql_name(namespace), sql_name(topic)


class FieldIds:
    """Depth-first field id counter for a new schema."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def iceberg_type(source: SourceType, ids: FieldIds) -> IcebergType:
    """The Iceberg type of a source type, taking field ids from ``ids``."""
    if isinstance(source, SourceStruct):
        return StructType(
            *[
                NestedField(
                    ids.next(), f.name, iceberg_type(f.type, ids), required=False, doc=f.doc
                )
                for f in source.fields
            ]
        )
    if isinstance(source, SourceList):
        element_id = ids.next()
        return ListType(element_id, iceberg_type(source.element, ids), element_required=False)
    if isinstance(source, SourceMap):
        key_id = ids.next()
        value_id = ids.next()
        return MapType(
            key_id, source.key, value_id, iceberg_type(source.value, ids), value_required=False
        )
    return source


def layout_fields(
    value: SourceType, key: SourceType, *, flatten: bool, debezium: bool = False
) -> tuple[SourceField, ...]:
    """The table's top-level fields in layout order. ``debezium``
    (``flatten_debezium``, implies ``flatten``): ``value`` is a Debezium envelope whose
    row record's fields are flattened, followed by the ``_cdc`` column.

    Raises:
        UnsupportedSchemaError: ``flatten`` with a value type that is not a struct,
            ``debezium`` with one that is not an envelope, or a flattened field named
            like a reserved column (``_kafka_*``; ``_cdc`` with ``debezium``).
    """
    if debezium:
        parts = envelope(value)
        reserved = RESERVED_COLUMNS | {CDC_COLUMN}
        clash = [f.name for f in parts.row.fields if f.name in reserved]
        if clash:
            raise UnsupportedSchemaError(clash[0], "a row field uses a reserved column name")
        head: tuple[SourceField, ...] = (
            *parts.row.fields,
            SourceField(CDC_COLUMN, cdc_type(parts.source)),
        )
    elif flatten:
        if not isinstance(value, SourceStruct):
            raise UnsupportedSchemaError("", "flatten needs a record/object/message value schema")
        clash = [f.name for f in value.fields if f.name in RESERVED_COLUMNS]
        if clash:
            raise UnsupportedSchemaError(clash[0], "a flattened field uses a reserved column name")
        head = value.fields
    else:
        head = (SourceField(VALUE_COLUMN, value),)
    return (
        *head,
        SourceField(KEY_COLUMN, key),
        SourceField(HEADER_COLUMN, HEADER_TYPE),
        SourceField(METADATA_COLUMN, METADATA_TYPE),
    )


def table_schema(
    value: SourceType, key: SourceType, *, flatten: bool, debezium: bool = False
) -> Schema:
    """The Iceberg schema of a new table: fresh ids from 1 (depth-first), all fields
    optional. The catalog may assign its own ids on CREATE TABLE; converters always work
    from the table's schema as loaded.

    Raises:
        UnsupportedSchemaError: see :func:`layout_fields`.
    """
    fields = layout_fields(value, key, flatten=flatten, debezium=debezium)
    struct = iceberg_type(SourceStruct(fields), FieldIds())
    assert isinstance(struct, StructType)  # a SourceStruct maps to a StructType
    return Schema(*struct.fields)


_PRIMITIVES: dict[type[IcebergType], pa.DataType] = {
    BooleanType: pa.bool_(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    DateType: pa.date32(),
    TimeType: pa.time64("us"),
    TimestampType: pa.timestamp("us"),
    TimestamptzType: UTC_MICROS,
    StringType: pa.string(),
    UUIDType: pa.binary(16),
    BinaryType: pa.binary(),
}


def _field(field_id: int, name: str, t: IcebergType, required: bool) -> pa.Field:
    return pa.field(
        name, arrow_type(t), nullable=not required, metadata={FIELD_ID: str(field_id).encode()}
    )


def arrow_type(t: IcebergType) -> pa.DataType:
    """The Arrow type written for an Iceberg type (see the module invariants).

    Raises:
        UnsupportedSchemaError: an Iceberg type this layout never produces and cannot
            write (e.g. ``timestamp_ns``).
    """
    if isinstance(t, StructType):
        return pa.struct([_field(f.field_id, f.name, f.field_type, f.required) for f in t.fields])
    if isinstance(t, ListType):
        return pa.list_(_field(t.element_id, "element", t.element_type, t.element_required))
    if isinstance(t, MapType):
        return pa.map_(
            _field(t.key_id, "key", t.key_type, True),
            _field(t.value_id, "value", t.value_type, t.value_required),
        )
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, FixedType):
        return pa.binary(len(t))
    found = _PRIMITIVES.get(type(t))
    if found is None:
        raise UnsupportedSchemaError("", f"no Arrow mapping for Iceberg type {t}")
    return found


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of an Iceberg schema, each field carrying its ``PARQUET:field_id``.

    Raises:
        UnsupportedSchemaError: see :func:`arrow_type`.
    """
    return pa.schema([_field(f.field_id, f.name, f.field_type, f.required) for f in schema.fields])
