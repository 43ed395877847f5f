"""Compatibility per schema type and level: each change is checked in both directions
and the level's verdict is derived the way Confluent defines the levels."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from floe.registry.core import compatibility
from floe.registry.core.model import CompatibilityLevel as L
from floe.registry.core.model import SchemaType
from floe.registry.core.schemas import parse


def avro(*fields: dict[str, object], name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def jsch(props: dict[str, object], *, required: Sequence[str] = (), closed: bool = False) -> str:
    out: dict[str, object] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return json.dumps(out)


def proto(body: str, *, package: str = "p", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\nmessage M {{\n{body}\n}}\n'


INT = {"name": "a", "type": "int"}
# (type, case, old, new, backward ok, forward ok)
CASES = [
    (
        SchemaType.AVRO,
        "add field with default",
        avro(INT),
        avro(INT, {"name": "b", "type": "string", "default": ""}),
        True,
        True,
    ),
    (
        SchemaType.AVRO,
        "add field without default",
        avro(INT),
        avro(INT, {"name": "b", "type": "string"}),
        False,
        True,
    ),
    (
        SchemaType.AVRO,
        "remove field with default",
        avro(INT, {"name": "b", "type": "string", "default": ""}),
        avro(INT),
        True,
        True,
    ),
    (
        SchemaType.AVRO,
        "remove field without default",
        avro(INT, {"name": "b", "type": "string"}),
        avro(INT),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "change type int to string",
        avro(INT),
        avro({"name": "a", "type": "string"}),
        False,
        False,
    ),
    (
        SchemaType.AVRO,
        "promote int to long",
        avro(INT),
        avro({"name": "a", "type": "long"}),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "make field nullable",
        avro(INT),
        avro({"name": "a", "type": ["null", "int"], "default": None}),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "rename field with alias",
        avro(INT),
        avro({"name": "z", "type": "int", "aliases": ["a"]}),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "rename field without alias",
        avro(INT),
        avro({"name": "z", "type": "int"}),
        False,
        False,
    ),
    (
        SchemaType.AVRO,
        "rename record with alias",
        avro(INT, name="Old"),
        json.dumps({"type": "record", "name": "New", "aliases": ["Old"], "fields": [INT]}),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "rename namespaced record with alias",
        json.dumps({"type": "record", "name": "Old", "namespace": "n", "fields": [INT]}),
        json.dumps(
            {"type": "record", "name": "New", "namespace": "n", "aliases": ["Old"], "fields": [INT]}
        ),
        True,
        False,
    ),
    (
        SchemaType.AVRO,
        "rename record without alias",
        avro(INT, name="Old"),
        avro(INT, name="New"),
        False,
        False,
    ),
    (
        SchemaType.AVRO,
        "add enum symbol",
        json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}),
        json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]}),
        True,
        False,
    ),
    (
        SchemaType.JSON,
        "add property to open model",
        jsch({"a": {"type": "string"}}),
        jsch({"a": {"type": "string"}, "b": {"type": "integer"}}),
        False,
        True,
    ),
    (
        SchemaType.JSON,
        "add optional property to closed model",
        jsch({"a": {"type": "string"}}, closed=True),
        jsch({"a": {"type": "string"}, "b": {"type": "integer"}}, closed=True),
        True,
        False,
    ),
    (
        SchemaType.JSON,
        "add required property to closed model",
        jsch({"a": {"type": "string"}}, closed=True),
        jsch({"a": {"type": "string"}, "b": {"type": "integer"}}, required=["b"], closed=True),
        False,
        False,
    ),
    (
        SchemaType.JSON,
        "remove property from open model",
        jsch({"a": {"type": "string"}, "b": {"type": "integer"}}),
        jsch({"a": {"type": "string"}}),
        True,
        False,
    ),
    (
        SchemaType.JSON,
        "change type string to integer",
        jsch({"a": {"type": "string"}}),
        jsch({"a": {"type": "integer"}}),
        False,
        False,
    ),
    (
        SchemaType.JSON,
        "widen integer to number",
        jsch({"a": {"type": "integer"}}),
        jsch({"a": {"type": "number"}}),
        True,
        False,
    ),
    (
        SchemaType.JSON,
        "extend enum",
        jsch({"a": {"enum": ["x"]}}),
        jsch({"a": {"enum": ["x", "y"]}}),
        True,
        False,
    ),
    (
        SchemaType.JSON,
        "make property required",
        jsch({"a": {"type": "string"}}),
        jsch({"a": {"type": "string"}}, required=["a"]),
        False,
        True,
    ),
    (
        SchemaType.JSON,
        "tighten maxLength",
        jsch({"a": {"type": "string", "maxLength": 9}}),
        jsch({"a": {"type": "string", "maxLength": 5}}),
        False,
        True,
    ),
    (
        SchemaType.PROTOBUF,
        "add field",
        proto("int32 a = 1;"),
        proto("int32 a = 1;\nstring b = 2;"),
        True,
        True,
    ),
    (
        SchemaType.PROTOBUF,
        "remove field",
        proto("int32 a = 1;\nstring b = 2;"),
        proto("int32 a = 1;"),
        True,
        True,
    ),
    (SchemaType.PROTOBUF, "rename field", proto("int32 a = 1;"), proto("int32 z = 1;"), True, True),
    (
        SchemaType.PROTOBUF,
        "int32 to int64 (same wire type)",
        proto("int32 a = 1;"),
        proto("int64 a = 1;"),
        True,
        True,
    ),
    (
        SchemaType.PROTOBUF,
        "int32 to string",
        proto("int32 a = 1;"),
        proto("string a = 1;"),
        False,
        False,
    ),
    (
        SchemaType.PROTOBUF,
        "scalar to message",
        proto("int32 a = 1;"),
        proto("N a = 1;\nmessage N { int32 x = 1; }"),
        False,
        False,
    ),
    (
        SchemaType.PROTOBUF,
        "change package",
        proto("int32 a = 1;"),
        proto("int32 a = 1;", package="q"),
        False,
        False,
    ),
    (
        SchemaType.PROTOBUF,
        "add required field (proto2)",
        proto("optional int32 a = 1;", syntax="proto2"),
        proto("optional int32 a = 1;\nrequired int32 b = 2;", syntax="proto2"),
        False,
        False,
    ),
    (
        SchemaType.PROTOBUF,
        "move field into existing oneof",
        proto("int32 a = 1;\noneof o { string b = 2; }"),
        proto("oneof o { string b = 2; int32 a = 1; }"),
        False,
        True,
    ),
    (
        SchemaType.PROTOBUF,
        "remove message",
        proto("int32 a = 1;") + "message Other {}\n",
        proto("int32 a = 1;"),
        False,
        True,
    ),
]


def verdict(level: L, schema_type: SchemaType, old: str, new: str) -> bool:
    return not compatibility.check(level, parse(schema_type, new), [(1, parse(schema_type, old))])


@pytest.mark.parametrize(
    ("schema_type", "old", "new", "backward", "forward"),
    [pytest.param(t, o, n, b, f, id=f"{t.value}: {c}") for t, c, o, n, b, f in CASES],
)
def test_levels(schema_type: SchemaType, old: str, new: str, backward: bool, forward: bool) -> None:
    expected = {
        L.NONE: True,
        L.BACKWARD: backward,
        L.BACKWARD_TRANSITIVE: backward,
        L.FORWARD: forward,
        L.FORWARD_TRANSITIVE: forward,
        L.FULL: backward and forward,
        L.FULL_TRANSITIVE: backward and forward,
    }
    got = {level: verdict(level, schema_type, old, new) for level in L}
    assert got == expected


def test_transitive_levels_check_every_version() -> None:
    v1 = parse(SchemaType.AVRO, avro(INT))
    v2 = parse(SchemaType.AVRO, avro(INT, {"name": "b", "type": "string", "default": "x"}))
    v3 = parse(SchemaType.AVRO, avro(INT, {"name": "b", "type": "string"}))
    history = [(1, v1), (2, v2)]
    assert compatibility.check(L.BACKWARD, v3, history) == []
    problems = compatibility.check(L.BACKWARD_TRANSITIVE, v3, history)
    assert problems and all("version 1" in p for p in problems)
    assert compatibility.check(L.FULL_TRANSITIVE, v3, history)


def test_schema_type_change_is_incompatible() -> None:
    old = parse(SchemaType.AVRO, '"string"')
    new = parse(SchemaType.JSON, '{"type": "string"}')
    assert compatibility.check(L.BACKWARD, new, [(1, old)])
    assert compatibility.check(L.NONE, new, [(1, old)]) == []
