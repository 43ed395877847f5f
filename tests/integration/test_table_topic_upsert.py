"""Upsert and CDC table topics, end to end with the real broker, Spark and catalog.

The readers users query with (the broker's Spark SQL, DuckDB's ``iceberg_scan`` and
pyiceberg) must all see the upserted view: one row per id, the last record's, and no
row for a deleted id. Semantics checked round by round:

* several records of one id in one round: the last by offset wins (no duplicate row);
* a record of an id the table holds replaces its row (a position delete + the new row);
* a tombstone (``upsert.enable``) or a ``D`` in the CDC field deletes the id's row; a
  delete of an id never seen is a no-op;
* a record whose id column is null is a bad record (skipped and counted under
  ``errors.tolerance = invalid_data``), never a row.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_table_topic, create_topic, set_topic_config
from helpers.broker import Broker, floe_bin
from helpers.module_broker import module_broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_readers import admin_sql, duckdb_connect, table_status
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(420), *SPARK_WARNING_FILTERS]

UPSERT_BY_KEY = {
    "table.topic.convert.key.type": "string",
    "table.topic.id.columns": "[_kafka_key]",
    "table.topic.upsert.enable": "true",
}
ACCOUNT = {
    "type": "record",
    "name": "Account",
    "fields": [
        {"name": "id", "type": ["null", "long"], "default": None},
        {"name": "name", "type": "string"},
        {"name": "op", "type": ["null", "string"], "default": None},
    ],
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with module_broker(tmp_path_factory.mktemp("upsert") / "data") as b:
        yield b


def loaded(broker: Broker, table: str) -> Any:
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    settings = cat.CatalogSettings.from_config(config)
    return cat.load_table(cat.load_catalog(settings), "default", table)


def views(broker: Broker, table: str, key: str, value: str) -> list[dict[Any, Any]]:
    """``{key: value}`` of the table's rows as each reader sees them: Spark SQL (the
    broker's), DuckDB and pyiceberg; each asserted to hold every key once."""
    out = []
    spark = admin_sql(broker, f"SELECT {key}, {value} FROM floe.default.{table}")
    iceberg = loaded(broker, table)
    duck = (
        duckdb_connect()
        .execute(f"SELECT {key}, {value} FROM iceberg_scan('{iceberg.metadata_location}')")
        .fetchall()
    )
    arrow = iceberg.scan(selected_fields=(key, value)).to_arrow()
    pyiceberg = list(
        zip(arrow.column(key).to_pylist(), arrow.column(value).to_pylist(), strict=True)
    )
    for rows in (spark, duck, pyiceberg):
        view = {k: v for k, v in rows}
        assert len(view) == len(rows), f"an id has several rows: {sorted(rows)}"
        out.append(view)
    return out


