"""``table.topic.partition.by``, end to end with the real broker, Spark and catalog.

A table topic configured with a spec gets a partitioned table whose rounds write one
set of files per partition value (rows of every bucket arrive mixed in each Spark
task); changing the setting evolves the table's spec at the next round (files written
before keep theirs) and Spark SQL, DuckDB and pyiceberg read every acknowledged record
once across both specs. A spec the grammar refuses, or the table's known columns cannot
take, is refused by CreateTopics and AlterConfigs; one whose columns are not known yet (no
schema registered) stops nothing but the rounds, says why in the status, and once fixed
every record lands.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.tabletopic import catalog as cat
from helpers.admin import create_table_topic, set_topic_config
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts
from helpers.table_readers import (
    acked_rows,
    catalog_settings,
    duckdb_connect,
    duckdb_rows,
    pyiceberg_rows,
    spark_sql_rows,
    table_status,
    wait_for_table_rows,
)

pytestmark = [pytest.mark.timeout(420), pytest.mark.filterwarnings("ignore::ResourceWarning")]

DEADLINE_S = 150.0
T = 30.0
PARTITION_BY = "table.topic.partition.by"
PERSON = {"type": "record", "name": "Person", "fields": [{"name": "name", "type": "string"}]}


def records(word: str, partitions: int, per_partition: int, first: int = 0) -> list[Record]:
    """Keys ``k0``...``k99`` cycling, so that each partition's records (one Spark task
    each) fall in every bucket, mixed."""
    base = recent_ts()
    return [
        Record(f"k{i % 100}".encode(), f"{word} {p}-{i}".encode(), (), base + i, p)
        for p in range(partitions)
        for i in range(first, first + per_partition)
    ]


def set_partition_by(broker: Broker, topic: str, spec: str, name: str = PARTITION_BY) -> None:
    set_topic_config(broker.bootstrap, topic, name, spec)


def files_by_spec(broker: Broker, table_id: tuple[str, str]) -> dict[int, list[dict[str, Any]]]:
    table = cat.load_table(cat.load_catalog(catalog_settings(broker)), *table_id)
    out: dict[int, list[dict[str, Any]]] = {}
    for f in table.inspect.files().to_pylist():
        out.setdefault(f["spec_id"], []).append(f)
    return out


def test_a_configured_spec_partitions_the_table_and_a_new_one_evolves_it(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    topic, table_id = "parted", ("default", "parted")
    # the AutoMQ spelling, and Spark's argument order for bucket
    spec = "[bucket(4, _kafka_key), day(_kafka_metadata.timestamp)]"
    create_table_topic(broker.bootstrap, topic, 2, {f"automq.{PARTITION_BY}": spec})
    acked = confluent_produce(broker.bootstrap, topic, records("first", 2, 100))
    wait_for_table_rows(broker, table_id, 200, DEADLINE_S)

    [first] = files_by_spec(broker, table_id).values()
    buckets = {f["partition"]["_kafka_key_bucket_4"] for f in first}
    assert buckets == {0, 1, 2, 3}  # each task's mixed rows went to every bucket's file
    assert sum(f["record_count"] for f in first) == 200
    shown = table_status(broker, topic)
    assert shown["partition_spec"] == "[bucket(_kafka_key, 4), day(_kafka_metadata.timestamp)]"
    assert shown["settings"]["partition_by"] == shown["partition_spec"]

    set_partition_by(broker, topic, "[_kafka_metadata.partition]", f"automq.{PARTITION_BY}")
    # a round already running when the setting changed commits with the old spec: the
    # new one applies from the next round, so records go on until it did
    deadline, produced = time.monotonic() + DEADLINE_S, 100
    while True:
        acked += confluent_produce(broker.bootstrap, topic, records("again", 2, 20, produced))
        produced += 20
        wait_for_table_rows(broker, table_id, len(acked), DEADLINE_S)
        table = cat.load_table(cat.load_catalog(catalog_settings(broker)), *table_id)
        new = files_by_spec(broker, table_id).get(table.spec().spec_id, [])
        if {f["partition"].get("_kafka_metadata_partition") for f in new} == {0, 1}:
            break
        assert time.monotonic() < deadline, new

    by_spec = files_by_spec(broker, table_id)
    assert len(by_spec) == 2 and table.spec().spec_id in by_spec
    old = [f for spec_id, fs in by_spec.items() if spec_id != table.spec().spec_id for f in fs]
    # the first round's files keep their spec
    assert {f["file_path"] for f in first} <= {f["file_path"] for f in old}
    assert sum(f["record_count"] for f in old + new) == len(acked)
    assert table_status(broker, topic)["partition_spec"] == "[_kafka_metadata.partition]"

    want = acked_rows(acked)
    assert pyiceberg_rows(catalog_settings(broker), table_id) == want
    assert spark_sql_rows(broker, table_id) == want
    source = f"iceberg_scan('{table.metadata_location}')"
    assert duckdb_rows(duckdb_connect(), source) == want


def test_a_spec_the_table_cannot_take_is_refused_or_reported_and_nothing_is_lost(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    # a string has no day: the string layout's columns are known when the spec is set
    with pytest.raises(
        KafkaException,
        match=r"partition.by 'day\(_kafka_value\)': day does not apply to _kafka_value of "
        r"type string \(the columns of strings's table\)",
    ):
        create_table_topic(broker.bootstrap, "strings", 1, {PARTITION_BY: "[day(_kafka_value)]"})
    create_table_topic(broker.bootstrap, "strings", 1, {PARTITION_BY: "[_kafka_key]"})
    with pytest.raises(KafkaException, match="unknown transform 'week'"):  # the grammar
        set_partition_by(broker, "strings", "[week(_kafka_metadata.timestamp)]")
    with pytest.raises(KafkaException, match="has no column 'nosuch'"):
        set_partition_by(broker, "strings", "[bucket(nosuch, 4)]")

    # no schema registered yet: the spec is checked at the round, against the table
    topic, table_id = "badly_parted", ("default", "badly_parted")
    create_table_topic(broker.bootstrap, topic, 1, {PARTITION_BY: "[day(name)]"}, flatten=True)
    registry = SchemaRegistryClient({"url": broker.registry_url})
    serialize = AvroSerializer(registry, json.dumps(PERSON))
    ctx = SerializationContext(topic, MessageField.VALUE)
    names = [f"waiting {i}" for i in range(30)]
    values = [serialize({"name": n}, ctx) for n in names]
    confluent_produce(
        broker.bootstrap, topic, [Record(None, v, (), recent_ts(), 0) for v in values if v]
    )

    deadline = time.monotonic() + DEADLINE_S
    while (shown := table_status(broker, topic))["last_error"] is None:
        broker.assert_alive()
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert shown["status"] == "failing"
    assert shown["last_error"] == (
        "PartitionSpecError: partition.by 'day(name)': day does not apply to name of type string"
    )
    # the registry knows the columns now: the same kind of mistake is refused when set
    with pytest.raises(KafkaException, match="hour does not apply to name of type string"):
        set_partition_by(broker, topic, "[hour(name)]")

    set_partition_by(broker, topic, "[truncate(name, 7)]")  # "waiting"
    wait_for_table_rows(broker, table_id, 30, DEADLINE_S)
    shown = table_status(broker, topic)
    assert (shown["status"], shown["last_error"]) == ("ok", None)
    assert shown["partition_spec"] == "[truncate(name, 7)]"
    table = cat.load_table(cat.load_catalog(catalog_settings(broker)), *table_id)
    assert sorted(table.scan(selected_fields=("name",)).to_arrow().column("name").to_pylist()) == (
        sorted(names)
    )
