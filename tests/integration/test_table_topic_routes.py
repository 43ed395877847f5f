"""One table per record type (``table.topic.route.by=record_name``), end to end.

One ``floe up`` (registry included). Two Avro record types serialized with
confluent-kafka's AvroSerializer under TopicRecordNameStrategy (subjects
``<topic>-com.acme.Click`` and ``<topic>-com.acme.Purchase``), interleaved in one topic
of three partitions, plus records no table can own (no wire-format prefix). Each type
must land in its own table, every (partition, offset) of its type exactly once and
nothing else, read back through the broker's Spark SQL (admin API) and pyiceberg; a new
version of one type evolves its table only; status lists both tables with their
committed offsets.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_table_topic
from helpers.broker import Broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_readers import admin_sql, table_status
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(300), *SPARK_WARNING_FILTERS]

TOPIC = "shop"
CLICKS = "shop_com_acme_click"
PURCHASES = "shop_com_acme_purchase"
CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "com.acme",
    "fields": [{"name": "user", "type": "string"}, {"name": "page", "type": "string"}],
}
CLICK_V2 = {
    **CLICK,
    "fields": [*CLICK["fields"], {"name": "ref", "type": ["null", "string"], "default": None}],
}
PURCHASE = {
    "type": "record",
    "name": "Purchase",
    "namespace": "com.acme",
    "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": "double"}],
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("routes") / "data", {"spark.sql.shuffle.partitions": "2"})
    try:
        yield b.start()
    finally:
        b.close()


def spark_rows(broker: Broker, table: str, columns: str) -> dict[tuple[int, int], tuple[Any, ...]]:
    """The table's rows by (partition, offset), read by the broker's Spark SQL; each once."""
    rows = admin_sql(
        broker,
        f"SELECT _kafka_metadata.partition, _kafka_metadata.offset, {columns} "
        f"FROM floe.default.{table}",
    )
    by = {(r[0], r[1]): tuple(r[2:]) for r in rows}
    assert len(by) == len(rows), f"duplicate (partition, offset) rows in {table}"
    return by


def test_each_record_type_lands_in_its_own_table_exactly_once(broker: Broker) -> None:
    registry = SchemaRegistryClient({"url": broker.registry_url})
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    create_table_topic(
        broker.bootstrap, TOPIC, 3, {"table.topic.route.by": "record_name"}, flatten=True
    )
    conf = {"subject.name.strategy": topic_record_subject_name_strategy}
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    clicks = AvroSerializer(registry, json.dumps(CLICK), conf=conf)
    purchases = AvroSerializer(registry, json.dumps(PURCHASE), conf=conf)
    messages: list[tuple[bytes | None, bytes | None, int]] = []
    kinds: list[str | None] = []
    for i in range(60):
        if i % 3 == 2:
            messages.append((None, clicks({"user": f"u{i}", "page": f"/p{i}"}, ctx), i % 3))
            kinds.append(CLICKS)
        elif i % 7 == 0:
            messages.append((None, b"not framed", i % 3))  # no table can own it
            kinds.append(None)
        else:
            messages.append((None, purchases({"user": f"u{i}", "amount": i / 2}, ctx), i % 3))
            kinds.append(PURCHASES)
    assert {f"{TOPIC}-com.acme.Click", f"{TOPIC}-com.acme.Purchase"} <= set(registry.get_subjects())
    where = produce(broker, TOPIC, messages)
    wait_committed(config, CLICKS, ends_of(where))
    wait_committed(config, PURCHASES, ends_of(where))

    def expect(rows: dict[tuple[int, int], tuple[Any, ...]], table: str) -> None:
        wanted = {w for w, k in zip(where, kinds, strict=True) if k == table}
        assert set(rows) == wanted, f"{table} holds other records than its type's"

    click_rows = spark_rows(broker, CLICKS, "user, page")
    expect(click_rows, CLICKS)
    purchase_rows = spark_rows(broker, PURCHASES, "user, amount")
    expect(purchase_rows, PURCHASES)
    i_of = {w: i for i, w in enumerate(where)}
    for w, (user, page) in click_rows.items():
        assert (user, page) == (f"u{i_of[w]}", f"/p{i_of[w]}")
    for w, (user, amount) in purchase_rows.items():
        assert (user, amount) == (f"u{i_of[w]}", i_of[w] / 2)

    # a new version of one type evolves its table only
    clicks2 = AvroSerializer(registry, json.dumps(CLICK_V2), conf=conf)
    more = [
        (None, clicks2({"user": "v2", "page": "/new", "ref": "ad"}, ctx), 0),
        (None, purchases({"user": "w", "amount": 1.5}, ctx), 1),
    ]
    where2 = produce(broker, TOPIC, more)
    ends = ends_of(where + where2)
    wait_committed(config, CLICKS, ends)
    wait_committed(config, PURCHASES, ends)
    catalog = cat.load_catalog(cat.CatalogSettings.from_config(config))
    click_table = cat.load_table(catalog, "default", CLICKS)
    purchase_table = cat.load_table(catalog, "default", PURCHASES)
    click_columns = [f.name for f in click_table.schema().fields]
    purchase_columns = [f.name for f in purchase_table.schema().fields]
    assert click_columns[:3] == ["user", "page", "ref"]
    assert "ref" not in purchase_columns and "page" not in purchase_columns
    assert purchase_columns[:2] == ["user", "amount"]
    arrow = click_table.scan().to_arrow()  # pyiceberg agrees with Spark
    assert arrow.num_rows == len(click_rows) + 1
    assert {r["ref"] for r in arrow.select(["ref"]).to_pylist()} == {None, "ad"}
    assert purchase_table.scan().to_arrow().num_rows == len(purchase_rows) + 1

    status = table_status(broker, TOPIC)
    routes = {r["record"]: r for r in status["routes"]}
    assert set(routes) == {"com.acme.Click", "com.acme.Purchase"}
    assert routes["com.acme.Click"]["table"] == f"default.{CLICKS}"
    unroutable = kinds.count(None)
    for r in routes.values():
        assert r["status"] == "ok"
        assert {p["partition"]: p["committed_offset"] for p in r["partitions"]} == ends
        assert r["skipped_records"] == unroutable  # every route table counts them
        assert r["lost_records"] == 0
    assert status["status"] == "ok"
    assert all(p["lag_records"] == 0 for p in status["partitions"])
    with urllib.request.urlopen(f"{broker.admin_url}/topics/{TOPIC}", timeout=30) as page:
        html = page.read().decode()  # the console's topic page lists both tables
    for r in routes.values():
        assert f'<tr data-table="{r["table"]}"><td><code>{r["record"]}</code>' in html

    # maintenance now runs on every route table, one answer summing them up
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1/tables/{TOPIC}/maintenance", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        run = json.loads(answer.read())
    assert run["duration_s"] > 0 and "expired_snapshots" in run
    for table, rows in ((CLICKS, click_rows), (PURCHASES, purchase_rows)):
        maintained = cat.load_table(catalog, "default", table)
        assert maintained.scan().to_arrow().num_rows == len(rows) + 1
        assert "floe.maintenance" in maintained.properties  # each table's own run
