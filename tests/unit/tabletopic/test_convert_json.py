"""JSON Schema -> Iceberg/Arrow: every mapped type round-trips to the exact value."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from convert_helpers import convert_values, converter, only_value
from pyiceberg.types import BooleanType, DateType, DoubleType, LongType, StringType, TimestamptzType

from floe.registry.core.json_schema import JsonSchema
from floe.tabletopic.convert import UnsupportedSchemaError
from floe.tabletopic.convert.json_schema import JsonCodec
from floe.tabletopic.convert.source import SourceList, SourceMap, SourceStruct

UTC = dt.UTC


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def schema(value: dict[str, Any]) -> JsonSchema:
    return JsonSchema(json.dumps(value))


CASES = [
    ({"type": "boolean"}, False, False, BooleanType()),
    ({"type": "integer"}, -(2**63), -(2**63), LongType()),
    ({"type": "number"}, 2.5, 2.5, DoubleType()),
    ({"type": "number"}, 3, 3.0, DoubleType()),
    ({"type": "string"}, "é", "é", StringType()),
    ({"enum": ["a", "b"]}, "b", "b", StringType()),
    (
        {"type": "string", "format": "date-time"},
        "2024-01-02T03:04:05.123456+02:00",
        dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=UTC),
        TimestamptzType(),
    ),
    (
        {"type": "string", "format": "date-time"},
        "2024-01-02T03:04:05Z",
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        TimestamptzType(),
    ),
    (
        {"type": "string", "format": "date-time"},
        "2024-01-02T03:04:05",
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        TimestamptzType(),
    ),
    ({"type": "string", "format": "date"}, "2024-02-29", dt.date(2024, 2, 29), DateType()),
    ({"type": "string", "format": "time"}, "01:02:03.000004", 3_723_000_004, LongType()),
    ({"type": ["integer", "null"]}, None, None, LongType()),
    ({"oneOf": [{"type": "null"}, {"type": "string"}]}, "x", "x", StringType()),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, 4, 4, LongType()),
]


@pytest.mark.parametrize(("json_type", "written", "expected", "iceberg"), CASES)
def test_every_type_maps_and_roundtrips(
    json_type: dict[str, Any], written: Any, expected: Any, iceberg: Any
) -> None:
    s = schema(obj(f=json_type))
    source = JsonCodec(s).source
    assert isinstance(source, SourceStruct)
    assert source.fields[0].type == iceberg
    out = only_value(convert_values(converter(s), json.dumps({"f": written}).encode()))
    assert out["f"] == expected
    assert type(out["f"]) is type(expected)


def test_nested_objects_arrays_maps_refs_and_missing_fields() -> None:
    s = schema(
        {
            **obj(
                point={"$ref": "#/definitions/P"},
                tags={"type": "array", "items": {"type": "string", "format": "date"}},
                attrs={"type": "object", "additionalProperties": {"type": "integer"}},
                absent={"type": "string"},
            ),
            "definitions": {"P": obj(x={"type": "number"}, y={"type": "number"})},
        }
    )
    source = JsonCodec(s).source
    assert isinstance(source, SourceStruct)
    assert [type(f.type) for f in source.fields] == [
        SourceStruct,
        SourceList,
        SourceMap,
        type(StringType()),
    ]
    payload = {"point": {"x": 1.5}, "tags": ["2024-01-01"], "attrs": {"a": 1}, "extra": 1}
    out = only_value(convert_values(converter(s), json.dumps(payload).encode()))
    assert out == {
        "point": {"x": 1.5, "y": None},
        "tags": [dt.date(2024, 1, 1)],
        "attrs": [("a", 1)],
        "absent": None,
    }


@pytest.mark.parametrize(
    ("json_type", "reason"),
    [
        ({"type": ["integer", "string"]}, "several non-null types"),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, "oneOf of several"),
        ({"allOf": [{"type": "integer"}]}, "allOf"),
        ({"type": "object"}, "properties or an additionalProperties"),
        ({"type": "array", "items": [{"type": "integer"}]}, "one items schema"),
        ({"type": "null"}, "null-only"),
        ({}, "without a type"),
    ],
)
def test_refused_schemas_say_why(json_type: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match=reason) as info:
        JsonCodec(schema(obj(f=json_type)))
    assert info.value.path == "f"


def test_recursive_refs_are_refused() -> None:
    s = schema(
        {
            "$ref": "#/definitions/Node",
            "definitions": {"Node": obj(next={"$ref": "#/definitions/Node"})},
        }
    )
    with pytest.raises(UnsupportedSchemaError, match="recursive"):
        JsonCodec(s)


def test_values_that_do_not_fit_become_errors() -> None:
    conv = converter(schema(obj(n={"type": "integer"}, t={"type": "string", "format": "date"})))
    result = convert_values(
        conv,
        b'{"n": 1}',
        b'{"n": "one"}',
        b"not json",
        b'{"t": "2024-13-01"}',
        b"[1, 2]",
        b'{"n": 2}',
    )
    assert result.batch.column("_kafka_value").to_pylist() == [
        {"n": 1, "t": None},
        {"n": 2, "t": None},
    ]
    reasons = {int(e.offset): e.reason for e in result.errors}
    assert sorted(reasons) == [1, 2, 3, 4]
    assert "does not fit" in reasons[1]
    assert "does not parse" in reasons[2]
    assert "does not fit its schema" in reasons[3]


def test_an_array_where_the_schema_has_an_object_is_a_record_error() -> None:
    """A JSON array where the schema has an object (or an object where it has an array)
    fails that record alone, wherever it comes in the batch. (Arrow reads a list as an
    object's fields by position when no object came before it, and fails the whole
    batch when one did: the converter used to raise out of the batch, or store it.)"""
    conv = converter(
        schema(
            obj(p=obj(x={"type": "string"}), tags={"type": "array", "items": {"type": "string"}})
        )
    )
    result = convert_values(
        conv,
        b'{"p": {"x": "a"}}',
        b"[]",
        b'{"p": ["b"]}',
        b'{"tags": {"t": "u"}}',
        b'{"p": {"x": "d"}, "tags": ["e"]}',
    )
    assert result.batch.column("_kafka_value").to_pylist() == [
        {"p": {"x": "a"}, "tags": None},
        {"p": {"x": "d"}, "tags": ["e"]},
    ]
    reasons = {int(e.offset): e.reason for e in result.errors}
    assert sorted(reasons) == [1, 2, 3]
    assert "the value is a JSON array, not an object" in reasons[1]
    assert "field 'p' is a JSON array, not an object" in reasons[2]
    assert "field 'tags' is a JSON object, not an array" in reasons[3]
    alone = convert_values(conv, b'["c"]', b'{"p": {"x": "f"}}')
    assert [int(e.offset) for e in alone.errors] == [0]
    assert alone.batch.column("_kafka_value").to_pylist() == [{"p": {"x": "f"}, "tags": None}]
