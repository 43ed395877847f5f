"""Debezium change events in table topics (``flatten_debezium``), end to end with the
real broker, Spark and catalog, and the readers users query with (the broker's Spark
SQL, DuckDB's ``iceberg_scan`` and pyiceberg).

The events are what Debezium's Avro converter writes: an envelope (``before``,
``after``, ``source``, ``op``, ``ts_ms``, ``transaction``) registered under
``<topic>-value`` and a key record of the primary-key columns under ``<topic>-key``,
both through confluent-kafka's serializers. Checked:

* upsert with ``id.columns=[_from_debezium_key_]`` (the ids from the key schema, the
  deletes from ``_cdc.op``): snapshot reads, creates, several updates of one id in one
  round (the last by offset wins), deletes with their tombstones, a delete (and
  tombstone) of an id never seen; every reader sees exactly the expected rows, each
  with the ``_cdc.op`` and ``_cdc.offset`` of the event that made it;
* append (no id columns): every event is a row with its ``_cdc``, the tombstone a row
  of nulls; an envelope without a row (a truncate) is a skipped bad record; an envelope
  version whose row gained a field evolves the table.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_table_topic
from helpers.broker import Broker
from helpers.module_broker import module_broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_readers import admin_sql, duckdb_connect, table_status
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(420), *SPARK_WARNING_FILTERS]

KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "inventory.public.customers",
    "fields": [{"name": "id", "type": "int"}],
}
ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "inventory.public.customers",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
    ],
}
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "db", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "lsn", "type": ["null", "long"], "default": None},
    ],
}
TS_MS = 1_760_000_000_000


def envelope(row: dict[str, Any]) -> dict[str, Any]:
    """Debezium's Avro envelope of ``row``: ``after`` refers to ``before``'s record."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "inventory.public.customers",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SOURCE},
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
                            {"name": "data_collection_order", "type": "long"},
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with module_broker(tmp_path_factory.mktemp("debezium") / "data") as b:
        yield b


def broker_config(broker: Broker) -> Any:
    return load_config(None, {"data.dir": str(Path(broker.data_dir))}, environ={})


def loaded(broker: Broker, table: str) -> Any:
    settings = cat.CatalogSettings.from_config(broker_config(broker))
    return cat.load_table(cat.load_catalog(settings), "default", table)


class Connector:
    """Serializes Debezium events of one topic as Debezium's Avro converter does."""

    def __init__(self, broker: Broker, topic: str, row: dict[str, Any] = ROW) -> None:
        registry = SchemaRegistryClient({"url": broker.registry_url})
        self.topic = topic
        self.values = AvroSerializer(registry, json.dumps(envelope(copy.deepcopy(row))))
        self.keys = AvroSerializer(registry, json.dumps(KEY))
        self.n = 0

    def key(self, i: int) -> bytes:
        out = self.keys({"id": i}, SerializationContext(self.topic, MessageField.KEY))
        assert out is not None
        return out

    def event(self, op: str, before: Any = None, after: Any = None) -> bytes:
        self.n += 1
        source = {
            "version": "2.7.3.Final",
            "connector": "postgresql",
            "name": "inventory",
            "ts_ms": TS_MS + self.n - 1,
            "db": "inventory",
            "table": "customers",
            "lsn": 1000 + self.n,
        }
        value = {"before": before, "after": after, "source": source, "op": op,
                 "ts_ms": TS_MS + self.n, "transaction": None}  # fmt: skip
        out = self.values(value, SerializationContext(self.topic, MessageField.VALUE))
        assert out is not None
        return out


def row(i: int, name: str, **more: Any) -> dict[str, Any]:
    return {"id": i, "name": name, **more}


Seen = dict[int, tuple[str | None, str | None, int | None]]


def views(broker: Broker, table: str) -> list[Seen]:
    """``{id: (name, _cdc.op, _cdc.offset)}`` as each reader sees the table: Spark SQL
    (the broker's), DuckDB and pyiceberg; each asserted to hold every id once, and each
    row's ``_cdc.offset`` to be its record's offset."""
    columns = "id, name, _cdc.op, _cdc.offset, _kafka_metadata.offset"
    spark = admin_sql(broker, f"SELECT {columns} FROM floe.default.{table}")
    iceberg = loaded(broker, table)
    duck = (
        duckdb_connect()
        .execute(f"SELECT {columns} FROM iceberg_scan('{iceberg.metadata_location}')")
        .fetchall()
    )
    arrow = iceberg.scan(selected_fields=("id", "name", "_cdc", "_kafka_metadata")).to_arrow()
    pyiceberg = [
        (i, n, c["op"], c["offset"], m["offset"])
        for i, n, c, m in zip(
            *(arrow.column(f).to_pylist() for f in arrow.column_names), strict=True
        )
    ]
    out = []
    for rows in (spark, duck, pyiceberg):
        assert all(r[3] == r[4] for r in rows), rows
        view = {r[0]: (r[1], r[2], r[3]) for r in rows}
        assert len(view) == len(rows), f"an id has several rows: {sorted(rows)}"
        out.append(view)
    return out


