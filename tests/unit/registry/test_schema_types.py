"""Parsing, canonical forms and references for AVRO, JSON and PROTOBUF schemas."""

from __future__ import annotations

import base64
import json

import pytest

from floe.registry.core.errors import InvalidSchemaError
from floe.registry.core.model import SchemaType
from floe.registry.core.protobuf_print import print_proto
from floe.registry.core.schemas import Dependency, parse

AVRO, JSON, PROTO = SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF


# -- Avro ---------------------------------------------------------------------------
def test_avro_canonical_ignores_whitespace_and_keeps_docs() -> None:
    a = parse(AVRO, '{"type":"record","name":"A","fields":[{"name":"f","type":"int","doc":"d"}]}')
    b = parse(
        AVRO,
        '{ "type" : "record",\n "name": "A", "fields": [ {"name": "f", '
        '"type": "int", "doc": "d"} ] }',
    )
    assert a.canonical() == b.canonical()
    assert '"doc":"d"' in a.canonical()
    assert parse(AVRO, '"string"').canonical() == '"string"'


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '{"type": "record", "name": "A"}',
        '"nosuchtype"',
        '{"type": "enum", "name": "E", "symbols": ["A", "A"]}',
        "[]1",
    ],
)
def test_avro_invalid(text: str) -> None:
    with pytest.raises(InvalidSchemaError, match="Invalid AVRO schema"):
        parse(AVRO, text)


def test_avro_reference_by_full_name() -> None:
    dep = Dependency(
        "com.x.Address",
        AVRO,
        '{"type":"record","name":"Address","namespace":"com.x","fields":[{"name":"s","type":"string"}]}',
    )
    main = '{"type":"record","name":"User","fields":[{"name":"a","type":"com.x.Address"}]}'
    parsed = parse(AVRO, main, [dep])
    assert '"com.x.Address"' in parsed.canonical()  # referenced, not inlined
    with pytest.raises(InvalidSchemaError):
        parse(AVRO, main)


# -- JSON Schema ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "dialect",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ],
)
def test_json_drafts(dialect: str) -> None:
    ok = {"$schema": dialect, "type": "object", "properties": {"a": {"type": "string"}}}
    parse(JSON, json.dumps(ok))
    with pytest.raises(InvalidSchemaError, match="Invalid JSON schema"):
        parse(JSON, json.dumps({"$schema": dialect, "type": "nosuchtype"}))


def test_json_local_and_cross_subject_refs() -> None:
    local = {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/x"}},
        "definitions": {"x": {"type": "string"}},
    }
    parse(JSON, json.dumps(local))
    dep = Dependency(
        "address.json", JSON, '{"type": "object", "properties": {"s": {"type": "string"}}}'
    )
    main = json.dumps({"type": "object", "properties": {"addr": {"$ref": "address.json"}}})
    parse(JSON, main, [dep])
    with pytest.raises(InvalidSchemaError, match="unresolvable"):
        parse(JSON, main)


def test_json_canonical_sorts_keys() -> None:
    assert (
        parse(JSON, '{"type":"string","maxLength":3}').canonical()
        == parse(JSON, '{"maxLength": 3, "type": "string"}').canonical()
    )
    with pytest.raises(InvalidSchemaError):
        parse(JSON, "[1, 2]")


# -- Protobuf -------------------------------------------------------------------------
PROTO3 = """syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
option java_package = "com.shop";
message Order {
  string id = 1;
  map<string, int64> counts = 2;
  oneof payment { string card = 3; string iban = 4; }
  optional int32 priority = 5;
  repeated Line lines = 6;
  google.protobuf.Timestamp at = 7;
  reserved 10 to 12;
  message Line { string sku = 1; Status status = 2; }
  enum Status { UNKNOWN = 0; OK = 1; }
}
service Orders { rpc Get(Order) returns (stream Order); }
"""

PROTO2 = """syntax = "proto2";
package legacy;
message Item {
  required string id = 1;
  optional int32 qty = 2 [default = 1];
  repeated string tags = 3;
  extensions 100 to 199;
}
"""


@pytest.mark.parametrize("text", [PROTO3, PROTO2])
def test_protobuf_print_round_trip(text: str) -> None:
    parsed = parse(PROTO, text)
    again = parse(PROTO, parsed.canonical())
    assert again.canonical() == parsed.canonical()


def test_protobuf_base64_descriptor_is_the_same_schema() -> None:
    parsed = parse(PROTO, PROTO3)
    serialized = parsed.formatted("serialized", PROTO3)
    assert base64.b64decode(serialized)
    assert parse(PROTO, serialized).canonical() == parsed.canonical()
    assert parsed.formatted(None, PROTO3) == PROTO3


def test_protobuf_references_by_import_path() -> None:
    dep = Dependency(
        "common/money.proto",
        PROTO,
        'syntax = "proto3"; package common; message Money { int64 units = 1; }',
    )
    main = (
        'syntax = "proto3"; package shop; import "common/money.proto";\n'
        "message Price { common.Money amount = 1; }"
    )
    parsed = parse(PROTO, main, [dep])
    assert ".common.Money amount = 1;" in parsed.canonical()
    with pytest.raises(InvalidSchemaError, match="imports without a reference"):
        parse(PROTO, main)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("message {", "mismatched input"),
        ('syntax = "proto3"; message A { Nope x = 1; }', "Nope"),
        ('syntax = "proto3"; message A { int32 x = 1; string y = 1; }', "duplicate"),
        ('syntax = "proto4"; message A {}', "syntax"),
        ('syntax = "proto2"; message A { int32 x = 1; }', "label"),
    ],
)
def test_protobuf_invalid(text: str, match: str) -> None:
    with pytest.raises(InvalidSchemaError, match=match):
        parse(PROTO, text)


def test_protobuf_printer_keeps_proto2_labels_and_defaults() -> None:
    text = print_proto(parse(PROTO, PROTO2).descriptor)  # type: ignore[attr-defined]
    assert "required string id = 1;" in text
    assert "optional int32 qty = 2 [default = 1];" in text
    assert "extensions 100 to 199;" in text
