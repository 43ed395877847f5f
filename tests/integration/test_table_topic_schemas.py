"""Schema modes of table topics, end to end: Confluent serializers in, Spark SQL out.

One ``floe up`` (registry included) and one Spark session in the test process that reads
the tables through the same Iceberg catalog. Each test produces with confluent-kafka's
own serializers against Floe's registry, waits until the table's snapshot summary has
caught up with the log, and compares the rows Spark reads with the produced records
field by field (every (partition, offset) once), across:

* Avro ``by_schema_id`` + ``flatten`` over every type of the mapping table, then a
  BACKWARD-compatible v2 mid-stream (a new top-level and a nested field, int -> long,
  float -> double, decimal precision widening, a rename by alias, a removed field), then
  an incompatible v3 (string -> int) whose records are skipped and counted;
* JSON Schema ``by_schema_id`` without flatten (the value is one struct column) and an
  Avro key in ``by_schema_id``;
* Protobuf ``by_latest_schema`` + ``flatten`` (payloads without the wire prefix);
* JSON Schema ``by_latest_schema`` + ``flatten`` (date-time, date, time, enum, map,
  ``$ref``, nullable ``oneOf``, an integer in a number column);
* Protobuf ``by_schema_id`` with confluent's ProtobufSerializer (zigzag/fixed/unsigned
  integers, bytes, ``Timestamp`` and wrapper types imported from the well-known files,
  a ``oneof``, a nested repeated message);
* an incompatible change (string -> int) plus undecodable bytes under
  ``errors.tolerance`` ``none`` (the table stops before them) and ``all`` (skipped);
* two event types in one topic (Avro, TopicRecordNameStrategy): one table with the
  union of their fields.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaRegistryClient,
    ServerConfig,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.config import BrokerConfig, load_config
from floe.tabletopic.spark import SparkManager
from helpers.admin import create_table_topic, create_topic
from helpers.broker import Broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(300), *SPARK_WARNING_FILTERS]

DEADLINE_S = 120.0
UTC = dt.UTC


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(
        tmp_path_factory.mktemp("schemas") / "data",
        {"spark.sql.shuffle.partitions": "2"},
    )
    try:
        yield b.start()
    finally:
        b.close()


@pytest.fixture(scope="module")
def config(broker: Broker) -> BrokerConfig:
    return load_config(None, {"data.dir": str(broker.data_dir)}, environ={})


@pytest.fixture(scope="module")
def spark(config: BrokerConfig) -> Iterator[Any]:
    manager = SparkManager.from_config(config)
    try:
        yield asyncio.run(manager.get_session())
    finally:
        asyncio.run(manager.stop())


@pytest.fixture(scope="module")
def registry(broker: Broker) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": broker.registry_url})


def spark_rows(spark: Any, table: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The table's rows read by Spark SQL, by (partition, offset); asserts each once."""
    rows = [
        r.asDict(recursive=True) for r in spark.sql(f"SELECT * FROM floe.default.{table}").collect()
    ]
    by = {(r["_kafka_metadata"]["partition"], r["_kafka_metadata"]["offset"]): r for r in rows}
    assert len(by) == len(rows), "duplicate (partition, offset) rows"
    return by


# -- Avro: every type, evolution, an incompatible change ---------------------------------

AVRO_V1 = {
    "type": "record",
    "name": "Click",
    "namespace": "com.acme",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "count", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "page", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "tag4", "type": {"type": "fixed", "name": "Tag4", "size": 4}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY"]}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "items", "type": {"type": "array", "items": "int"}},
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Device",
                "fields": [
                    {"name": "os", "type": "string"},
                    {"name": "version", "type": ["null", "int"], "default": None},
                ],
            },
        },
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "gone", "type": ["null", "string"], "default": None},
        {"name": "old_name", "type": "string", "default": ""},
    ],
}


def avro_v2() -> dict[str, Any]:
    """BACKWARD compatible: widen count/ratio/price, add top-level and nested fields,
    drop ``gone``, rename ``old_name`` -> ``new_name`` by alias."""
    fields = []
    for original in AVRO_V1["fields"]:
        f = dict(original)
        if f["name"] == "count":
            f["type"] = "long"
        elif f["name"] == "ratio":
            f["type"] = "double"
        elif f["name"] == "price":
            f["type"] = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
        elif f["name"] == "device":
            f["type"] = {
                **f["type"],
                "fields": [
                    *f["type"]["fields"],
                    {"name": "model", "type": ["null", "string"], "default": None},
                ],
            }
        elif f["name"] == "gone":
            continue
        elif f["name"] == "old_name":
            f = {"name": "new_name", "type": "string", "default": "", "aliases": ["old_name"]}
        fields.append(f)
    fields.append({"name": "campaign", "type": ["null", "string"], "default": None})
    return {**AVRO_V1, "fields": fields}