def test_records_upsert_by_key_and_tombstones_delete(broker: Broker) -> None:
    topic = "accounts"
    create_table_topic(broker.bootstrap, topic, 2, UPSERT_BY_KEY)
    first = [
        (b"k1", b"a1", 0),
        (b"k2", b"b1", 0),
        (b"k3", b"c1", 1),
        (b"k1", b"a2", 0),  # the same round: the last by offset wins
    ]
    wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, first)))
    want = {"k1": "a2", "k2": "b1", "k3": "c1"}
    assert views(broker, topic, "_kafka_key", "_kafka_value") == [want] * 3

    second = [
        (b"k2", b"b2", 0),  # replaces b1
        (b"k3", None, 1),  # a tombstone deletes k3
        (b"k4", None, 1),  # deleting an id never seen: nothing
        (b"k1", b"a3", 0),
        (b"k1", b"a4", 0),
        (b"k5", b"e1", 1),
    ]
    wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, second)))
    want = {"k1": "a4", "k2": "b2", "k5": "e1"}
    assert views(broker, topic, "_kafka_key", "_kafka_value") == [want] * 3
    summary = loaded(broker, topic).current_snapshot().summary.additional_properties
    assert int(summary["total-position-deletes"]) == 3  # k1, k2 and k3 of the first round

    settings = table_status(broker, topic)["settings"]
    assert (settings["id_columns"], settings["upsert"]) == (["_kafka_key"], True)
    shown = subprocess.run(
        [floe_bin(), "table", "status", topic, "--admin", broker.admin_url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Rows:        upsert by [_kafka_key], deletes: tombstones" in shown
    with urllib.request.urlopen(f"{broker.admin_url}/topics/{topic}", timeout=30) as page:
        assert "upsert by [_kafka_key]" in page.read().decode()


def test_a_partitioned_upsert_table_deletes_in_each_files_partition(broker: Broker) -> None:
    """Position deletes carry the spec and partition of the data file they delete from:
    a table bucketed by key, then re-specced by day, upserted across both specs."""
    topic = "sessions"
    bucketed = {"table.topic.partition.by": "[bucket(_kafka_key, 4)]"}
    create_table_topic(broker.bootstrap, topic, 1, {**UPSERT_BY_KEY, **bucketed})
    first = [(f"k{i}".encode(), f"a{i}".encode(), 0) for i in range(12)]
    wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, first)))
    by_day = "[day(_kafka_metadata.timestamp)]"
    set_topic_config(broker.bootstrap, topic, "table.topic.partition.by", by_day)
    second = [(f"k{i}".encode(), f"b{i}".encode(), 0) for i in range(0, 12, 2)]
    second += [(b"k1", None, 0), (b"k12", b"b12", 0)]
    wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, second)))
    while table_status(broker, topic)["partition_spec"] != by_day:  # the spec evolved
        third = [(b"k3", b"c3", 0)]
        wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, third)))
    last = [(b"k5", b"d5", 0), (b"k3", None, 0)]  # under the new spec, over old files
    wait_committed(broker_config(broker), topic, ends_of(produce(broker, topic, last)))
    want = {f"k{i}": f"a{i}" for i in range(12)}
    want.update({f"k{i}": f"b{i}" for i in range(0, 12, 2)})
    want.update({"k12": "b12", "k5": "d5"})
    del want["k1"], want["k3"]
    assert views(broker, topic, "_kafka_key", "_kafka_value") == [want] * 3


def test_a_cdc_field_deletes_and_a_null_id_is_a_bad_record(broker: Broker) -> None:
    topic = "customers"
    registry = SchemaRegistryClient({"url": broker.registry_url})
    serialize = AvroSerializer(registry, json.dumps(ACCOUNT))
    ctx = SerializationContext(topic, MessageField.VALUE)

    def account(i: int | None, name: str, op: str | None) -> bytes:
        value = serialize({"id": i, "name": name, "op": op}, ctx)
        assert value is not None
        return value

    cdc = {"automq.table.topic.id.columns": "[id]", "automq.table.topic.cdc.field": "op"}
    create_table_topic(broker.bootstrap, topic, 1, cdc, flatten=True)
    first = [account(1, "ada", "I"), account(2, "bob", "i"), account(3, "cy", None)]
    wait_committed(
        broker_config(broker), topic, ends_of(produce(broker, topic, [(None, v, 0) for v in first]))
    )
    assert views(broker, topic, "id", "name") == [{1: "ada", 2: "bob", 3: "cy"}] * 3

    second = [
        account(1, "ada lovelace", "u"),
        account(2, "bob", "delete"),  # the first letter: D
        account(9, "nobody", "D"),  # never seen: nothing
        account(None, "no id", "I"),  # a bad record
        account(4, "dee", "c"),  # any other letter upserts
    ]
    wait_committed(
        broker_config(broker),
        topic,
        ends_of(produce(broker, topic, [(None, v, 0) for v in second])),
    )
    want = {1: "ada lovelace", 3: "cy", 4: "dee"}
    assert views(broker, topic, "id", "name") == [want] * 3
    assert table_status(broker, topic)["skipped_records"] == 1


