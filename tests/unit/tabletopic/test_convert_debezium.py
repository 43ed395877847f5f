"""Debezium envelopes (``flatten_debezium``): the row layout with ``_cdc``, the converter
on real fastavro-encoded envelopes in the Confluent wire format (per record and
natively), JSON Schema envelopes, bad envelopes as values, and schema evolution."""

from __future__ import annotations

import base64
import copy
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from convert_helpers import PARTITION, assert_same, by_id, counting
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pyiceberg.schema import Schema

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.json_schema import JsonSchema
from floe.registry.core.protobuf import ProtobufSchema
from floe.tabletopic.convert import (
    AddColumn,
    Converter,
    ConvertType,
    EvolutionPlan,
    PartSpec,
    UnsupportedSchemaError,
    plan_evolution,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.avro_native import NativeAvroDecoder
from floe.tabletopic.convert.wire import frame
from floe.tabletopic.schemas import stage

ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "inventory.public.customers",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "address", "type": ["null", {"type": "record", "name": "Address",
                                               "fields": [{"name": "city", "type": "string"}]}],
         "default": None},
    ],
}  # fmt: skip
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "db", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "lsn", "type": ["null", "long"], "default": None},
    ],
}


def envelope_schema(row: dict[str, Any] = ROW, source: dict[str, Any] = SOURCE) -> dict[str, Any]:
    """Debezium's Avro envelope of ``row`` (as the Avro converter registers it)."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": row["namespace"],
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", row["name"]], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {
                "name": "transaction",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "block",
                        "namespace": "event",
                        "fields": [
                            {"name": "id", "type": "string"},
                            {"name": "total_order", "type": "long"},
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }


ENVELOPE = envelope_schema()
TS = 1_700_000_000_123


def source(n: int = 0) -> dict[str, Any]:
    return {"version": "2.7.0.Final", "connector": "postgresql", "ts_ms": TS - 5, "db": "inv",
            "table": "customers", "lsn": 100 + n}  # fmt: skip


def event(op: str, before: Any = None, after: Any = None, *, n: int = 0) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source(n), "op": op, "ts_ms": TS + n,
            "transaction": None}  # fmt: skip


def encode(schema: dict[str, Any], value: Any, schema_id: int = 1) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(copy.deepcopy(schema)), value)
    return frame(schema_id, buf.getvalue())


def avro(schema: dict[str, Any]) -> AvroSchema:
    return AvroSchema(json.dumps(schema))


def debezium_table(spec: PartSpec, schema: Any, key: PartSpec | None = None) -> Schema:
    key = key or PartSpec(ConvertType.STRING)
    return table_schema(source_type(spec, schema), source_type(key), flatten=True, debezium=True)


def converter(*schemas: dict[str, Any], min_native_run: int | None = None) -> Converter:
    """A by_schema_id converter of Avro envelopes (ids 1, 2...); the table from id 1."""
    parsed = [avro(s) for s in schemas]
    value, key = by_id(*parsed), PartSpec(ConvertType.STRING)
    table = debezium_table(value, parsed[0])
    return Converter(table, value, key, flatten=True, debezium=True, min_native_run=min_native_run)


def alice(**changes: Any) -> dict[str, Any]:
    return {"id": 1, "name": "alice", "address": {"city": "Lyon"}, **changes}


def test_the_row_fields_are_columns_then_cdc_then_the_kafka_columns() -> None:
    table = debezium_table(by_id(avro(ENVELOPE)), avro(ENVELOPE))
    assert [f.name for f in table.fields] == [
        "id", "name", "address", "_cdc", "_kafka_key", "_kafka_header", "_kafka_metadata",
    ]  # fmt: skip
    cdc = table.find_field("_cdc").field_type
    assert [f.name for f in cdc.fields] == ["op", "ts", "offset", "source"]  # type: ignore[attr-defined]
    assert str(table.find_field("_cdc.ts").field_type) == "timestamptz"
    assert str(table.find_field("_cdc.offset").field_type) == "long"
    assert table.find_field("_cdc.source.lsn") is not None  # the source struct as it is
    assert all(not f.required for f in table.fields)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (ROW, "needs a Debezium envelope value schema"),
        ({**ENVELOPE, "fields": [f for f in ENVELOPE["fields"] if f["name"] != "op"]}, "no op"),
        ({"type": "record", "name": "E", "fields": [{"name": "op", "type": "string"}]},
         "no before or after"),
        ({"type": "record", "name": "E", "fields": [{"name": "op", "type": "int"},
                                                     {"name": "after", "type": ROW}]},
         "a Debezium op is a string"),
        ({"type": "record", "name": "E", "fields": [{"name": "op", "type": "string"},
                                                     {"name": "after", "type": "string"}]},
         "the row must be a record"),
        (envelope_schema({**ROW, "fields": [*ROW["fields"], {"name": "_cdc", "type": "int"}]}),
         "_cdc: a row field uses a reserved column name"),
        (envelope_schema({**ROW, "fields": [{"name": "_kafka_key", "type": "int"}]}),
         "_kafka_key: a row field uses a reserved column name"),
    ],
)  # fmt: skip
def test_a_schema_that_is_not_an_envelope_is_refused(schema: dict[str, Any], reason: str) -> None:
    spec = by_id(avro(schema))
    with pytest.raises(UnsupportedSchemaError, match=reason):
        debezium_table(spec, avro(schema))
    # a row field named _cdc is fine for plain flatten
    if "_cdc" in json.dumps(schema):
        table_schema(source_type(spec, avro(ROW)), source_type(PartSpec(ConvertType.STRING)),
                     flatten=True)  # fmt: skip


def cdc(op: str, offset: int, n: int = 0) -> dict[str, Any]:
    ts = datetime.fromtimestamp((TS + n) / 1000, UTC)
    return {"op": op, "ts": ts, "offset": offset, "source": source(n)}


def test_create_update_delete_read_and_a_tombstone() -> None:
    conv = converter(ENVELOPE)
    values = [
        encode(ENVELOPE, event("r", after=alice(name="snap"), n=0)),
        encode(ENVELOPE, event("c", after=alice(), n=1)),
        encode(ENVELOPE, event("u", before=alice(), after=alice(name="al"), n=2)),
        encode(ENVELOPE, event("d", before=alice(name="al"), n=3)),
        None,  # Debezium's tombstone after the delete
    ]
    recs = [Record(10 + i, 1_000, b"1", v) for i, v in enumerate(values)]
    result = conv.convert(PARTITION, recs)
    assert result.errors == ()
    rows = result.batch.to_pylist()
    assert [(r["id"], r["name"], r["address"]) for r in rows] == [
        (1, "snap", {"city": "Lyon"}),
        (1, "alice", {"city": "Lyon"}),
        (1, "al", {"city": "Lyon"}),
        (1, "al", {"city": "Lyon"}),  # a delete's row is its before
        (None, None, None),  # the tombstone stays one
    ]
    assert [r["_cdc"] for r in rows] == [
        cdc("r", 10, 0), cdc("c", 11, 1), cdc("u", 12, 2), cdc("d", 13, 3), None,
    ]  # fmt: skip
    assert [r["_kafka_metadata"]["offset"] for r in rows] == [10, 11, 12, 13, 14]
    assert result.batch.schema.equals(conv.schema, check_metadata=True)


def test_values_that_are_not_envelopes_are_bad_records_named_one_by_one() -> None:
    conv = converter(ENVELOPE)
    plain = {"type": "record", "name": "P", "fields": [{"name": "id", "type": "int"}]}
    payloads = [
        encode(ENVELOPE, event("c", after=alice())),
        encode(ENVELOPE, event("c")),  # no after row
        encode(ENVELOPE, event("d", after=alice())),  # a delete without before
        encode(ENVELOPE, event("t")),  # truncate: no row
        encode(ENVELOPE, event("", after=alice())),  # no op
        encode(ENVELOPE, {**event("c", after=alice()), "ts_ms": 2**62}),
        encode(plain, {"id": 1}),  # another schema (id 1 decodes it wrongly): undecodable
    ]
    result = conv.convert(PARTITION, [Record(i, 1, None, p) for i, p in enumerate(payloads)])
    assert result.batch.num_rows == 1
    reasons = {e.offset: e.reason for e in result.errors}
    assert reasons[1] == "Debezium op 'c' has no after row"
    assert reasons[2] == "Debezium op 'd' has no before row"
    assert reasons[3] == "Debezium op 't' has no after row"
    assert reasons[4] == "value is not a Debezium envelope: it has no op"
    assert reasons[5].startswith("Debezium ts_ms 4611686018427387904 is outside")
    assert "Avro payload does not decode" in reasons[6]


def test_a_schema_id_that_is_not_an_envelope_is_refused_per_record() -> None:
    plain = {"type": "record", "name": "P", "fields": [{"name": "id", "type": "int"}]}
    lookup = {1: avro(ENVELOPE), 2: "schema id 2 is not supported: not an envelope"}
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup=lookup.get)  # type: ignore[arg-type]
    key = PartSpec(ConvertType.STRING)
    conv = Converter(debezium_table(value, avro(ENVELOPE)), value, key, flatten=True,
                     debezium=True)  # fmt: skip
    result = conv.convert(PARTITION, [Record(0, 1, None, encode(plain, {"id": 1}, 2))])
    assert [e.reason for e in result.errors] == ["schema id 2 is not supported: not an envelope"]


def both_paths(table: Schema, value: PartSpec, recs: list[Record]) -> tuple[Any, int]:
    """``recs`` converted natively (runs halved down to single records) and per record
    (the reference): the same batch and errors. Returns the native result and how many
    native decodes returned an array."""
    key = PartSpec(ConvertType.STRING)
    bulk = Converter(table, value, key, flatten=True, debezium=True, min_native_run=1)
    reference = Converter(table, value, key, flatten=True, debezium=True, min_native_run=None)
    with counting(NativeAvroDecoder) as done:
        got = bulk.convert(PARTITION, recs)
    assert_same(got, reference.convert(PARTITION, recs))
    return got, done[0]


def test_native_runs_equal_the_per_record_path_and_bad_envelopes_fall_back() -> None:
    schema = avro(ENVELOPE)
    value = by_id(schema)
    table = debezium_table(value, schema)
    ops = ["c", "u", "d", "r"]
    good = [
        event(op, before=alice(id=i) if op in "ud" else None,
              after=None if op == "d" else alice(id=i, name=f"n{i}"), n=i)
        for i, op in enumerate(ops * 20)
    ]  # fmt: skip
    recs = [Record(i, 1_000 + i, None, encode(ENVELOPE, v)) for i, v in enumerate(good)]
    recs.append(Record(80, 1, b"k", None))  # a tombstone between the runs
    got, bulk = both_paths(table, value, recs)
    assert bulk == 1 and got.errors == () and got.batch.num_rows == 81  # one native run
    assert got.batch.column("_cdc").field("op").to_pylist() == [*ops * 20, None]
    assert got.batch.column("id").to_pylist() == [*range(80), None]
    bad = [*recs[:40], Record(40, 1, None, encode(ENVELOPE, event("c"))), *recs[41:]]
    got, bulk = both_paths(table, value, bad)
    assert [(e.offset, e.reason) for e in got.errors] == [(40, "Debezium op 'c' has no after row")]
    assert bulk > 1 and got.batch.num_rows == 80


def test_a_json_schema_envelope_goes_the_same_way() -> None:
    row = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    envelope = {
        "type": "object",
        "properties": {
            "before": {"oneOf": [{"type": "null"}, row]},
            "after": {"oneOf": [{"type": "null"}, row]},
            "source": {"type": "object", "properties": {"db": {"type": "string"}}},
            "op": {"type": "string"},
            "ts_ms": {"type": "integer"},
        },
    }
    schema = JsonSchema(json.dumps(envelope))
    value, key = by_id(schema), PartSpec(ConvertType.STRING)
    table = debezium_table(value, schema)
    assert [f.name for f in table.fields][:3] == ["id", "name", "_cdc"]
    events = [
        {"op": "c", "after": {"id": 1, "name": "a"}, "source": {"db": "x"}, "ts_ms": TS},
        {"op": "d", "before": {"id": 1, "name": "a"}, "after": None, "ts_ms": TS},
        {"after": {"id": 2}},  # no op
        [1, 2],  # not a record
    ]
    recs = [Record(i, 1, None, frame(1, json.dumps(e).encode())) for i, e in enumerate(events)]
    for run in (None, 1):
        conv = Converter(table, value, key, flatten=True, debezium=True, min_native_run=run)
        result = conv.convert(PARTITION, recs)
        rows = result.batch.to_pylist()
        assert [(r["id"], r["_cdc"]["op"], r["_cdc"]["offset"]) for r in rows] == [
            (1, "c", 0), (1, "d", 1),
        ]  # fmt: skip
        assert rows[0]["_cdc"]["source"] == {"db": "x"} and rows[1]["_cdc"]["source"] is None
        assert [(e.offset, e.reason) for e in result.errors] == [
            (2, "value is not a Debezium envelope: it has no op"),
            (3, "JSON value does not fit its schema: the value is a JSON array, not an object"),
        ]


def evolve(current: Schema, plan: EvolutionPlan, warehouse: Path) -> Schema:
    """``current`` with ``plan`` staged as the pipeline stages it, through pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("t", uri="sqlite:///:memory:", warehouse=warehouse.as_uri())
    catalog.create_namespace("d")
    table = catalog.create_table("d.t", current)
    with table.update_schema() as update:
        stage(update, plan.updates)
    return table.schema()