def click(i: int, v2: bool = False) -> dict[str, Any]:
    base = dt.datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    value: dict[str, Any] = {
        "flag": i % 2 == 0,
        "count": i if not v2 else 2**40 + i,
        "big": 2**50 + i,
        "ratio": 0.5 + i,
        "score": i / 3,
        "page": f"/p/{i} é",
        "blob": bytes([i % 256, 0, 255]),
        "tag4": i.to_bytes(4, "big"),
        "kind": "BUY" if i % 3 == 0 else "VIEW",
        "price": decimal.Decimal(f"{i}.{i % 100:02d}")
        if not v2
        else decimal.Decimal(f"{10**9 + i}.25"),
        "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "at_ms": dt.time(12, 30, i % 60, 123000),
        "ts_ms": base + dt.timedelta(milliseconds=i),
        "ts_us": base + dt.timedelta(microseconds=i),
        "local_ms": dt.datetime(2026, 11, 22, 8, 0) + dt.timedelta(milliseconds=i),
        "id": str(uuid.UUID(int=i + 1)),
        "items": list(range(i % 4)),
        "attrs": {"a": str(i)} if i % 2 else {},
        "device": {"os": "linux", "version": None if i % 5 == 0 else i},
        "referrer": None if i % 4 == 0 else f"https://r/{i}",
    }
    if v2:
        value["device"]["model"] = f"m{i}"
        value["campaign"] = f"c{i}"
        value["new_name"] = f"n{i}"
    else:
        value["gone"] = f"g{i}"
        value["old_name"] = f"n{i}"
    return value


def check_avro_row(
    row: dict[str, Any], sent: dict[str, Any], v2: bool, after_rename: bool = False
) -> None:
    """``after_rename``: a v1 record read after v2 renamed ``old_name`` -> ``new_name``
    (its ``old_name`` value has no column any more: documented)."""
    for name in ("flag", "count", "big", "score", "page", "kind", "day", "items", "referrer"):
        assert row[name] == sent[name], name
    assert row["ratio"] == pytest.approx(sent["ratio"])
    assert bytes(row["blob"]) == sent["blob"]
    assert bytes(row["tag4"]) == sent["tag4"]
    assert row["price"] == sent["price"]
    t = sent["at_ms"]
    assert row["at_ms"] == ((t.hour * 60 + t.minute) * 60 + t.second) * 10**6 + t.microsecond
    assert (
        row["ts_ms"] == sent["ts_ms"].astimezone(UTC).replace(tzinfo=None)
        or row["ts_ms"].astimezone(UTC) == sent["ts_ms"]
    )
    assert row["local_ms"] == sent["local_ms"]
    assert row["id"] == sent["id"]
    assert (row["attrs"] or {}) == sent["attrs"]
    assert row["device"]["os"] == "linux"
    assert row["device"]["version"] == sent["device"]["version"]
    assert row["device"]["model"] == (sent["device"]["model"] if v2 else None)
    assert row["campaign"] == (sent["campaign"] if v2 else None)
    if after_rename and not v2:
        assert row["new_name"] is None
    else:
        assert row["new_name"] == sent["new_name" if v2 else "old_name"]
    assert row["gone"] == (None if v2 else sent["gone"])


