"""JSON Schema values decoded in bulk against the per-record path: the same batch, the
same errors.

A differential test generates JSON Schemas (strings, integers, numbers, booleans,
nullable fields, enums, date-times, dates, nested objects, arrays, maps) and payloads:
valid objects, wrong types in every position, missing and extra fields, values that are
not objects, duplicate keys, several objects or trailing bytes in one payload, text that
is not JSON or not UTF-8; and compares the converter with ``min_native_run=1`` (every run
in bulk, bisected down to single records) against ``min_native_run=None`` (per record,
the reference), with and without flatten, by schema id and by latest schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from convert_helpers import (
    BULK_SETTINGS,
    bulk_and_reference,
    every_record_accounted,
    value_spec,
)
from hypothesis import given
from hypothesis import strategies as st

from floe.protocol.records import Record
from floe.registry.core.json_schema import JsonSchema
from floe.tabletopic.convert import (
    ConversionResult,
    ConvertType,
    PartSpec,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.converter import BulkJsonDecoder
from floe.tabletopic.convert.wire import frame

KEY = PartSpec(ConvertType.STRING)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXT, inner, max_size=2),
    max_leaves=4,
)
DATE_TIMES = st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()) | TEXT
DATES = st.dates().map(lambda d: d.isoformat()) | TEXT


@dataclass
class Field:
    """A property's schema and its valid values."""

    schema: dict[str, Any]
    values: st.SearchStrategy[Any]


@st.composite
def fields(draw: st.DrawFn, depth: int = 0) -> Field:
    kinds = ["string", "integer", "number", "boolean", "nullable", "enum", "date-time", "date"]
    if depth < 2:
        kinds += ["object", "array", "map"]
    kind = draw(st.sampled_from(kinds))
    if kind in ("string", "integer", "number", "boolean"):
        plain = {
            "string": TEXT,
            "integer": st.integers(-(2**63), 2**63 - 1),
            "number": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-99, 99),
            "boolean": st.booleans(),
        }
        return Field({"type": kind}, plain[kind])
    if kind == "nullable":
        return Field({"type": ["string", "null"]}, st.none() | TEXT)
    if kind == "enum":
        return Field({"type": "string", "enum": ["a", "b"]}, st.sampled_from(["a", "b"]))
    if kind == "date-time":
        return Field({"type": "string", "format": "date-time"}, DATE_TIMES)
    if kind == "date":
        return Field({"type": "string", "format": "date"}, DATES)
    if kind == "array":
        item = draw(fields(depth + 1))
        return Field({"type": "array", "items": item.schema}, st.lists(item.values, max_size=3))
    if kind == "map":
        item = draw(fields(depth + 1))
        schema = {"type": "object", "additionalProperties": item.schema}
        return Field(schema, st.dictionaries(TEXT, item.values, max_size=2))
    props = draw(st.lists(fields(depth + 1), min_size=1, max_size=3))
    return _object(props)


def _object(props: list[Field]) -> Field:
    names = [f"f{i}" for i in range(len(props))]
    schema = {
        "type": "object",
        "properties": {n: p.schema for n, p in zip(names, props, strict=True)},
    }
    values = st.fixed_dictionaries(
        {}, optional={n: p.values for n, p in zip(names, props, strict=True)}
    )
    return Field(schema, values)


@dataclass
class Case:
    schema: dict[str, Any]
    payloads: list[bytes | None]
    flatten: bool
    latest: bool
    valid: set[int]


def _payload(draw: st.DrawFn, root: Field) -> tuple[bytes | None, bool]:
    """A payload and whether it is a valid value of the schema."""
    how = draw(
        st.sampled_from(
            ["valid"] * 6 + ["wrong", "extra", "not-object", "duplicate", "two", "junk", "null"]
        )
    )
    value = draw(root.values)
    if how == "valid":
        return json.dumps(value).encode(), True
    if how == "wrong" and value:
        name = draw(st.sampled_from(sorted(value)))
        return json.dumps({**value, name: draw(ANY_JSON)}).encode(), False
    if how == "extra":
        return json.dumps({**value, "zz": draw(ANY_JSON)}).encode(), True
    if how == "not-object":
        return json.dumps(draw(ANY_JSON)).encode(), False
    if how == "duplicate" and value:
        name = sorted(value)[0]
        text = json.dumps(value)[:-1] + f", {json.dumps(name)}: {json.dumps(draw(ANY_JSON))}}}"
        return text.encode(), False
    if how == "two":
        return (
            json.dumps(value) + draw(st.sampled_from(["{}", " {}", "\n{}", " x"]))
        ).encode(), False
    if how == "junk":
        return draw(st.binary(max_size=6) | st.sampled_from([b"", b"{", b'{"f0": "\xff"}'])), False
    if how == "null":
        return None, False
    return json.dumps(value).encode(), True


@st.composite
def cases(draw: st.DrawFn) -> Case:
    root = _object(draw(st.lists(fields(), min_size=1, max_size=4)))
    flatten = draw(st.booleans())
    latest = draw(st.booleans())
    payloads: list[bytes | None] = []
    valid = set()
    for i in range(draw(st.integers(1, 12))):
        body, ok = _payload(draw, root)
        if body is not None and not latest:
            body = frame(1, body) if draw(st.integers(0, 20)) else body[:3]  # bad framing
        payloads.append(body)
        if ok:
            valid.add(i)
    return Case(root.schema, payloads, flatten, latest, valid)


def both(case: Case) -> tuple[ConversionResult, int]:
    """The bulk result (checked equal to the per-record one) and its bulk decodes."""
    schema = JsonSchema(json.dumps(case.schema))
    value = value_spec(schema, latest=case.latest)
    table = table_schema(source_type(value, schema), source_type(KEY), flatten=case.flatten)
    records = [Record(i, 1_000 + i, b"k", p) for i, p in enumerate(case.payloads)]
    return bulk_and_reference(table, value, KEY, records, BulkJsonDecoder, flatten=case.flatten)


@BULK_SETTINGS
@given(cases())
def test_bulk_json_equals_the_per_record_path(case: Case) -> None:
    got, bulk = both(case)
    every_record_accounted(got, len(case.payloads), bulk)


def test_a_clean_run_is_one_bulk_decode() -> None:
    """Valid objects of one schema id: one bulk decode, not one per record."""
    schema = {
        "type": "object",
        "properties": {
            "user": {"type": "string"},
            "n": {"type": "integer"},
            "at": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    payloads: list[bytes | None] = [
        frame(
            1,
            json.dumps(
                {"user": f"u{i}", "n": i, "at": "2026-01-01T00:00:00Z", "tags": ["x"]}
            ).encode(),
        )
        for i in range(50)
    ]
    got, bulk = both(Case(schema, payloads, flatten=True, latest=False, valid=set(range(50))))
    assert bulk == 1 and got.errors == () and got.batch.num_rows == 50
    assert got.batch.column("n").to_pylist() == list(range(50))
