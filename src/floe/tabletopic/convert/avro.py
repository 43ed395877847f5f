"""Avro schemas -> the source type tree, and Avro payloads -> Arrow-ready Python values.

Mapping (docs/table-topics-row-layout.md has the full table): primitives to their
Iceberg twins, ``decimal`` (bytes or fixed) to decimal(p, s), ``date`` to date,
``time-millis``/``time-micros`` to long microseconds since midnight (Spark 3.5 has no
TIME type), ``timestamp-*`` to timestamptz, ``local-timestamp-*`` to timestamp, ``uuid``
to string, ``fixed`` to fixed(n), enums to string, records to structs, arrays to lists,
maps to map<string, V>, ``["null", T]`` to optional T. Unknown logical types fall back
to their underlying type, as the Avro spec asks of readers.

Refused (:class:`UnsupportedSchemaError`): unions of two or more non-null types, a bare
``null`` type, and recursive records (an Iceberg schema is a finite tree).

Invariants: the decoder hands fastavro a copy of the schema without the logical types it
would turn into Python objects (timestamps, dates, times, uuids) and fixes the raw
numbers with a compiled normalizer only where the units differ (millis -> micros), so
the per-record cost is fastavro's own plus one dict update per millis field. A
``*timestamp-millis`` value whose microseconds do not fit 64 bits raises
:class:`~.temporal.TimestampRangeError` (a per-record error naming the field), never
wraps; the other logical types cannot overflow their column (an int32 day or
millisecond count, a long of microseconds).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import avro.name
import fastavro
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from floe.registry.core.avro import AvroSchema
from floe.tabletopic.convert.source import (
    SourceField,
    SourceList,
    SourceMap,
    SourceStruct,
    SourceType,
    UnsupportedSchemaError,
    child_path,
)
from floe.tabletopic.convert.temporal import checked

Normalizer = Callable[[Any], Any]

PRIMITIVES: dict[str, PrimitiveType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
# logicalType -> (Iceberg type, micros per raw unit, or 0 when no rescaling is needed);
# these are read as their UNDERLYING type (the logical type stripped) and normalized after
LOGICAL: dict[str, tuple[PrimitiveType, int]] = {
    "date": (DateType(), 0),
    "time-millis": (LongType(), 1000),
    "time-micros": (LongType(), 0),
    "timestamp-millis": (TimestamptzType(), 1000),
    "timestamp-micros": (TimestamptzType(), 0),
    "local-timestamp-millis": (TimestampType(), 1000),
    "local-timestamp-micros": (TimestampType(), 0),
    "uuid": (StringType(), 0),
}
UNDERLYING = {
    "date": "int",
    "time-millis": "int",
    "time-micros": "long",
    "timestamp-millis": "long",
    "timestamp-micros": "long",
    "local-timestamp-millis": "long",
    "local-timestamp-micros": "long",
    "uuid": "string",
}
MAX_DECIMAL_PRECISION = 38


def fullname(name: str, namespace: str | None) -> str:
    """The full name of an Avro named type referenced as ``name`` within ``namespace``."""
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Mapper:
    """One walk over an Avro schema's JSON form that yields, in step, the source type,
    the schema fastavro decodes with, and the normalizer of decoded values."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> definition (JSON)
        self.open: set[str] = set()  # records being walked (recursion check)

    def walk(
        self, schema: Any, namespace: str | None, path: str
    ) -> tuple[SourceType, Any, Normalizer | None]:
        """Raises:
        UnsupportedSchemaError: see the module docstring.
        """
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return PRIMITIVES[schema], schema, None
            if schema == "null":
                raise UnsupportedSchemaError(path, "a field of type null carries no data")
            full = fullname(schema, namespace)
            if full in self.open:
                raise UnsupportedSchemaError(path, f"recursive type {full}")
            if full not in self.named:
                raise UnsupportedSchemaError(path, f"unknown type {schema}")
            # A reference to a type defined earlier: map it again (same result) but let
            # fastavro see only the name, as it already holds the definition.
            definition = self.named[full]
            source, _, normalize = self.walk(definition, full.rpartition(".")[0] or None, path)
            return source, full, normalize
        if isinstance(schema, list):
            return self._union(schema, namespace, path)
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical == "decimal":
            return self._decimal(schema, namespace, path)
        if logical in LOGICAL and schema["type"] == UNDERLYING[logical]:
            iceberg, scale = LOGICAL[logical]
            return iceberg, kind, _scaled(scale, path, logical) if scale else None
        if kind in PRIMITIVES or kind == "null":
            return self.walk(kind, namespace, path)
        if kind == "array":
            element, decode, normalize = self.walk(schema["items"], namespace, path)
            return SourceList(element), {**schema, "items": decode}, _each(normalize)
        if kind == "map":
            value, decode, normalize = self.walk(schema["values"], namespace, path)
            return SourceMap(StringType(), value), {**schema, "values": decode}, _values(normalize)
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema, namespace, path)
        return self.walk(kind, namespace, path)  # {"type": <a name, union or schema>}

    def _decimal(
        self, schema: dict[str, Any], namespace: str | None, path: str
    ) -> tuple[SourceType, Any, Normalizer | None]:
        precision = int(schema.get("precision", 0))
        scale = int(schema.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise UnsupportedSchemaError(
                path, f"decimal({precision}, {scale}) is outside Iceberg's decimal(1..38)"
            )
        if schema["type"] == "fixed":
            self._define(schema, namespace, path)
        return DecimalType(precision, scale), schema, None

    def _define(self, schema: dict[str, Any], namespace: str | None, path: str) -> str:
        full = fullname(schema["name"], schema.get("namespace", namespace))
        self.named[full] = {**schema, "name": full}
        return full

    def _named(
        self, schema: dict[str, Any], namespace: str | None, path: str
    ) -> tuple[SourceType, Any, Normalizer | None]:
        full = self._define(schema, namespace, path)
        decode = {**schema, "name": full}
        decode.pop("namespace", None)
        if schema["type"] == "enum":
            return StringType(), decode, None
        if schema["type"] == "fixed":
            return FixedType(int(schema["size"])), decode, None
        inner_ns = full.rpartition(".")[0] or None
        self.open.add(full)
        fields: list[SourceField] = []
        decode_fields: list[dict[str, Any]] = []
        normalizers: list[tuple[str, Normalizer]] = []
        for f in schema["fields"]:
            source, field_decode, normalize = self.walk(
                f["type"], inner_ns, child_path(path, f["name"])
            )
            aliases = tuple(a.rpartition(".")[2] for a in f.get("aliases", ()))
            fields.append(SourceField(f["name"], source, aliases, f.get("doc")))
            decode_fields.append({**f, "type": field_decode})
            if normalize is not None:
                normalizers.append((f["name"], normalize))
        self.open.discard(full)
        decode["fields"] = decode_fields
        return SourceStruct(tuple(fields)), decode, _record(normalizers)

    def _union(
        self, members: list[Any], namespace: str | None, path: str
    ) -> tuple[SourceType, Any, Normalizer | None]:
        others = [m for m in members if m not in ("null", {"type": "null"})]
        if len(others) != 1:
            raise UnsupportedSchemaError(
                path,
                "a union of several non-null types has no single column type; "
                'use ["null", T] or a record with one optional field per branch',
            )
        source, decode, normalize = self.walk(others[0], namespace, path)
        decode_members = [decode if m is others[0] else m for m in members]
        return source, decode_members, _optional(normalize)


def _scaled(factor: int, path: str, logical: str) -> Normalizer:
    """Raw units -> microseconds; the result raises TimestampRangeError when they do
    not fit (only ``time-millis`` and ``*timestamp-millis`` are scaled)."""
    return lambda v: checked(v * factor, path, logical, v)


def _optional(normalize: Normalizer | None) -> Normalizer | None:
    if normalize is None:
        return None
    inner = normalize
    return lambda v: None if v is None else inner(v)


def _each(normalize: Normalizer | None) -> Normalizer | None:
    if normalize is None:
        return None
    inner = normalize
    return lambda v: [inner(x) for x in v]


def _values(normalize: Normalizer | None) -> Normalizer | None:
    if normalize is None:
        return None
    inner = normalize
    return lambda v: {k: inner(x) for k, x in v.items()}


def _record(normalizers: list[tuple[str, Normalizer]]) -> Normalizer | None:
    if not normalizers:
        return None
    pairs = tuple(normalizers)

    def normalize(record: dict[str, Any]) -> dict[str, Any]:
        for name, fn in pairs:
            record[name] = fn(record[name])
        return record

    return normalize


class AvroDecodeError(ValueError):
    """A payload that does not decode with its Avro schema."""


class AvroCodec:
    """Decodes schemaless Avro payloads of one schema into Arrow-ready Python values.

    Immutable after construction; safe to share between threads.
    """

    def __init__(self, schema: AvroSchema) -> None:
        """Raises:
        UnsupportedSchemaError: see the module docstring.
        """
        # schema_json keeps the logical types (what .avro_native plans its normalizations
        # from); decode_schema is what payloads are read with: the LOGICAL types stripped,
        # named types by full name
        self.schema_json: Any = schema.schema.to_json(avro.name.Names())
        mapper = _Mapper()
        self.source, self.decode_schema, self._normalize = mapper.walk(self.schema_json, None, "")
        self._parsed = fastavro.parse_schema(self.decode_schema)

    def decode(self, payload: bytes | memoryview) -> Any:
        """The value of one payload (a dict for a record).

        Raises:
            AvroDecodeError: the payload is truncated, malformed or has trailing bytes.
        """
        buffer = io.BytesIO(payload)
        try:
            value = fastavro.schemaless_reader(buffer, self._parsed, None)
        except Exception as exc:  # fastavro raises many unrelated types on bad input
            raise AvroDecodeError(f"Avro payload does not decode: {exc!r}") from None
        if buffer.tell() != len(payload):
            raise AvroDecodeError(f"Avro payload has {len(payload) - buffer.tell()} trailing bytes")
        return value if self._normalize is None else self._normalize(value)