def test_avro_by_schema_id_flatten_evolves_mid_stream(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    import json

    topic = "avro_clicks"
    create_topic(
        broker.bootstrap,
        topic,
        3,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_schema_id",
            "table.topic.transform.value.type": "flatten",
        },
    )
    ser1 = AvroSerializer(registry, json.dumps(AVRO_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    first = [(f"k{i}".encode(), ser1(click(i), ctx), i % 3) for i in range(60)]
    first.append((b"tomb", None, 0))  # a tombstone: a row whose value columns are null
    where1 = produce(broker, topic, first)
    wait_committed(config, topic, ends_of(where1))

    ser2 = AvroSerializer(registry, json.dumps(avro_v2()))
    second = [(f"k{i}".encode(), ser2(click(i, v2=True), ctx), i % 3) for i in range(60, 90)]
    # v1 and v2 records interleaved within one round
    second += [(f"k{i}".encode(), ser1(click(i), ctx), i % 3) for i in range(90, 100)]
    where2 = produce(broker, topic, second)

    registry.set_config(
        subject_name=f"{topic}-value",
        config=ServerConfig(compatibility=ConfigCompatibilityLevel.NONE),
    )
    v3 = {**AVRO_V1, "fields": [{"name": "page", "type": "int"}]}
    ser3 = AvroSerializer(registry, json.dumps(v3))
    where3 = produce(broker, topic, [(b"bad", ser3({"page": 7}, ctx), 1)])
    wait_committed(config, topic, ends_of(where1 + where2 + where3))

    rows = spark_rows(spark, topic)
    assert len(rows) == len(first) + len(second)  # the v3 record was skipped
    for (key, _, _), w, i in zip(first[:-1], where1[:-1], range(60), strict=True):
        row = rows[w]
        assert row["_kafka_key"] == key.decode()
        assert row["_kafka_header"] == {"i": str(i).encode()}
        check_avro_row(row, click(i), v2=False)
    tomb = rows[where1[-1]]
    assert tomb["page"] is None and tomb["_kafka_key"] == "tomb"
    for w, i in zip(where2, range(60, 100), strict=True):
        check_avro_row(rows[w], click(i, v2=i < 90), v2=i < 90, after_rename=True)
    assert where3[0] not in rows
    assert "tabletopic.bad_record" in broker.stderr_text()
    assert "cannot be applied to the table" in broker.stderr_text()
    columns = [f.name for f in spark.table(f"floe.default.{topic}").schema.fields]
    # a new top-level field goes before the _kafka_* columns
    assert columns[-4:] == ["campaign", "_kafka_key", "_kafka_header", "_kafka_metadata"]
    types = {
        f.name: f.dataType.simpleString()
        for f in spark.table(f"floe.default.{topic}").schema.fields
    }
    assert types["count"] == "bigint"
    assert types["ratio"] == "double"
    assert types["price"] == "decimal(12,2)"
    assert "old_name" not in types  # renamed by alias: same column, same data


# -- JSON Schema value struct, Avro key ---------------------------------------------------

JSON_SCHEMA = {
    "type": "object",
    "title": "Order",
    "properties": {
        "order_id": {"type": "integer"},
        "amount": {"type": "number"},
        "note": {"type": ["string", "null"]},
        "placed": {"type": "string", "format": "date-time"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            },
        },
    },
    "required": ["order_id", "amount"],
}
KEY_SCHEMA = {"type": "record", "name": "OrderKey", "fields": [{"name": "shop", "type": "string"}]}


def test_json_value_struct_and_avro_key(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    import json

    topic = "json_orders"
    create_topic(
        broker.bootstrap,
        topic,
        2,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_schema_id",
            "table.topic.convert.key.type": "by_schema_id",
        },
    )
    value_ser = JSONSerializer(json.dumps(JSON_SCHEMA), registry)
    key_ser = AvroSerializer(registry, json.dumps(KEY_SCHEMA))
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    orders = [
        {
            "order_id": i,
            "amount": i * 1.5,
            "note": None if i % 2 else f"n{i}",
            "placed": f"2026-11-22T10:00:{i % 60:02d}+00:00",
            "lines": [{"sku": f"s{j}", "qty": j} for j in range(i % 3)],
        }
        for i in range(40)
    ]
    messages = [
        (key_ser({"shop": f"shop{i % 4}"}, kctx), value_ser(o, vctx), i % 2)
        for i, o in enumerate(orders)
    ]
    messages.append((None, b"not wire format", 0))  # skipped: errors.tolerance default
    where = produce(broker, topic, messages)
    wait_committed(config, topic, ends_of(where))
    rows = spark_rows(spark, topic)
    assert len(rows) == len(orders)
    for i, (order, w) in enumerate(zip(orders, where, strict=False)):
        row = rows[w]
        value = row["_kafka_value"]
        assert row["_kafka_key"] == {"shop": f"shop{i % 4}"}
        assert value["order_id"] == order["order_id"]
        assert value["amount"] == order["amount"]
        assert value["note"] == order["note"]
        assert value["placed"].astimezone(UTC) == dt.datetime.fromisoformat(order["placed"])
        assert [(ln["sku"], ln["qty"]) for ln in value["lines"]] == [
            (ln["sku"], ln["qty"]) for ln in order["lines"]
        ]


# -- several event types in one topic -----------------------------------------------------

CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "com.acme",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
PURCHASE = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.acme",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "items", "type": {"type": "array", "items": "string"}},
    ],
}


