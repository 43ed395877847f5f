"""Timestamps out of Iceberg's range are per-record errors that name the field and the
value, never a wrapped (garbage) timestamp and never a failed batch.

Iceberg ``timestamp``/``timestamptz`` (Arrow ``timestamp("us")``) hold a signed 64-bit
count of microseconds: a millisecond count beyond 2^63 / 1000 has no representation.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from convert_helpers import PARTITION, convert_values, converter, records
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.json_schema import JsonSchema
from floe.registry.core.protobuf import ProtobufSchema
from floe.tabletopic.convert import Converter, ConvertType, PartSpec, source_type, table_schema
from floe.tabletopic.convert.wire import frame

pytestmark = pytest.mark.filterwarnings("ignore::avro.errors.IgnoredLogicalType")

MAX_US = 2**63 - 1
MIN_US = -(2**63)
MAX_MS = MAX_US // 1000  # the largest millisecond count that fits
MIN_MS = -(-MIN_US // 1000)  # the smallest (rounded towards zero)


def micros(batch: pa.RecordBatch, column: str) -> list[int | None]:
    """A timestamp column as raw microseconds (Python datetimes stop at year 9999)."""
    return list(batch.column(column).cast(pa.int64()).to_pylist())


def reasons(errors: Any) -> dict[int, str]:
    return {int(e.offset): e.reason for e in errors}


# -- the Kafka record timestamp -> _kafka_metadata.timestamp ------------------------------


def test_kafka_record_timestamp_out_of_range_is_a_record_error() -> None:
    v, k = PartSpec(ConvertType.STRING), PartSpec(ConvertType.STRING)
    conv = Converter(table_schema(source_type(v), source_type(k), flatten=False), v, k,
                     flatten=False)  # fmt: skip
    stamps = [1_000, 2**62, MAX_MS, MAX_MS + 1, 2**63 - 1, -1, MIN_MS]
    result = conv.convert(PARTITION, [Record(i, ts, None, b"v") for i, ts in enumerate(stamps)])
    meta = result.batch.column("_kafka_metadata")
    assert meta.field("offset").to_pylist() == [0, 2, 5, 6]
    got = meta.field("timestamp").cast(pa.int64()).to_pylist()
    assert got == [1_000_000, MAX_MS * 1000, None, None]  # negative: no timestamp (-1)
    why = reasons(result.errors)
    assert sorted(why) == [1, 3, 4]
    assert "timestamp" in why[1] and str(2**62) in why[1]
    assert str(2**63 - 1) in why[4]
    assert all("\n" not in r for r in why.values())


# -- Avro ------------------------------------------------------------------------------------


def avro_record(**fields: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "R",
        "fields": [{"name": n, "type": t} for n, t in fields.items()],
    }


def avro_bytes(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    """Encode with the logical types stripped, so that any long can be written."""
    plain = json.loads(json.dumps(schema).replace('"logicalType"', '"ignoredLogicalType"'))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(plain), value)
    return buf.getvalue()


@pytest.mark.parametrize("logical", ["timestamp-millis", "local-timestamp-millis"])
def test_avro_millis_out_of_range_is_a_record_error(logical: str) -> None:
    schema = avro_record(
        ts={"type": "long", "logicalType": logical},
        many={"type": "array", "items": {"type": "long", "logicalType": logical}},
    )
    conv = converter(AvroSchema(json.dumps(schema)), flatten=True)
    values = [
        {"ts": MAX_MS, "many": [MIN_MS]},
        {"ts": 2**62, "many": []},
        {"ts": 0, "many": [1, MIN_MS - 1]},
        {"ts": -5, "many": []},
    ]
    result = convert_values(conv, *(avro_bytes(schema, v) for v in values))
    assert result.batch.column("_kafka_metadata").field("offset").to_pylist() == [0, 3]
    assert micros(result.batch, "ts") == [MAX_MS * 1000, -5000]
    assert result.batch.column("many").cast(pa.list_(pa.int64())).to_pylist() == [
        [MIN_MS * 1000],
        [],
    ]
    why = reasons(result.errors)
    assert sorted(why) == [1, 2]
    assert "'ts'" in why[1] and str(2**62) in why[1] and logical in why[1]
    assert "'many'" in why[2] and str(MIN_MS - 1) in why[2]


def test_avro_micros_dates_and_times_at_their_limits_stay_exact() -> None:
    schema = avro_record(
        us={"type": "long", "logicalType": "timestamp-micros"},
        day={"type": "int", "logicalType": "date"},
        clock={"type": "int", "logicalType": "time-millis"},
    )
    conv = converter(AvroSchema(json.dumps(schema)), flatten=True)
    values = [
        {"us": MAX_US, "day": 2**31 - 1, "clock": 2**31 - 1},
        {"us": MIN_US, "day": -(2**31), "clock": -(2**31)},
    ]
    result = convert_values(conv, *(avro_bytes(schema, v) for v in values))
    assert result.errors == ()
    assert micros(result.batch, "us") == [MAX_US, MIN_US]
    assert result.batch.column("day").cast(pa.int32()).to_pylist() == [2**31 - 1, -(2**31)]
    assert result.batch.column("clock").to_pylist() == [(2**31 - 1) * 1000, -(2**31) * 1000]


# -- JSON Schema -----------------------------------------------------------------------------


def test_json_dates_and_times_out_of_range_name_the_field_and_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "clock": {"type": "string", "format": "time"},
        },
    }
    conv = converter(JsonSchema(json.dumps(schema)), flatten=True)
    result = convert_values(
        conv,
        b'{"at": "0001-01-01T00:00:00+01:00"}',  # before year 1 in UTC: still in range
        b'{"at": "10000-01-01T00:00:00Z"}',
        b'{"day": "0000-12-31"}',
        b'{"clock": "24:00:01"}',
        b'{"at": 1700000000000}',
        b'{"at": "9999-12-31T23:59:59.999999-14:00"}',
    )
    assert result.batch.column("_kafka_metadata").field("offset").to_pylist() == [0, 5]
    assert micros(result.batch, "at") == [-62135600400000000, 253402351199999999]
    why = reasons(result.errors)
    assert sorted(why) == [1, 2, 3, 4]
    assert "'at'" in why[1] and "10000-01-01T00:00:00Z" in why[1]
    assert "'day'" in why[2] and "0000-12-31" in why[2]
    assert "'clock'" in why[3] and "24:00:01" in why[3]
    assert "'at'" in why[4] and "1700000000000" in why[4]


# -- Protobuf google.protobuf.Timestamp ----------------------------------------------------


@pytest.fixture(scope="module")
def event_proto() -> tuple[ProtobufSchema, Any]:
    """package e; message Event { google.protobuf.Timestamp at = 1; }"""
    fdp = descriptor_pb2.FileDescriptorProto(name="e.proto", package="e", syntax="proto3")
    fdp.dependency.append("google/protobuf/timestamp.proto")
    msg = fdp.message_type.add(name="Event")
    msg.field.add(
        name="at",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(fdp.SerializeToString())
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("e.Event"))
    return ProtobufSchema(base64.b64encode(fdp.SerializeToString()).decode()), cls


def test_protobuf_timestamp_out_of_range_is_a_record_error(
    event_proto: tuple[ProtobufSchema, Any],
) -> None:
    schema, event = event_proto
    conv = converter(schema, flatten=True)

    def body(seconds: int, nanos: int) -> bytes:
        msg = event()
        msg.at.seconds = seconds
        msg.at.nanos = nanos
        return frame(1, msg.SerializeToString(), ())

    top = MAX_US // 10**6
    result = conv.convert(
        PARTITION,
        records(
            body(top, 775_807_000),  # exactly the largest microsecond
            body(top, 775_808_000),  # one microsecond beyond
            body(2**62, 0),
            body(-(2**62), 0),
            body(1_700_000_000, 5_000),
        ),
    )
    assert result.batch.column("_kafka_metadata").field("offset").to_pylist() == [0, 4]
    assert micros(result.batch, "at") == [MAX_US, 1_700_000_000_000_005]
    why = reasons(result.errors)
    assert sorted(why) == [1, 2, 3]
    assert "'at'" in why[2] and str(2**62) in why[2]
    assert str(-(2**62)) in why[3]
