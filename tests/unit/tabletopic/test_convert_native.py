"""The native Avro path against the per-record path: the same batch, the same errors.

A differential test generates Avro writer schemas and table schemas in pairs (nested
records, arrays, maps, nullable unions in both orders, enums, fixed, bytes, decimals on
bytes and fixed, every logical type, a table with more or fewer fields and wider types,
now and then a type the native path does not handle), payloads (valid, and broken in
the ways the native reader is lenient about), and compares the converter with
``min_native_run=1`` (every run native, bisected down to single records) against
``min_native_run=None`` (per record, the reference).
"""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from convert_helpers import PARTITION, assert_same, bulk_and_reference, counting
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.model import SchemaId
from floe.tabletopic.convert import (
    ConversionResult,
    Converter,
    ConvertType,
    PartSpec,
    UnsupportedSchemaError,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.avro import AvroCodec
from floe.tabletopic.convert.avro_native import NativeAvroDecoder
from floe.tabletopic.convert.temporal import MAX_MILLIS
from floe.tabletopic.convert.wire import frame, zigzag

# Apache avro 1.12 (the registry's parser) warns on local-timestamp-*; see test_convert_avro
pytestmark = pytest.mark.filterwarnings("ignore::avro.errors.IgnoredLogicalType")

KEY = PartSpec(ConvertType.STRING)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
INT = st.integers(-(2**31), 2**31 - 1)
LONG = st.integers(-(2**63), 2**63 - 1)
# mostly values whose microseconds fit, sometimes any long (a per-record range error)
MILLIS = st.integers(-(2**53), 2**53) | LONG
PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "int": INT,
    "long": LONG,
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=8),
    "string": TEXT,
}
WIDER = {"int": "long", "float": "double"}
# logical type -> (underlying type, raw values: payloads are written with the decode schema)
LOGICAL: dict[str, tuple[str, st.SearchStrategy[Any]]] = {
    "date": ("int", INT),
    "time-millis": ("int", INT),
    "time-micros": ("long", LONG),
    "timestamp-millis": ("long", MILLIS),
    "timestamp-micros": ("long", LONG),
    "local-timestamp-millis": ("long", MILLIS),
    "local-timestamp-micros": ("long", LONG),
    "uuid": ("string", st.uuids().map(str) | TEXT),
}


@dataclass
class Pair:
    """A writer type, the table's type for it, the writer's values, and whether the pair
    is one the native path refuses (then both paths decode per record)."""

    writer: Any
    table: Any
    values: st.SearchStrategy[Any]
    refused: bool = False


def _decimal(draw: st.DrawFn, names: Iterator[int]) -> Pair:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    writer: dict[str, Any] = {"logicalType": "decimal", "precision": precision, "scale": scale}
    if draw(st.booleans()):
        writer["type"] = "bytes"
    else:  # big enough for 10**precision, sometimes beyond 16 bytes
        need = (10**precision).bit_length() // 8 + 1
        writer.update(type="fixed", name=f"D{next(names)}", size=draw(st.integers(need, 20)))
    table = {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": draw(st.integers(precision, 38)),
        "scale": scale,
    }
    bound = 10**precision - 1
    values = st.integers(-bound, bound).map(lambda u: Decimal(f"{u}e-{scale}"))  # exact
    return Pair(writer, table, values)