def test_several_event_types_land_in_one_table_with_the_union_of_their_fields(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    """Records of two Avro record types, serialized with TopicRecordNameStrategy (one
    subject per type, none named ``<topic>-value``), land in one table: each type's
    fields are columns, shared ones (same name and type) once, and each row has the
    other type's columns null."""
    import json

    from confluent_kafka.schema_registry import topic_record_subject_name_strategy

    topic = "events_mixed"
    create_table_topic(broker.bootstrap, topic, 2, flatten=True)
    conf = {"subject.name.strategy": topic_record_subject_name_strategy}
    clicks = AvroSerializer(registry, json.dumps(CLICK), conf=conf)
    purchases = AvroSerializer(registry, json.dumps(PURCHASE), conf=conf)
    ctx = SerializationContext(topic, MessageField.VALUE)
    events: list[dict[str, Any]] = []
    messages = []
    for i in range(40):
        if i % 3:
            event = {"user": f"u{i % 5}", "page": f"/p/{i}", "at": 1_795_000_000_000 + i}
            messages.append((None, clicks(event, ctx), i % 2))
        else:
            event = {"user": f"u{i % 5}", "amount": i * 2.5, "items": [f"sku{i}"] * (i % 3)}
            messages.append((None, purchases(event, ctx), i % 2))
        events.append(event)
    subjects = {f"{topic}-com.acme.Click", f"{topic}-com.acme.Purchase"}
    assert subjects <= set(registry.get_subjects())  # one per type, no <topic>-value
    where = produce(broker, topic, messages)
    wait_committed(config, topic, ends_of(where))

    columns = [f.name for f in spark.table(f"floe.default.{topic}").schema.fields]
    # the first type met creates the table, the other adds its own fields
    assert columns[:5] == ["user", "amount", "items", "page", "at"]
    rows = spark_rows(spark, topic)
    assert len(rows) == len(events)
    for event, w in zip(events, where, strict=True):
        row = rows[w]
        assert row["user"] == event["user"]
        if "page" in event:
            assert (row["page"], row["amount"], row["items"]) == (event["page"], None, None)
            assert row["at"].astimezone(UTC) == dt.datetime.fromtimestamp(event["at"] / 1000, UTC)
        else:
            assert (row["page"], row["at"]) == (None, None)
            assert (row["amount"], row["items"]) == (event["amount"], event["items"])


# -- Protobuf by_latest_schema + flatten -------------------------------------------------

PROTO = """
syntax = "proto3";
package shop;
message Visit {
  string user = 1;
  int32 pages = 2;
  uint64 bytes = 3;
  repeated string tags = 4;
  map<string, int64> counters = 5;
  Geo geo = 6;
  enum Kind { UNKNOWN = 0; WEB = 1; APP = 2; }
  Kind kind = 7;
  optional double score = 8;
}
message Geo { string country = 1; float lat = 2; }
"""


def test_protobuf_by_latest_schema_flatten(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.compiler import plugin_pb2  # noqa: F401  (ensures protoc types)

    topic = "proto_visits"
    registry.register_schema(f"{topic}-value", Schema(PROTO, "PROTOBUF"))
    create_topic(
        broker.bootstrap,
        topic,
        2,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_latest_schema",
            "table.topic.convert.value.by_latest_schema.message.full.name": "shop.Visit",
            "table.topic.transform.value.type": "flatten",
        },
    )
    from floe.registry.core.protobuf import ProtobufSchema

    fdp = ProtobufSchema(PROTO).descriptor
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(fdp.SerializeToString()))
    visit_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Visit"))
    sent = []
    for i in range(30):
        msg = visit_cls(user=f"u{i}", pages=i, bytes=2**40 + i, tags=[f"t{i}"] * (i % 3))
        msg.counters["clicks"] = i
        msg.geo.country = "FR"
        msg.geo.lat = 48.5
        msg.kind = i % 3
        if i % 2:
            msg.score = i / 2
        sent.append(msg)
    where = produce(
        broker, topic, [(None, m.SerializeToString(), i % 2) for i, m in enumerate(sent)]
    )
    wait_committed(config, topic, ends_of(where))
    rows = spark_rows(spark, topic)
    assert len(rows) == len(sent)
    for i, (msg, w) in enumerate(zip(sent, where, strict=True)):
        row = rows[w]
        assert row["user"] == msg.user
        assert row["pages"] == i
        assert row["bytes"] == 2**40 + i
        assert list(row["tags"]) == list(msg.tags)
        assert row["counters"] == {"clicks": i}
        assert row["geo"]["country"] == "FR"
        assert row["geo"]["lat"] == pytest.approx(48.5)
        assert row["kind"] == ["UNKNOWN", "WEB", "APP"][i % 3]
        assert row["score"] == (i / 2 if i % 2 else None)


