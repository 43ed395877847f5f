"""Avro -> Iceberg/Arrow: every mapped type round-trips to the exact Python value."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from convert_helpers import convert_values, converter, only_value
from hypothesis import given, settings
from hypothesis import strategies as st
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
    StringType,
    TimestampType,
    TimestamptzType,
)

from floe.registry.core.avro import AvroSchema
from floe.tabletopic.convert import UnsupportedSchemaError
from floe.tabletopic.convert.avro import AvroCodec
from floe.tabletopic.convert.source import SourceList, SourceMap, SourceStruct

UTC = dt.UTC
# Apache avro 1.12 (the registry's parser) warns on logical types it does not know, such
# as local-timestamp-*, and keeps them in the schema; the suite turns warnings into errors.
pytestmark = pytest.mark.filterwarnings("ignore::avro.errors.IgnoredLogicalType")


def avro(schema: Any) -> AvroSchema:
    return AvroSchema(json.dumps(schema))


def encode(schema: Any, value: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def record(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": n, "type": t} for n, t in fields]}


def roundtrip(field_type: Any, value: Any) -> Any:
    """``value`` in a one-field record, through the converter, back as Python."""
    schema = record(("f", field_type))
    out = only_value(convert_values(converter(avro(schema)), encode(schema, {"f": value})))
    return out["f"]


LOGICAL = [
    ("boolean", True, True, BooleanType()),
    ("int", -(2**31), -(2**31), IntegerType()),
    ("long", 2**63 - 1, 2**63 - 1, LongType()),
    ("float", 1.5, 1.5, FloatType()),
    ("double", -2.25, -2.25, DoubleType()),
    ("bytes", b"\x00\xff", b"\x00\xff", BinaryType()),
    ("string", "héllo", "héllo", StringType()),
    (
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3},
        Decimal("-1234.567"),
        Decimal("-1234.567"),
        DecimalType(10, 3),
    ),
    (
        {
            "type": "fixed",
            "name": "D",
            "size": 8,
            "logicalType": "decimal",
            "precision": 18,
            "scale": 2,
        },
        Decimal("12.34"),
        Decimal("12.34"),
        DecimalType(18, 2),
    ),
    (
        {"type": "int", "logicalType": "date"},
        dt.date(2024, 2, 29),
        dt.date(2024, 2, 29),
        DateType(),
    ),
    (
        {"type": "int", "logicalType": "time-millis"},
        dt.time(1, 2, 3, 4000),
        3_723_004_000,
        LongType(),
    ),
    (
        {"type": "long", "logicalType": "time-micros"},
        dt.time(1, 2, 3, 4),
        3_723_000_004,
        LongType(),
    ),
    (
        {"type": "long", "logicalType": "timestamp-millis"},
        dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        TimestamptzType(),
    ),
    (
        {"type": "long", "logicalType": "timestamp-micros"},
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        TimestamptzType(),
    ),
    (
        {"type": "long", "logicalType": "local-timestamp-millis"},
        dt.datetime(2024, 1, 2, 3, 4, 5, 6000),
        dt.datetime(2024, 1, 2, 3, 4, 5, 6000),
        TimestampType(),
    ),
    (
        {"type": "long", "logicalType": "local-timestamp-micros"},
        dt.datetime(2024, 1, 2, 3, 4, 5, 7),
        dt.datetime(2024, 1, 2, 3, 4, 5, 7),
        TimestampType(),
    ),
    (
        {"type": "string", "logicalType": "uuid"},
        uuid.UUID(int=7),
        str(uuid.UUID(int=7)),
        StringType(),
    ),
    ({"type": "fixed", "name": "F", "size": 3}, b"abc", b"abc", FixedType(3)),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B", "B", StringType()),
    (["null", "long"], None, None, LongType()),
    (["long", "null"], 5, 5, LongType()),
    ({"type": "long", "logicalType": "no-such-type"}, 9, 9, LongType()),
]


@pytest.mark.parametrize(("avro_type", "written", "expected", "iceberg"), LOGICAL)
def test_every_type_maps_and_roundtrips(
    avro_type: Any, written: Any, expected: Any, iceberg: Any
) -> None:
    source = AvroCodec(avro(record(("f", avro_type)))).source
    assert isinstance(source, SourceStruct)
    assert source.fields[0].type == iceberg
    got = roundtrip(avro_type, written)
    assert got == expected
    assert type(got) is type(expected)


def test_nested_records_arrays_maps_and_named_references() -> None:
    inner = {
        "type": "record",
        "name": "In",
        "fields": [{"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
    }
    schema = record(
        ("a", {"type": "array", "items": inner}),
        ("m", {"type": "map", "values": ["null", "In"]}),
        ("again", "In"),
        ("deep", {"type": "array", "items": {"type": "map", "values": "int"}}),
    )
    source = AvroCodec(avro(schema)).source
    assert isinstance(source, SourceStruct)
    assert isinstance(source.fields[0].type, SourceList)
    assert isinstance(source.fields[1].type, SourceMap)
    t = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    value = {
        "a": [{"ts": t}],
        "m": {"x": {"ts": t}, "y": None},
        "again": {"ts": t},
        "deep": [{"k": 1}, {}],
    }
    out = only_value(convert_values(converter(avro(schema)), encode(schema, value)))
    assert out == {
        "a": [{"ts": t}],
        "m": [("x", {"ts": t}), ("y", None)],
        "again": {"ts": t},
        "deep": [[("k", 1)], []],
    }


@pytest.mark.parametrize(
    ("avro_type", "reason"),
    [
        (["null", "int", "string"], "union of several non-null types"),
        (["int", "string"], "union of several non-null types"),
        ("null", "null carries no data"),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 39, "scale": 0},
            "outside Iceberg's decimal",
        ),
    ],
)
def test_refused_types_say_why(avro_type: Any, reason: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match=reason) as info:
        AvroCodec(avro(record(("f", avro_type))))
    assert info.value.path == "f"


def test_recursive_records_are_refused() -> None:
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(UnsupportedSchemaError, match="recursive type Node") as info:
        AvroCodec(avro(schema))
    assert info.value.path == "next"


def test_field_aliases_are_kept_for_renames() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "namespace": "n",
        "fields": [{"name": "new", "type": "int", "aliases": ["old"], "doc": "d"}],
    }
    source = AvroCodec(avro(schema)).source
    assert isinstance(source, SourceStruct)
    assert source.fields[0].aliases == ("old",)
    assert source.fields[0].doc == "d"


CLICK = record(
    ("user_id", "string"),
    ("n", "long"),
    ("ref", ["null", "string"]),
    ("ts", {"type": "long", "logicalType": "timestamp-millis"}),
)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "user_id": st.text(),
                "n": st.integers(-(2**63), 2**63 - 1),
                "ref": st.none() | st.text(),
                "ts": st.integers(-(2**40), 2**40),
            }
        ),
        max_size=20,
    )
)
def test_batches_roundtrip_flattened(rows: list[dict[str, Any]]) -> None:
    conv = converter(avro(CLICK), flatten=True)
    result = convert_values(conv, *(encode(CLICK, r) for r in rows))
    assert result.errors == ()
    got = result.batch.select(["user_id", "n", "ref", "ts"]).to_pylist()
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert got == [{**r, "ts": epoch + dt.timedelta(milliseconds=r["ts"])} for r in rows]
