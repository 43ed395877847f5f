"""JSON Schemas -> the source type tree, and JSON payloads -> Arrow-ready Python values.

Mapping (docs/table-topics-row-layout.md has the full table): ``boolean`` to boolean,
``integer`` to long, ``number`` to double, ``string`` to string except formats
``date-time`` (timestamptz; a time without offset is read as UTC), ``date`` (date) and
``time`` (long microseconds since midnight); ``enum`` to string; ``object`` with
``properties`` to a struct (properties in declared order; ``additionalProperties`` of
such an object is not stored); ``object`` with only an ``additionalProperties`` schema
to map<string, V>; ``array`` with one ``items`` schema to a list; ``$ref`` is followed;
``["T", "null"]`` and ``oneOf``/``anyOf`` of one schema plus ``null`` to optional T.

Refused (:class:`UnsupportedSchemaError`): several non-null types or branches, ``allOf``,
tuple ``items``, an object with neither ``properties`` nor an ``additionalProperties``
schema (no column type fits arbitrary JSON), a bare ``null``, and recursive ``$ref``s.

Invariants: payloads are parsed with orjson; only date/time strings are rewritten (by
compiled normalizers); whether a value fits its column is left to Arrow, and the
converter turns a misfit into a per-record :class:`~.converter.ConversionError`. A
date/time string that does not parse, or lies outside what Python's datetime reads
(years 1-9999, always within Iceberg's 64-bit microseconds), is such an error too, with
a reason naming the field and the value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import orjson
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    PrimitiveType,
    StringType,
    TimestamptzType,
)
from referencing._core import Resolver  # the public alias is not exported

from floe.registry.core.json_schema import JsonSchema
from floe.tabletopic.convert.source import (
    SourceField,
    SourceList,
    SourceMap,
    SourceStruct,
    SourceType,
    UnsupportedSchemaError,
    child_path,
)
from floe.tabletopic.convert.temporal import field_name

Normalizer = Callable[[Any], Any]
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


def _timestamp_micros(text: str) -> int:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // _MICROSECOND  # years 1-9999: always within 64-bit micros


def _time_micros(text: str) -> int:
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


_FORMATS: dict[str, tuple[PrimitiveType, Normalizer]] = {
    "date-time": (TimestamptzType(), _timestamp_micros),
    "date": (DateType(), dt.date.fromisoformat),
    "time": (LongType(), _time_micros),
}
_SCALARS: dict[str, PrimitiveType] = {
    "boolean": BooleanType(),
    "integer": LongType(),
    "number": DoubleType(),
    "string": StringType(),
}


class _Mapper:
    """One walk over a JSON Schema yielding the source type and the value normalizer."""

    def __init__(self) -> None:
        self.open: set[str] = set()  # $refs being walked (recursion check)

    def walk(
        self, schema: Any, resolver: Resolver[Any], path: str
    ) -> tuple[SourceType, Normalizer | None]:
        """Raises:
        UnsupportedSchemaError: see the module docstring.
        """
        if not isinstance(schema, dict):
            raise UnsupportedSchemaError(path, "a boolean schema has no column type")
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in self.open:
                raise UnsupportedSchemaError(path, f"recursive $ref {ref}")
            resolved = resolver.lookup(ref)
            self.open.add(ref)
            try:
                return self.walk(resolved.contents, resolved.resolver, path)
            finally:
                self.open.discard(ref)
        for keyword in ("oneOf", "anyOf"):
            if keyword in schema:
                return self._choice(schema[keyword], resolver, path, keyword)
        if "allOf" in schema:
            raise UnsupportedSchemaError(path, "allOf is not mapped; inline the merged schema")
        if "enum" in schema and "type" not in schema:
            return StringType(), None
        kind = schema.get("type")
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            if len(others) != 1:
                raise UnsupportedSchemaError(path, f"several non-null types {others}")
            kind = others[0]
        if kind == "object":
            return self._object(schema, resolver, path)
        if kind == "array":
            items = schema.get("items")
            if not isinstance(items, dict):
                raise UnsupportedSchemaError(path, "an array needs one items schema")
            element, normalize = self.walk(items, resolver, path)
            return SourceList(element), _each(normalize, path)
        if kind == "string" and schema.get("format") in _FORMATS:
            iceberg, normalize = _FORMATS[schema["format"]]
            return iceberg, _optional(_described(normalize, path, schema["format"]))
        if isinstance(kind, str) and kind in _SCALARS:
            return _SCALARS[kind], None
        if kind == "null":
            raise UnsupportedSchemaError(path, "a null-only schema carries no data")
        raise UnsupportedSchemaError(path, f"no column type for a schema without a type: {kind}")

    def _choice(
        self, branches: Any, resolver: Resolver[Any], path: str, keyword: str
    ) -> tuple[SourceType, Normalizer | None]:
        others = [b for b in branches if b != {"type": "null"}]
        if len(others) != 1:
            raise UnsupportedSchemaError(
                path, f"{keyword} of several non-null schemas has no single column type"
            )
        return self.walk(others[0], resolver, path)

    def _object(
        self, schema: dict[str, Any], resolver: Resolver[Any], path: str
    ) -> tuple[SourceType, Normalizer | None]:
        properties = schema.get("properties")
        if isinstance(properties, dict) and properties:
            fields: list[SourceField] = []
            normalizers: list[tuple[str, Normalizer]] = []
            for name, sub in properties.items():
                source, normalize = self.walk(sub, resolver, child_path(path, name))
                doc = sub.get("description") if isinstance(sub, dict) else None
                fields.append(SourceField(name, source, (), doc))
                if normalize is not None:
                    normalizers.append((name, normalize))
            return SourceStruct(tuple(fields)), _record(normalizers, path)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            value, normalize = self.walk(extra, resolver, path)
            return SourceMap(StringType(), value), _values(normalize, path)
        raise UnsupportedSchemaError(
            path, "an object needs properties or an additionalProperties schema"
        )


def _described(normalize: Normalizer, path: str, fmt: str) -> Normalizer:
    """``normalize`` whose failures name the field, the format and the value."""
    years = "" if fmt == "time" else " or is outside years 1-9999"

    def parse(value: Any) -> Any:
        try:
            return normalize(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{field_name(path)} ({fmt}) value {value!r} does not parse{years}: {exc}"
            ) from None

    return parse


def _optional(normalize: Normalizer | None) -> Normalizer | None:
    if normalize is None:
        return None
    inner = normalize
    return lambda v: None if v is None else inner(v)


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number"}


def _misshaped(value: Any, path: str, expected: str) -> TypeError:
    """An array or object position holding another JSON type (Arrow would read an array
    as an object's fields by position, or an object as a list of its keys)."""
    found = _JSON_TYPES.get(type(value), "number")
    return TypeError(f"{field_name(path)} is a JSON {found}, not an {expected}")


def _each(normalize: Normalizer | None, path: str) -> Normalizer:
    inner = normalize

    def each(v: Any) -> Any:
        if v is None:
            return None
        if type(v) is not list:
            raise _misshaped(v, path, "array")
        return v if inner is None else [inner(x) for x in v]

    return each


def _values(normalize: Normalizer | None, path: str) -> Normalizer:
    inner = normalize

    def values(v: Any) -> Any:
        if v is None:
            return None
        if type(v) is not dict:
            raise _misshaped(v, path, "object")
        return v if inner is None else {k: inner(x) for k, x in v.items()}

    return values


def _record(normalizers: list[tuple[str, Normalizer]], path: str) -> Normalizer:
    pairs = tuple(normalizers)

    def normalize(record: Any) -> Any:
        if record is None:
            return None
        if type(record) is not dict:
            raise _misshaped(record, path, "object")
        for name, fn in pairs:
            value = record.get(name)
            if value is not None:
                record[name] = fn(value)
        return record

    return normalize


class JsonDecodeError(ValueError):
    """A payload that is not JSON or whose date/time strings do not parse."""


class JsonCodec:
    """Decodes JSON payloads of one JSON Schema into Arrow-ready Python values.

    Immutable after construction; safe to share between threads.
    """

    def __init__(self, schema: JsonSchema) -> None:
        """Raises:
        UnsupportedSchemaError: see the module docstring.
        """
        self.source, self._normalize = _Mapper().walk(schema.raw, schema.resolver, "")

    def decode(self, payload: bytes | memoryview) -> Any:
        """The value of one payload.

        Raises:
            JsonDecodeError: not JSON, or a date/time string that does not parse.
        """
        try:
            value = orjson.loads(payload)
            return value if self._normalize is None else self._normalize(value)
        except orjson.JSONDecodeError as exc:
            raise JsonDecodeError(f"JSON payload does not parse: {exc}") from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise JsonDecodeError(f"JSON value does not fit its schema: {exc}") from None