# -- errors.tolerance = none -------------------------------------------------------------


@pytest.mark.parametrize("tolerance", ["none", "all"])
def test_incompatible_change_and_bad_bytes_under_tolerance(
    broker: Broker,
    registry: SchemaRegistryClient,
    spark: Any,
    config: BrokerConfig,
    tolerance: str,
) -> None:
    """An incompatible schema change (string -> int) and undecodable bytes: ``none``
    stops the table before the first of them; ``all`` skips both and goes on."""
    import json

    topic = f"strict_{tolerance}"
    create_topic(
        broker.bootstrap,
        topic,
        1,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_schema_id",
            "table.topic.errors.tolerance": tolerance,
        },
    )
    ser = AvroSerializer(registry, json.dumps(KEY_SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = produce(broker, topic, [(None, ser({"shop": f"s{i}"}, ctx), 0) for i in range(5)])
    wait_committed(config, topic, ends_of(good))
    registry.set_config(
        subject_name=f"{topic}-value",
        config=ServerConfig(compatibility=ConfigCompatibilityLevel.NONE),
    )
    as_int = {**KEY_SCHEMA, "fields": [{"name": "shop", "type": "int"}]}
    bad = AvroSerializer(registry, json.dumps(as_int))
    tail = produce(
        broker,
        topic,
        [
            (None, bad({"shop": 7}, ctx), 0),
            (None, b"\x00garbage", 0),
            (None, ser({"shop": "after"}, ctx), 0),
        ],
    )
    stop_line = f"tabletopic.stopped_on_bad_record topic={topic}"
    if tolerance == "none":
        deadline = time.monotonic() + DEADLINE_S
        while stop_line not in broker.stderr_text():
            assert time.monotonic() < deadline, "the table did not stop"
            time.sleep(0.5)
        time.sleep(2.5)  # two more commit intervals: nothing may land
        rows = spark_rows(spark, topic)
        assert sorted(o for _, o in rows) == [0, 1, 2, 3, 4]
        assert broker.stderr_text().count(stop_line) == 1
        assert f"offset {tail[0][1]}" in broker.stderr_text().split(stop_line)[1].splitlines()[0]
    else:
        wait_committed(config, topic, ends_of(good + tail))
        rows = spark_rows(spark, topic)
        assert sorted(o for _, o in rows) == [0, 1, 2, 3, 4, tail[2][1]]
        assert rows[tail[2]]["_kafka_value"] == {"shop": "after"}
        assert stop_line not in broker.stderr_text()


# -- JSON Schema by_latest_schema + flatten (payloads without prefix) ---------------------

JSON_EVENT = {
    "type": "object",
    "definitions": {"Geo": {"type": "object", "properties": {"country": {"type": "string"}}}},
    "properties": {
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "clock": {"type": "string", "format": "time"},
        "level": {"enum": ["low", "high"]},
        "ok": {"type": "boolean"},
        "weight": {"type": "number"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "geo": {"$ref": "#/definitions/Geo"},
        "maybe": {"oneOf": [{"type": "null"}, {"type": "string"}]},
    },
}


def test_json_by_latest_schema_flatten(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    import json

    topic = "json_events"
    registry.register_schema(f"{topic}-value", Schema(json.dumps(JSON_EVENT), "JSON"))
    create_topic(
        broker.bootstrap,
        topic,
        2,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_latest_schema",
            "table.topic.transform.value.type": "flatten",
        },
    )
    events = [
        {
            "at": f"2026-11-22T10:00:00.{i:03d}Z",
            "day": f"2026-11-{i % 28 + 1:02d}",
            "clock": f"08:30:{i % 60:02d}",
            "level": "high" if i % 2 else "low",
            "ok": i % 3 == 0,
            "weight": i if i % 2 else i + 0.25,  # an integer in a number column
            "counts": {"a": i, "b": -i},
            "geo": {"country": "FR"},
            "maybe": None if i % 4 == 0 else f"m{i}",
        }
        for i in range(20)
    ]
    where = produce(
        broker, topic, [(b"k", json.dumps(e).encode(), i % 2) for i, e in enumerate(events)]
    )
    wait_committed(config, topic, ends_of(where))
    rows = spark_rows(spark, topic)
    assert len(rows) == len(events)
    for i, (event, w) in enumerate(zip(events, where, strict=True)):
        row = rows[w]
        assert row["at"].astimezone(UTC) == dt.datetime(2026, 11, 22, 10, 0, 0, i * 1000, UTC)
        assert row["day"] == dt.date(2026, 11, i % 28 + 1)
        assert row["clock"] == ((8 * 60 + 30) * 60 + i % 60) * 10**6
        assert row["level"] == event["level"]
        assert row["ok"] == event["ok"]
        assert row["weight"] == float(event["weight"])
        assert row["counts"] == event["counts"]
        assert row["geo"] == {"country": "FR"}
        assert row["maybe"] == event["maybe"]


# -- Protobuf by_schema_id with the Confluent ProtobufSerializer --------------------------

PROTO_ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Order {
  sint32 delta = 1;
  sfixed64 big = 2;
  fixed32 small = 3;
  uint64 huge = 4;
  float f = 5;
  bytes raw = 6;
  google.protobuf.Timestamp at = 7;
  google.protobuf.StringValue note = 8;
  oneof pay { string card = 9; int64 cash = 10; }
  repeated Line lines = 11;
  message Line { string sku = 1; int32 qty = 2; }
}
"""


def test_protobuf_by_schema_id_with_well_known_types(
    broker: Broker, registry: SchemaRegistryClient, spark: Any, config: BrokerConfig
) -> None:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import (  # noqa: F401  (in the pool)
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,
        wrappers_pb2,
    )

    from floe.registry.core.protobuf import ProtobufSchema

    topic = "proto_orders"
    create_table_topic(broker.bootstrap, topic, 2, flatten=True)
    fdp = descriptor_pb2.FileDescriptorProto.FromString(
        ProtobufSchema(PROTO_ORDER).descriptor.SerializeToString()
    )
    fdp.name = "shop/order_e2e.proto"
    pool = descriptor_pool.Default()
    pool.Add(fdp)
    order_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    ser = ProtobufSerializer(order_cls, registry, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    sent = []
    for i in range(100):  # 50 a partition: decoded in bulk (MIN_NATIVE_RUN)
        msg = order_cls(delta=-i, big=-(2**40) - i, small=2**31 + i, huge=2**62 + i, f=0.5 * i)
        msg.raw = bytes([i, 255])
        msg.at.FromDatetime(dt.datetime(2026, 11, 22, 9, i // 60, i % 60, 123456))
        if i % 2:
            msg.note.value = f"n{i}"
            msg.card = f"c{i}"
        else:
            msg.cash = i * 100
        msg.lines.add(sku=f"s{i}", qty=i)
        sent.append(msg)
    where = produce(broker, topic, [(None, ser(m, ctx), i % 2) for i, m in enumerate(sent)])
    wait_committed(config, topic, ends_of(where))
    rows = spark_rows(spark, topic)
    assert len(rows) == len(sent)
    for i, w in enumerate(where):
        row = rows[w]
        assert (row["delta"], row["big"], row["small"], row["huge"]) == (
            -i,
            -(2**40) - i,
            2**31 + i,
            2**62 + i,
        )
        assert row["f"] == pytest.approx(0.5 * i)
        assert bytes(row["raw"]) == bytes([i, 255])
        assert row["at"].astimezone(UTC) == dt.datetime(
            2026, 11, 22, 9, i // 60, i % 60, 123456, UTC
        )
        assert row["note"] == (f"n{i}" if i % 2 else None)
        assert row["card"] == (f"c{i}" if i % 2 else None)
        assert row["cash"] == (None if i % 2 else i * 100)
        assert [(ln["sku"], ln["qty"]) for ln in row["lines"]] == [(f"s{i}", i)]