def test_a_row_field_added_evolves_the_table_before_cdc_and_old_rows_read_null(
    tmp_path: Path,
) -> None:
    row2 = {**ROW, "fields": [*ROW["fields"], {"name": "email", "type": ["null", "string"],
                                               "default": None}]}  # fmt: skip
    source2 = {**SOURCE, "fields": [*SOURCE["fields"], {"name": "txId", "type": ["null", "long"],
                                                        "default": None}]}  # fmt: skip
    v2 = envelope_schema(row2, source2)
    v1_table = debezium_table(by_id(avro(ENVELOPE)), avro(ENVELOPE))
    plan = plan_evolution(v1_table, source_type(by_id(avro(v2)), avro(v2)), None, flatten=True,
                          debezium=True)  # fmt: skip
    assert isinstance(plan, EvolutionPlan)
    adds = [u for u in plan.updates if isinstance(u, AddColumn)]
    assert [(u.parent, u.name, u.before) for u in adds] == [
        ((), "email", "_cdc"), (("_cdc", "source"), "txId", None),
    ]  # fmt: skip
    table = evolve(v1_table, plan, tmp_path)
    assert [f.name for f in table.fields] == [
        "id", "name", "address", "email", "_cdc", "_kafka_key", "_kafka_header", "_kafka_metadata",
    ]  # fmt: skip
    assert table.find_field("_cdc.source.txId") is not None
    # records of both versions in one batch, converted with the evolved table
    value, key = by_id(avro(ENVELOPE), avro(v2)), PartSpec(ConvertType.STRING)
    conv = Converter(table, value, key, flatten=True, debezium=True)
    new = event("c", after=alice(id=2, email="b@x"), n=1)
    new["source"]["txId"] = 7
    recs = [
        Record(0, 1, None, encode(ENVELOPE, event("c", after=alice()))),
        Record(1, 1, None, encode(v2, new, schema_id=2)),
    ]
    result = conv.convert(PARTITION, recs)
    assert result.errors == ()
    rows = result.batch.to_pylist()
    assert [(r["id"], r["email"], r["_cdc"]["source"]["txId"]) for r in rows] == [
        (1, None, None), (2, "b@x", 7),
    ]  # fmt: skip