def test_compaction_running_beside_upsert_rounds_keeps_one_row_per_key(broker: Broker) -> None:
    """Maintenance compacts the table (folding the position deletes into rewritten
    files) again and again while rounds upsert the same keys: a round whose deletes
    refer to a file compaction rewrote is redone, never leaving a stale or lost row."""
    topic = "balances"
    on_demand = {"table.topic.maintenance.interval.ms": "0"}
    compaction = {"table.topic.maintenance.min.input.files": "2"}
    create_table_topic(broker.bootstrap, topic, 1, {**UPSERT_BY_KEY, **on_demand, **compaction})
    compact = urllib.request.Request(
        f"{broker.admin_url}/api/v1/tables/{topic}/maintenance", data=b"{}", method="POST"
    )
    runs: list[dict[str, Any]] = []
    failures: list[str] = []
    stop = threading.Event()

    def compact_again_and_again() -> None:
        while not stop.is_set():
            try:
                with urllib.request.urlopen(compact, timeout=120) as answer:
                    runs.append(json.loads(answer.read()))
            except urllib.error.HTTPError as exc:  # a step refused: said in the output
                failures.append(f"{exc.code} {exc.read()[:300]!r}")
                time.sleep(0.5)

    compactor = threading.Thread(target=compact_again_and_again, daemon=True)
    last: dict[str, str] = {}

    def upsert_burst(burst: int) -> None:
        step = 1 + burst % 3  # each burst upserts a different subset of the keys
        batch = [(f"k{i}".encode(), f"v{burst}-{i}".encode(), 0) for i in range(0, 40, step)]
        ends = ends_of(produce(broker, topic, batch))
        last.update({k.decode(): v.decode() for k, v, _ in batch if v is not None})
        wait_committed(broker_config(broker), topic, ends)

    upsert_burst(0)  # the table and Spark exist: compaction from now on, beside rounds
    compactor.start()
    try:
        for burst in range(1, 7):
            upsert_burst(burst)
    finally:
        stop.set()
        compactor.join(180)
    print(f"{len(runs)} maintenance runs, {len(failures)} refused: {failures}")
    assert any(r["rewritten_files"] for r in runs), (runs, failures)  # it did rewrite files
    assert views(broker, topic, "_kafka_key", "_kafka_value") == [last] * 3


def test_upsert_settings_without_id_columns_are_refused(broker: Broker) -> None:
    with pytest.raises(KafkaException, match="upserts need the columns identifying a row"):
        create_topic(
            broker.bootstrap,
            "no_ids",
            1,
            {"table.topic.enable": "true", "table.topic.upsert.enable": "true"},
        )


def test_id_columns_the_known_columns_cannot_take_are_refused_when_set(broker: Broker) -> None:
    """The columns are known from the registry's latest schema (or the fixed string
    layout): an id column that is missing or floating point is refused by CreateTopics
    and AlterConfigs with one line, not at the first round."""
    topic = "scores"
    registry = SchemaRegistryClient({"url": broker.registry_url})
    score = {
        "type": "record",
        "name": "Score",
        "fields": [{"name": "player", "type": "long"}, {"name": "points", "type": "double"}],
    }
    registry.register_schema(f"{topic}-value", Schema(json.dumps(score), "AVRO"))
    with pytest.raises(KafkaException, match="an id column must be a primitive type other"):
        create_table_topic(
            broker.bootstrap, topic, 1, {"table.topic.id.columns": "[points]"}, flatten=True
        )
    create_table_topic(
        broker.bootstrap, topic, 1, {"table.topic.id.columns": "[player]"}, flatten=True
    )
    with pytest.raises(KafkaException, match="has no column 'name'"):
        set_topic_config(broker.bootstrap, topic, "table.topic.cdc.field", "name")
    with pytest.raises(KafkaException, match="_kafka_value is string, not a struct"):
        create_table_topic(
            broker.bootstrap,
            "plain",
            1,
            {**UPSERT_BY_KEY, "table.topic.id.columns": "[_kafka_value.id]"},
        )


def broker_config(broker: Broker) -> Any:
    return load_config(None, {"data.dir": str(Path(broker.data_dir))}, environ={})