DEBEZIUM = {"table.topic.transform.value.type": "flatten_debezium"}


def test_debezium_changes_upsert_by_the_key_schema_and_delete(broker: Broker) -> None:
    topic = "dbz_customers"
    upsert = {
        **DEBEZIUM,
        "table.topic.convert.key.type": "by_schema_id",
        "automq.table.topic.id.columns": "[_from_debezium_key_]",
    }
    create_table_topic(broker.bootstrap, topic, 2, upsert, flatten=True)
    dbz = Connector(broker, topic)

    def at(i: int) -> int:
        return i % 2  # as Kafka's partitioner keeps one id's events in order

    first = [
        (dbz.key(1), dbz.event("r", after=row(1, "ada")), at(1)),  # the snapshot
        (dbz.key(2), dbz.event("r", after=row(2, "bob")), at(2)),
        (dbz.key(3), dbz.event("r", after=row(3, "cy")), at(3)),
        (dbz.key(4), dbz.event("c", after=row(4, "dee")), at(4)),
        (dbz.key(1), dbz.event("u", before=row(1, "ada"), after=row(1, "ada l")), at(1)),
        (dbz.key(1), dbz.event("u", before=row(1, "ada l"), after=row(1, "ada L")), at(1)),
        (dbz.key(2), dbz.event("d", before=row(2, "bob")), at(2)),
        (dbz.key(2), None, at(2)),  # the tombstone after the delete
        (dbz.key(99), dbz.event("d", before=row(99, "ghost")), at(99)),  # never seen
        (dbz.key(99), None, at(99)),
    ]
    where = produce(broker, topic, first)
    wait_committed(broker_config(broker), topic, ends_of(where))
    want = {
        1: ("ada L", "u", where[5][1]),
        3: ("cy", "r", where[2][1]),
        4: ("dee", "c", where[3][1]),
    }
    assert views(broker, topic) == [want] * 3

    second = [
        (dbz.key(3), dbz.event("u", before=row(3, "cy"), after=row(3, "cyd")), at(3)),
        (dbz.key(4), dbz.event("d", before=row(4, "dee")), at(4)),
        (dbz.key(4), None, at(4)),
        (dbz.key(5), dbz.event("c", after=row(5, "eve")), at(5)),
        (dbz.key(2), dbz.event("c", after=row(2, "bob again")), at(2)),  # back after its delete
    ]
    where = produce(broker, topic, second)
    wait_committed(broker_config(broker), topic, ends_of(where))
    want = {
        1: want[1],
        2: ("bob again", "c", where[4][1]),
        3: ("cyd", "u", where[0][1]),
        5: ("eve", "c", where[3][1]),
    }
    assert views(broker, topic) == [want] * 3

    status = table_status(broker, topic)
    assert status["skipped_records"] == 0
    settings = status["settings"]
    assert (settings["id_columns"], settings["cdc_field"]) == (["_from_debezium_key_"], "_cdc.op")
    source = admin_sql(
        broker, f"SELECT _cdc.source.lsn, _cdc.ts FROM floe.default.{topic} WHERE id = 5"
    )
    assert source[0][0] == 1000 + dbz.n - 1  # the source struct as Debezium wrote it