def test_an_incompatible_row_change_is_refused_like_flatten() -> None:
    row2 = {**ROW, "fields": [{"name": "id", "type": "string"}, *ROW["fields"][1:]]}
    v2 = envelope_schema(row2)
    v1_table = debezium_table(by_id(avro(ENVELOPE)), avro(ENVELOPE))
    plan = plan_evolution(v1_table, source_type(by_id(avro(v2)), avro(v2)), None, flatten=True,
                          debezium=True)  # fmt: skip
    assert not isinstance(plan, EvolutionPlan)
    assert plan.reasons == ("id: int cannot change to string",)


def protobuf_envelope() -> tuple[ProtobufSchema, Any]:
    """package inv: Row {id, name}; Source {db}; Envelope {before, after: Row; source;
    op; ts_ms}: Debezium's envelope as its Protobuf converter writes it; the schema and
    the Envelope message class."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="inv.proto", package="inv", syntax="proto3")
    row = fdp.message_type.add(name="Row")
    row.field.add(name="id", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    row.field.add(name="name", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    src = fdp.message_type.add(name="Source")
    src.field.add(name="db", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    env = fdp.message_type.add(name="Envelope")
    for n, (name, kind, type_name) in enumerate(
        [
            ("before", f.TYPE_MESSAGE, ".inv.Row"),
            ("after", f.TYPE_MESSAGE, ".inv.Row"),
            ("source", f.TYPE_MESSAGE, ".inv.Source"),
            ("op", f.TYPE_STRING, ""),
            ("ts_ms", f.TYPE_INT64, ""),
        ],
        start=1,
    ):
        field = env.field.add(name=name, number=n, type=kind, label=f.LABEL_OPTIONAL)
        if type_name:
            field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fdp.SerializeToString())
    envelope = message_factory.GetMessageClass(pool.FindMessageTypeByName("inv.Envelope"))
    return ProtobufSchema(base64.b64encode(fdp.SerializeToString()).decode()), envelope


def test_a_protobuf_envelope_goes_the_same_way() -> None:
    schema, envelope = protobuf_envelope()
    value, key = by_id(schema, message="inv.Envelope"), PartSpec(ConvertType.STRING)
    table = debezium_table(value, schema)
    assert [f.name for f in table.fields][:3] == ["id", "name", "_cdc"]
    created = envelope(op="c", ts_ms=TS)
    created.after.id, created.after.name, created.source.db = 1, "a", "x"
    deleted = envelope(op="d", ts_ms=TS + 1)
    deleted.before.id, deleted.before.name = 1, "a"
    no_op = envelope(ts_ms=TS)
    no_op.after.id = 2
    bodies = [created, deleted, no_op]
    recs = [
        Record(i, 1, None, frame(1, m.SerializeToString(), (2,))) for i, m in enumerate(bodies)
    ]  # message index 2: Envelope
    conv = Converter(table, value, key, flatten=True, debezium=True)
    result = conv.convert(PARTITION, recs)
    rows = result.batch.to_pylist()
    assert [(r["id"], r["name"], r["_cdc"]["op"], r["_cdc"]["offset"]) for r in rows] == [
        (1, "a", "c", 0), (1, "a", "d", 1),
    ]  # fmt: skip
    assert rows[0]["_cdc"]["source"] == {"db": "x"}
    assert rows[0]["_cdc"]["ts"] == datetime.fromtimestamp(TS / 1000, UTC)
    assert [(e.offset, "has no op" in e.reason) for e in result.errors] == [(2, True)]