@st.composite
def pairs(draw: st.DrawFn, names: Iterator[int], depth: int = 0, *, union: bool = True) -> Pair:
    """A writer type and a table type for it (see :class:`Pair`); ``union``: it may be a
    nullable union (not directly inside another)."""
    kinds = ["primitive", "logical", "decimal", "enum", "fixed", "refused"]
    if depth < 3:
        kinds += ["record", "record", "array", "map"] + ["nullable", "nullable"] * union
    kind = draw(st.sampled_from(kinds))
    if kind == "primitive":
        name = draw(st.sampled_from(sorted(PRIMITIVES)))
        wider = (draw(st.booleans()) and WIDER.get(name)) or name
        return Pair(name, wider, PRIMITIVES[name])
    if kind == "logical":
        logical = draw(st.sampled_from(sorted(LOGICAL)))
        underlying, values = LOGICAL[logical]
        t = {"type": underlying, "logicalType": logical}
        return Pair(t, t, values)
    if kind == "decimal":
        return _decimal(draw, names)
    if kind == "enum":
        symbols = draw(st.lists(st.from_regex(r"[A-Z][a-z0-9_]{0,3}", fullmatch=True),
                                min_size=1, max_size=4, unique=True))  # fmt: skip
        writer = {"type": "enum", "name": f"E{next(names)}", "symbols": symbols}
        return Pair(writer, "string", st.sampled_from(symbols))
    if kind == "fixed":
        size = draw(st.integers(1, 20))
        t = {"type": "fixed", "name": f"F{next(names)}", "size": size}
        return Pair(t, {**t, "name": f"F{next(names)}"}, st.binary(min_size=size, max_size=size))
    if kind == "refused":  # a table type the writer's values do not fit
        return Pair("long", "int", LONG, refused=True)
    if kind == "record":
        return draw(records(names, depth + 1))
    inner = draw(pairs(names, depth + 1, union=kind != "nullable"))
    if kind == "array":
        return Pair(
            {"type": "array", "items": inner.writer},
            {"type": "array", "items": inner.table},
            st.lists(inner.values, max_size=3),
            inner.refused,
        )
    if kind == "map":
        return Pair(
            {"type": "map", "values": inner.writer},
            {"type": "map", "values": inner.table},
            st.dictionaries(TEXT, inner.values, max_size=3),
            inner.refused,
        )
    writer = ["null", inner.writer] if draw(st.booleans()) else [inner.writer, "null"]
    table = ["null", inner.table] if draw(st.booleans()) else inner.table
    return Pair(writer, table, st.none() | inner.values, inner.refused)


@st.composite
def records(draw: st.DrawFn, names: Iterator[int], depth: int = 0) -> Pair:
    """A record pair: some writer fields missing from the table, some table-only fields."""
    writer_fields, table_fields, values = [], [], {}
    refused = False
    for i in range(draw(st.integers(1, 4))):
        inner = draw(pairs(names, depth))
        writer_fields.append({"name": f"f{i}", "type": inner.writer})
        values[f"f{i}"] = inner.values
        if draw(st.integers(0, 4)):  # mostly in the table too
            table_fields.append({"name": f"f{i}", "type": inner.table})
            refused = refused or inner.refused
    for j in range(draw(st.integers(0 if table_fields else 1, 2))):
        table_fields.append({"name": f"x{j}", "type": draw(pairs(names, 3)).table})
    name = f"R{next(names)}"
    return Pair(
        {"type": "record", "name": name, "fields": writer_fields},
        {"type": "record", "name": name, "fields": table_fields},
        st.fixed_dictionaries(values),
        refused,
    )


@dataclass
class Case:
    schemas: dict[int, Any]  # schema id -> writer schema (by_latest_schema: id 1)
    table: Any
    flatten: bool
    latest: bool
    records: list[Record]
    valid: set[int]  # offsets of records written as they should be
    refused: bool


def _avro(schema: Any) -> AvroSchema:
    return AvroSchema(json.dumps(schema))


def _writer(schema: Any) -> Callable[[Any], bytes]:
    """Encodes raw values (logical types as their underlying numbers) like producers."""
    parsed = fastavro.parse_schema(AvroCodec(_avro(schema)).decode_schema)

    def write(value: Any) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, value)
        return buf.getvalue()

    return write


KINDS = ["valid"] * 8 + ["tombstone", "bad ts", "bad key"]
KINDS += ["trailing", "truncated", "flip", "garbage", "unknown id", "magic", "short"]


def _break(draw: st.DrawFn, kind: str, payload: bytes, *, latest: bool) -> bytes | None:
    """``payload`` broken the way ``kind`` says."""
    if kind == "tombstone":
        return None
    if kind == "trailing":
        return payload + draw(st.binary(min_size=1, max_size=3))
    if kind == "truncated":
        return payload[: draw(st.integers(0, max(0, len(payload) - 1)))]
    if kind == "flip" and payload:
        at = draw(st.integers(0, len(payload) - 1))
        return payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1 :]
    if kind == "garbage":
        garbage = draw(st.binary(max_size=12))
        return garbage if latest else frame(1, garbage)
    if kind == "unknown id" and not latest:
        return frame(99, payload[5:])
    if kind == "magic":
        return b"\x01" + payload[1:]
    if kind == "short":
        return payload[:4]
    return payload


