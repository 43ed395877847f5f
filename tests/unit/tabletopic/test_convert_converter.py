"""The record converter: layout columns, keys, headers, metadata, flatten, schema
versions in one batch, and bad records as values."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from convert_helpers import PARTITION, by_id, converter, records
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.types import MapType

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.json_schema import JsonSchema
from floe.tabletopic.convert import (
    ConversionError,
    Converter,
    ConvertType,
    PartSpec,
    TimestampKind,
    UnsupportedSchemaError,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.layout import FIELD_ID, UTC_MICROS, arrow_schema
from floe.tabletopic.convert.wire import frame
from floe.types import Offset

V1 = {"type": "record", "name": "V", "fields": [{"name": "a", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "V",
    "fields": [
        {"name": "a", "type": "long"},
        {"name": "b", "type": ["null", "string"], "default": None},
    ],
}
KEY = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}


def avro(schema: Any) -> AvroSchema:
    return AvroSchema(json.dumps(schema))


def encode(schema: Any, value: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def fixed(value: ConvertType, key: ConvertType) -> Converter:
    v, k = PartSpec(value), PartSpec(key)
    return Converter(table_schema(source_type(v), source_type(k), flatten=False), v, k,
                     flatten=False)  # fmt: skip


def test_raw_and_string_layout_keys_headers_and_metadata() -> None:
    conv = fixed(ConvertType.RAW, ConvertType.STRING)
    assert conv.schema.names == ["_kafka_value", "_kafka_key", "_kafka_header", "_kafka_metadata"]
    recs = [
        Record(10, 1_700_000_000_123, b"k\xc3\xa9", b"\x00\x01", (("h", b"1"), ("h", None))),
        Record(11, -1, None, None, ()),
    ]
    result = conv.convert(PARTITION, recs, TimestampKind.LOG_APPEND_TIME)
    assert result.errors == ()
    assert result.batch.to_pylist() == [
        {
            "_kafka_value": b"\x00\x01",
            "_kafka_key": "ké",
            "_kafka_header": [("h", b"1"), ("h", None)],
            "_kafka_metadata": {
                "partition": 2,
                "offset": 10,
                "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC),
                "timestamp_type": "LogAppendTime",
            },
        },
        {
            "_kafka_value": None,
            "_kafka_key": None,
            "_kafka_header": [],
            "_kafka_metadata": {
                "partition": 2,
                "offset": 11,
                "timestamp": None,
                "timestamp_type": "LogAppendTime",
            },
        },
    ]
    assert result.batch.schema.field("_kafka_metadata").type.field("timestamp").type == UTC_MICROS


def test_string_values_binary_keys_and_per_record_timestamp_types() -> None:
    conv = fixed(ConvertType.STRING, ConvertType.RAW)
    recs = [Record(0, 0, b"\xff", b"ok"), Record(1, 0, None, b"\xff\xfe"), Record(2, 0, None, b"")]
    kinds = [TimestampKind.CREATE_TIME, TimestampKind.CREATE_TIME, TimestampKind.LOG_APPEND_TIME]
    result = conv.convert(PARTITION, recs, kinds)
    assert result.batch.column("_kafka_value").to_pylist() == ["ok", ""]
    assert result.batch.column("_kafka_key").to_pylist() == [b"\xff", None]
    meta = result.batch.column("_kafka_metadata").to_pylist()
    assert [m["timestamp_type"] for m in meta] == ["CreateTime", "LogAppendTime"]
    assert result.errors == (ConversionError(PARTITION, Offset(1), result.errors[0].reason),)
    assert "utf-8" in result.errors[0].reason


def test_struct_keys_by_schema_id() -> None:
    key = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={1: avro(KEY)}.get, latest=avro(KEY))
    conv = converter(avro(V1), key=key)
    recs = [Record(0, 0, frame(1, encode(KEY, {"id": 7})), frame(1, encode(V1, {"a": 1})))]
    result = conv.convert(PARTITION, recs)
    assert result.batch.column("_kafka_key").to_pylist() == [{"id": 7}]


def test_by_latest_schema_reads_payloads_without_prefix() -> None:
    spec = PartSpec(ConvertType.BY_LATEST_SCHEMA, latest=avro(V1))
    key = PartSpec(ConvertType.STRING)
    table = table_schema(source_type(spec), source_type(key), flatten=True)
    conv = Converter(table, spec, key, flatten=True)
    result = conv.convert(PARTITION, records(encode(V1, {"a": 5}), frame(1, encode(V1, {"a": 5}))))
    assert result.batch.column("a").to_pylist() == [5]
    assert [e.offset for e in result.errors] == [1]
    assert "trailing bytes" in result.errors[0].reason


def test_flatten_vs_struct_column() -> None:
    body = frame(1, encode(V2, {"a": 1, "b": "x"}))
    flat = converter(avro(V2), flatten=True).convert(PARTITION, records(body, None))
    assert flat.batch.schema.names[:2] == ["a", "b"]
    assert flat.batch.select(["a", "b"]).to_pylist() == [{"a": 1, "b": "x"}, {"a": None, "b": None}]
    nested = converter(avro(V2)).convert(PARTITION, records(body, None))
    assert nested.batch.column("_kafka_value").to_pylist() == [{"a": 1, "b": "x"}, None]


def test_flatten_refuses_non_records_and_reserved_names() -> None:
    with pytest.raises(UnsupportedSchemaError, match="flatten needs"):
        converter(avro("string"), flatten=True)
    clash = {"type": "record", "name": "C", "fields": [{"name": "_kafka_key", "type": "int"}]}
    with pytest.raises(UnsupportedSchemaError, match="reserved"):
        converter(avro(clash), flatten=True)


def test_schema_versions_in_one_batch_land_in_the_evolved_table() -> None:
    conv = converter(avro(V1), table_from=avro(V2), extra=[avro(V2)], flatten=True)
    recs = records(frame(1, encode(V1, {"a": 1})), frame(2, encode(V2, {"a": 2**40, "b": "y"})))
    result = conv.convert(PARTITION, recs)
    assert result.errors == ()
    assert result.batch.select(["a", "b"]).to_pylist() == [
        {"a": 1, "b": None},
        {"a": 2**40, "b": "y"},
    ]


def test_bad_records_are_values_with_reasons() -> None:
    jschema = JsonSchema(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    refused = JsonSchema(json.dumps({"type": "object"}))
    conv = converter(avro(V1), extra=[jschema, refused])
    good = frame(1, encode(V1, {"a": 1}))
    recs = [
        Record(100, 0, None, good),
        Record(101, 0, None, b"\x01\x00\x00\x00\x01\x02"),  # wrong magic
        Record(102, 0, None, frame(99, b"\x02")),  # unknown id
        Record(103, 0, None, frame(1, b"\x80")),  # truncated varint
        Record(104, 0, None, frame(2, b'{"a": "x"}')),  # decodes, does not fit the table
        Record(105, 0, None, frame(3, b"{}")),  # refused schema
        Record(106, 0, None, b"\x00\x00"),  # too short
        Record(107, 0, None, good),
    ]
    result = conv.convert(PARTITION, recs)
    assert result.batch.column("_kafka_metadata").field("offset").to_pylist() == [100, 107]
    reasons = {int(e.offset): e.reason for e in result.errors}
    assert all(e.partition == PARTITION for e in result.errors)
    assert "magic byte 1" in reasons[101]
    assert reasons[102] == "unknown schema id 99"
    assert "does not decode" in reasons[103]
    assert "does not fit" in reasons[104]
    assert "schema id 3 is not supported" in reasons[105]
    assert "too short" in reasons[106]


def test_arrow_schema_carries_field_ids() -> None:
    s = {
        "type": "record",
        "name": "N",
        "fields": [
            {"name": "l", "type": {"type": "array", "items": "int"}},
            {"name": "m", "type": {"type": "map", "values": "int"}},
        ],
    }
    v, k = by_id(avro(s)), PartSpec(ConvertType.STRING)
    table = table_schema(source_type(v, avro(s)), source_type(k), flatten=True)
    arrow = arrow_schema(table)
    ids: list[int] = []

    def collect(field: pa.Field) -> None:
        ids.append(int(field.metadata[FIELD_ID]))
        t = field.type
        if pa.types.is_struct(t):
            for child in t:
                collect(child)
        elif pa.types.is_map(t):
            collect(t.key_field)
            collect(t.item_field)
        elif pa.types.is_list(t):
            collect(t.value_field)

    for field in arrow:
        collect(field)
    assert sorted(ids) == list(range(1, len(ids) + 1))
    m = table.find_field("m").field_type
    assert isinstance(m, MapType)
    assert {m.key_id, m.value_id} <= set(ids)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=8)),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
            st.integers(-1, 2**42),
        ),
        max_size=15,
    )
)
def test_any_mix_of_good_and_bad_records_keeps_order(
    rows: list[tuple[int | bytes | None, list[tuple[str, bytes | None]], int]],
) -> None:
    conv = converter(avro(V1))
    recs = []
    for offset, (value, headers, ts) in enumerate(rows):
        body = frame(1, encode(V1, {"a": value})) if isinstance(value, int) else value
        recs.append(Record(offset, ts, None, body, tuple(headers)))
    result = conv.convert(PARTITION, recs)
    offsets = result.batch.column("_kafka_metadata").field("offset").to_pylist()
    failed = [e.offset for e in result.errors]
    assert sorted(offsets + failed) == list(range(len(rows)))
    assert offsets == sorted(offsets)
    for row, offset in zip(result.batch.to_pylist(), offsets, strict=True):
        value, headers, _ = rows[offset]
        assert row["_kafka_value"] == (None if value is None else {"a": value})
        assert row["_kafka_header"] == headers