def test_an_append_table_keeps_every_event_with_its_cdc_and_evolves(broker: Broker) -> None:
    topic = "dbz_audit"
    create_table_topic(broker.bootstrap, topic, 1, DEBEZIUM, flatten=True)
    dbz = Connector(broker, topic)
    events = [
        (dbz.key(1), dbz.event("c", after=row(1, "ada")), 0),
        (dbz.key(1), dbz.event("u", before=row(1, "ada"), after=row(1, "ada l")), 0),
        (dbz.key(1), dbz.event("d", before=row(1, "ada l")), 0),
        (dbz.key(1), None, 0),  # the tombstone stays one: a row of nulls
        (None, dbz.event("t"), 0),  # a truncate carries no row: a bad record
    ]
    where = produce(broker, topic, events)
    wait_committed(broker_config(broker), topic, ends_of(where))

    # the row record gains a field: a new envelope version evolves the table
    email = {"name": "email", "type": ["null", "string"], "default": None}
    dbz2 = Connector(broker, topic, {**ROW, "fields": [*ROW["fields"], email]})
    dbz2.n = dbz.n
    later = [(dbz2.key(2), dbz2.event("c", after=row(2, "bob", email="bob@x")), 0)]
    where += produce(broker, topic, later)
    wait_committed(broker_config(broker), topic, ends_of(where))

    offsets = [o for _, o in where]
    want = [
        (offsets[0], 1, "ada", None, "c"),
        (offsets[1], 1, "ada l", None, "u"),
        (offsets[2], 1, "ada l", None, "d"),
        (offsets[3], None, None, None, None),
        (offsets[5], 2, "bob", "bob@x", "c"),
    ]
    columns = "_kafka_metadata.offset AS o, id, name, email, _cdc.op"
    spark = admin_sql(broker, f"SELECT {columns} FROM floe.default.{topic} ORDER BY o")
    iceberg = loaded(broker, topic)
    duck = (
        duckdb_connect()
        .execute(f"SELECT {columns} FROM iceberg_scan('{iceberg.metadata_location}') ORDER BY o")
        .fetchall()
    )
    arrow = iceberg.scan().to_arrow()
    pyiceberg = sorted(
        (r["_kafka_metadata"]["offset"], r["id"], r["name"], r["email"],
         r["_cdc"]["op"] if r["_cdc"] else None)
        for r in arrow.to_pylist()
    )  # fmt: skip
    assert [tuple(r) for r in spark] == [tuple(r) for r in duck] == pyiceberg == want
    cdc = {r["_kafka_metadata"]["offset"]: r["_cdc"] for r in arrow.to_pylist()}
    assert cdc[offsets[3]] is None
    assert cdc[offsets[0]]["offset"] == offsets[0]
    assert cdc[offsets[0]]["ts"] == datetime.fromtimestamp((TS_MS + 1) / 1000, UTC)
    assert cdc[offsets[0]]["source"]["table"] == "customers"
    assert [f.name for f in iceberg.schema().fields][:4] == ["id", "name", "email", "_cdc"]
    assert table_status(broker, topic)["skipped_records"] == 1


def test_a_key_that_cannot_identify_rows_is_refused_or_reported(broker: Broker) -> None:
    """A string key is refused when the config is set (INVALID_CONFIG, one line); a key
    record whose fields are not columns fails the round (UpsertSpecError in status,
    retried, nothing lost) until the key schema names columns."""
    from_key = {
        **DEBEZIUM,
        "table.topic.id.columns": "[_from_debezium_key_]",
        "table.topic.commit.interval.ms": "1000",
    }
    with pytest.raises(KafkaException) as info:
        create_table_topic(broker.bootstrap, "dbz_refused", 1, from_key, flatten=True)
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "[_from_debezium_key_] takes the columns from the key's record schema" in error.str()
    assert "\n" not in error.str()

    topic = "dbz_tenants"
    schema_key = {**from_key, "table.topic.convert.key.type": "by_schema_id"}
    create_table_topic(broker.bootstrap, topic, 1, schema_key, flatten=True)
    registry = SchemaRegistryClient({"url": broker.registry_url})
    tenant_key = {**KEY, "fields": [{"name": "tenant", "type": "string"}]}
    keys = AvroSerializer(registry, json.dumps(tenant_key))
    dbz = Connector(broker, topic)

    def key(tenant: str) -> bytes:
        out = keys({"tenant": tenant}, SerializationContext(topic, MessageField.KEY))
        assert out is not None
        return out

    produce(broker, topic, [(key("t1"), dbz.event("c", after=row(2, "bob")), 0)])
    deadline = time.monotonic() + 120
    while (shown := table_status(broker, topic))["last_error"] is None:
        broker.assert_alive()
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert shown["status"] == "failing"
    assert shown["last_error"] == (
        "UpsertSpecError: id.columns [_from_debezium_key_]: key schema id "
        f"{registry.get_latest_version(f'{topic}-key').schema_id} field 'tenant' is not a "
        "column of the table"
    )

    # the key schema becomes the primary key (a new version, as after a connector fix;
    # its id is the one dbz_customers-key registered first: the newest version counts)
    registry.set_compatibility(f"{topic}-key", "NONE")
    where = produce(broker, topic, [(dbz.key(1), dbz.event("c", after=row(1, "ada")), 0)])
    wait_committed(broker_config(broker), topic, ends_of(where))
    # the record that waited is in too (its id is its row's)
    assert views(broker, topic) == [{1: ("ada", "c", where[0][1]), 2: ("bob", "c", 0)}] * 3
    assert table_status(broker, topic)["last_error"] is None