@st.composite
def cases(draw: st.DrawFn) -> Case:
    names = itertools.count()
    flatten = draw(st.booleans())
    pair = draw(records(names) if flatten else pairs(names))
    latest = draw(st.booleans())
    schemas = {1: pair.writer}
    writers = {1: _writer(pair.writer)}
    is_record = isinstance(pair.writer, dict) and pair.writer["type"] == "record"
    if is_record and not latest:  # id 2: the same record without some of its fields
        fields = draw(st.lists(st.sampled_from(pair.writer["fields"]), min_size=1, unique_by=str))
        schemas[2] = {**pair.writer, "fields": [f for f in pair.writer["fields"] if f in fields]}
        writers[2] = _writer(schemas[2])
    out, valid = [], set()
    for offset in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(KINDS))
        schema_id = draw(st.sampled_from(sorted(schemas)))
        value = draw(pair.values)
        if schema_id == 2:
            value = {f["name"]: value[f["name"]] for f in schemas[2]["fields"]}
        body = writers[schema_id](value)
        payload = _break(draw, kind, body if latest else frame(schema_id, body), latest=latest)
        timestamp = MAX_MILLIS + 1 if kind == "bad ts" else draw(st.integers(-1, 2**42))
        key = b"\xff" if kind == "bad key" else draw(st.none() | st.just(b"k%d" % offset))
        out.append(Record(offset, timestamp, key, payload, (("h", b"v"),)))
        if kind == "valid":
            valid.add(offset)
    return Case(schemas, pair.table, flatten, latest, out, valid, pair.refused)


def _spec(case: Case) -> PartSpec:
    if case.latest:
        return PartSpec(ConvertType.BY_LATEST_SCHEMA, latest=_avro(case.schemas[1]))
    registry = {SchemaId(i): _avro(s) for i, s in case.schemas.items()}
    return PartSpec(ConvertType.BY_SCHEMA_ID, lookup=registry.get)


def both(
    table: Any, value: PartSpec, records: list[Record], *, flatten: bool
) -> tuple[ConversionResult, int]:
    """The native result (checked equal to the per-record one) and its native decodes."""
    schema = table_schema(source_type(value, _avro(table)), source_type(KEY), flatten=flatten)
    return bulk_and_reference(schema, value, KEY, records, NativeAvroDecoder, flatten=flatten)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases())
def test_native_path_equals_the_per_record_path(case: Case) -> None:
    got, native = both(case.table, _spec(case), case.records, flatten=case.flatten)
    offsets = got.batch.column("_kafka_metadata").field("offset").to_pylist()
    if not case.refused and case.valid & set(offsets):
        assert native > 0, "valid payloads of a native schema were decoded per record"
    event("native decodes" if native else "per record only")


CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "floe.test",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["view", "buy"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def _click(i: int) -> bytes:
    return _writer(CLICK)(
        {
            "user": f"user-{i}",
            "referrer": None if i % 3 else f"https://example.com/{i}",
            "kind": "buy" if i % 7 == 0 else "view",
            "ts": 1_700_000_000_000 + i,
            "tags": [f"t{i % 5}"] * (i % 3),
        }
    )


@pytest.mark.parametrize("flatten", [False, True])
def test_a_corrupt_body_in_the_middle_of_a_run_fails_alone(flatten: bool) -> None:
    bodies = [frame(1, _click(i)) for i in range(300)]
    bodies[150] = bodies[150][:-3]  # truncated: the reader would run into the next record
    records = [Record(i, 1_700_000_000_000 + i, b"k", b) for i, b in enumerate(bodies)]
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): _avro(CLICK)}.get)
    schema = table_schema(source_type(value, _avro(CLICK)), source_type(KEY), flatten=flatten)
    native = Converter(schema, value, KEY, flatten=flatten)  # the default min_native_run
    with counting(NativeAvroDecoder) as done:
        got = native.convert(PARTITION, records)
    assert done[0] > 0
    assert [(e.partition, e.offset) for e in got.errors] == [(PARTITION, 150)]
    assert "does not decode" in got.errors[0].reason
    offsets = got.batch.column("_kafka_metadata").field("offset").to_pylist()
    assert offsets == [i for i in range(300) if i != 150]
    reference = Converter(schema, value, KEY, flatten=flatten, min_native_run=None)
    assert_same(got, reference.convert(PARTITION, records))


