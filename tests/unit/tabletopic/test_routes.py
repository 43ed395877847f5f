"""One table per record type (table.topic.route.by=record_name): which record types a
topic has, where each lands, and which records a route table keeps."""

from __future__ import annotations

import json

from floe.registry.core.model import SchemaType
from floe.tabletopic.coordinator import RetentionHolds
from floe.tabletopic.routes import (
    RouteFilter,
    Verdict,
    record_name,
    route_records,
    route_table,
)
from floe.tabletopic.schemas import RawSchema, RegistrySnapshot
from floe.types import Offset, PartitionId

CLICK = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "namespace": "com.acme",
        "fields": [{"name": "u", "type": "string"}],
    }
)
CLICK2 = json.dumps(
    {
        "type": "record",
        "name": "com.acme.Click",
        "fields": [{"name": "u", "type": "string"}, {"name": "n", "type": ["null", "int"]}],
    }
)
BUY = json.dumps({"type": "record", "name": "Buy", "namespace": "com.acme", "fields": []})
LOST = json.dumps({"type": "record", "name": "Lost", "namespace": "com.acme", "fields": []})


def avro(schema_id: int, text: str) -> RawSchema:
    return RawSchema(schema_id, SchemaType.AVRO, text)


def framed(schema_id: int, body: bytes = b"\x02a") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def test_record_name_is_the_avro_full_name() -> None:
    assert record_name(avro(1, CLICK)) == "com.acme.Click"
    assert record_name(avro(1, CLICK2)) == "com.acme.Click"
    assert record_name(avro(1, json.dumps({"type": "record", "name": "X", "fields": []}))) == "X"
    assert record_name(avro(1, '"string"')) is None
    assert record_name(avro(1, json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}))) is None
    assert record_name(avro(1, "{not json")) is None
    assert record_name(RawSchema(1, SchemaType.JSON, '{"type": "object"}')) is None


def test_route_table_names_the_full_name_lower_cased() -> None:
    assert route_table("default", "shop", "com.acme.Click") == ("default", "shop_com_acme_click")
    assert route_table("lake", "Shop-1", "Click")[1].endswith("_click")
    # two types of one simple name in different namespaces get two tables
    assert route_table("d", "t", "a.Click") != route_table("d", "t", "b.Click")


def test_route_records_from_topic_record_name_subjects() -> None:
    subjects = [
        ("shop-com.acme.Click", avro(1, CLICK)),
        ("shop-com.acme.Buy", avro(2, BUY)),
        ("shop-value", avro(3, CLICK)),  # TopicNameStrategy: not a route
        ("shop-com.acme.Other", avro(4, CLICK)),  # names another record
        ("shop-key", avro(5, BUY)),
        ("shopping-com.acme.Buy", avro(2, BUY)),  # another topic
        ("shop-com.acme.Gone", None),
    ]
    assert route_records("shop", subjects) == ["com.acme.Buy", "com.acme.Click"]


def test_route_filter_keeps_its_type_drops_others_and_refuses_the_unroutable() -> None:
    snap = RegistrySnapshot(
        {
            1: avro(1, CLICK),
            2: avro(2, BUY),
            3: avro(3, CLICK2),
            4: avro(4, '"string"'),
            5: RawSchema(5, SchemaType.JSON, '{"type": "object"}'),
            6: avro(6, LOST),
        },
        {"shop-com.acme.Click": (1, 3), "shop-com.acme.Buy": (2,), "com.acme.Lost": (6,)},
        8,
    )
    click = RouteFilter.of("com.acme.Click", snap, "shop")
    assert click.mine == {1, 3} and click.others == {2}
    assert click.verdict(framed(1)) is Verdict.MINE
    assert click.verdict(framed(3)) is Verdict.MINE
    assert click.verdict(framed(2)) is Verdict.OTHER
    assert RouteFilter.of("com.acme.Buy", snap, "shop").verdict(framed(1)) is Verdict.OTHER
    assert click.verdict(framed(8)) is Verdict.NEW  # registered after the snapshot
    for bad, why in [
        (None, "tombstone"),
        (b"plain text", "no schema id"),
        (b"\x00\x00", "no schema id"),
        (framed(4), "not an Avro record"),
        (framed(5), "not an Avro record"),
        (framed(7), "unknown"),  # below next_id, not in the registry
        # a record type with no table (RecordNameStrategy alone): never dropped unseen
        (framed(6), "com.acme.Lost has no table"),
    ]:
        verdict = click.verdict(bad)
        assert isinstance(verdict, str) and why in verdict, (bad, verdict)


def test_retention_holds_are_the_lowest_any_route_table_wants() -> None:
    holds = RetentionHolds()
    p0, p1 = PartitionId(0), PartitionId(1)
    assert holds.want("a", p0, Offset(10)) == 10
    assert holds.want("b", p0, Offset(4)) == 4
    assert holds.want("a", p1, Offset(7)) == 7
    assert holds.want("b", p0, Offset(12)) == 10
    holds.drop("a")
    assert holds.lowest(p0) == 12 and holds.lowest(p1) is None
    assert holds.want("b", p0, None) is None  # retention.wait off