def test_runs_of_interleaved_schema_ids_keep_the_input_order() -> None:
    v2 = {**CLICK, "fields": [*CLICK["fields"][:2], {"name": "extra", "type": "int"}]}
    write2 = _writer(v2)
    records = []
    for i in range(400):
        if i % 50 == 7:
            payload = None
        elif (i // 30) % 2:
            payload = frame(2, write2({"user": f"u{i}", "referrer": None, "extra": i}))
        else:
            payload = frame(1, _click(i))
        records.append(Record(i, i, None, payload))
    value = PartSpec(
        ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): _avro(CLICK), SchemaId(2): _avro(v2)}.get
    )
    schema = table_schema(source_type(value, _avro(CLICK)), source_type(KEY), flatten=True)
    with counting(NativeAvroDecoder) as done:
        got = Converter(schema, value, KEY, flatten=True).convert(PARTITION, records)
    assert done[0] == 2  # one run per schema id
    reference = Converter(schema, value, KEY, flatten=True, min_native_run=None)
    assert_same(got, reference.convert(PARTITION, records))
    assert got.batch.column("user").to_pylist()[29:32] == ["user-29", "u30", "u31"]


def _record_of(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": n, "type": t} for n, t in fields]}


LENIENT = [  # (writer type of field "f", body of a one-field record, table type of "f")
    ("union branch 2", ["null", "int"], zigzag(2) + zigzag(5), ["null", "int"]),
    ("union branch -1", ["null", "int"], zigzag(-1) + zigzag(5), ["null", "int"]),
    ("union branch 5, null second", ["int", "null"], zigzag(5), ["null", "int"]),
    ("union branch 2 in a dropped field", ["null", "int"], zigzag(2) + zigzag(5), None),
    (
        "map repeats a key",
        {"type": "map", "values": "int"},
        zigzag(3)
        + b"".join(zigzag(1) + k + zigzag(v) for k, v in [(b"a", 1), (b"b", 2), (b"a", 3)])
        + zigzag(0),
        {"type": "map", "values": "int"},
    ),
    (
        "decimal beyond its precision (fastavro rounds)",
        {"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 0},
        zigzag(2) + (1234).to_bytes(2, "big"),
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 0},
    ),
    (
        "decimal of 17 bytes",
        {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0},
        zigzag(17) + b"\xff" * 16 + b"\xfe",
        {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0},
    ),
    ("boolean byte 2", "boolean", b"\x02", "boolean"),
    ("int beyond 32 bits", "int", zigzag(2**31), "int"),
    ("int beyond 32 bits into long", "int", zigzag(-(2**31) - 1), "long"),
    ("long varint of 10 bytes, high bits set", "long", b"\xff" * 9 + b"\x7f", "long"),
    ("long varint of 11 bytes", "long", b"\x80" * 10 + b"\x01", "long"),
    (
        "enum index -1 (fastavro: the last symbol)",
        {"type": "enum", "name": "E", "symbols": ["A", "B"]},
        zigzag(-1),
        "string",
    ),
    ("enum index 2", {"type": "enum", "name": "E", "symbols": ["A", "B"]}, zigzag(2), "string"),
    ("string of invalid UTF-8", "string", zigzag(2) + b"\xc3\x28", "string"),
    ("string of negative length", "string", zigzag(-1), "string"),
    (
        "array in negative-count blocks",
        {"type": "array", "items": "int"},
        zigzag(-2) + zigzag(2) + zigzag(1) + zigzag(2) + zigzag(1) + zigzag(3) + zigzag(0),
        {"type": "array", "items": "long"},
    ),
    (
        "timestamp-millis beyond 64-bit micros",
        {"type": "long", "logicalType": "timestamp-millis"},
        zigzag(2**62),
        {"type": "long", "logicalType": "timestamp-millis"},
    ),
    (
        "timestamp-millis beyond 64-bit micros in a dropped field",
        {"type": "long", "logicalType": "timestamp-millis"},
        zigzag(2**62),
        None,
    ),
    ("trailing byte", "int", zigzag(1) + b"\x00", "int"),
    ("short datum", "string", zigzag(5) + b"ab", "string"),
]


@pytest.mark.parametrize(
    ("writer", "body", "table"), [c[1:] for c in LENIENT], ids=[c[0] for c in LENIENT]
)
def test_payloads_the_native_reader_is_lenient_about(writer: Any, body: bytes, table: Any) -> None:
    """Each bad payload sits between good ones: the result is the per-record one."""
    good = {"int": 1}
    schema = _record_of(("f", writer), ("g", "int"))
    table_record = _record_of(*([] if table is None else [("f", table)]), ("g", "int"))
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): _avro(schema)}.get)
    payloads = [frame(1, body + zigzag(7))]
    if writer == "int":
        payloads = [frame(1, zigzag(good["int"]) + zigzag(7)), *payloads] * 2
    records = [Record(i, 0, None, p) for i, p in enumerate(payloads * 3)]
    both(table_record, value, records, flatten=True)
    both(table_record, value, records, flatten=False)


def test_named_types_defined_in_a_field_the_table_lacks() -> None:
    inner = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "long"}]}
    writer = _record_of(("a", inner), ("b", "In"), ("c", {"type": "array", "items": "In"}))
    table = _record_of(("b", inner), ("c", {"type": "array", "items": "In"}))
    write = _writer(writer)
    payloads = [
        frame(1, write({"a": {"x": i}, "b": {"x": -i}, "c": [{"x": i}] * i})) for i in range(5)
    ]
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): _avro(writer)}.get)
    got, native = both(table, value, [Record(i, 0, None, p) for i, p in enumerate(payloads)],
                       flatten=True)  # fmt: skip
    assert native == 1
    assert got.batch.column("b").to_pylist() == [{"x": -i} for i in range(5)]


def test_a_pair_of_types_the_native_path_refuses_decodes_per_record() -> None:
    writer = _record_of(("f", "long"))
    codec = AvroCodec(_avro(writer))
    with pytest.raises(UnsupportedSchemaError, match="into a int32 column"):
        NativeAvroDecoder(codec, pa.struct([("f", pa.int32())]), framed=True)
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): _avro(writer)}.get)
    payloads = [frame(1, _writer(writer)({"f": v})) for v in (1, 2**40, 3)]
    records = [Record(i, 0, None, p) for i, p in enumerate(payloads)]
    got, native = both(_record_of(("f", "int")), value, records, flatten=True)
    assert native == 0
    assert [e.offset for e in got.errors] == [1]


def test_by_latest_schema_decodes_natively() -> None:
    value = PartSpec(ConvertType.BY_LATEST_SCHEMA, latest=_avro(CLICK))
    records = [Record(i, i, None, _click(i)) for i in range(100)]
    records[40] = Record(40, 40, None, frame(1, _click(40)))  # framed: trailing bytes
    got, native = both(CLICK, value, records, flatten=True)
    assert native > 0
    assert [e.offset for e in got.errors] == [40]


def test_decoding_natively_does_not_load_polars() -> None:
    """polars-avro's package imports polars (~40 MB in every Spark Python worker); the
    reader is loaded without it."""
    script = """
import json, sys
import pyarrow as pa
from floe.registry.core.avro import AvroSchema
from floe.tabletopic.convert.avro import AvroCodec
from floe.tabletopic.convert.avro_native import NativeAvroDecoder
from floe.tabletopic.convert.wire import frame
codec = AvroCodec(AvroSchema(json.dumps(
    {"type": "record", "name": "R", "fields": [{"name": "f", "type": "long"}]})))
decoder = NativeAvroDecoder(codec, pa.struct([("f", pa.int64())]), framed=True)
# zigzag varints of 1, 2, 3
array = decoder.decode([frame(1, bytes([2 * v])) for v in (1, 2, 3)])
print(json.dumps([array.to_pylist(), sorted(m for m in sys.modules if "polars" in m)]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    values, modules = json.loads(done.stdout)
    assert values == [{"f": 1}, {"f": 2}, {"f": 3}]
    assert modules == ["polars_avro._avro_rs"]
