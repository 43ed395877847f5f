"""Hybrid reads (``floe sql --fresh``, the admin API's SQL with ``fresh``) against the
real broker, Spark and catalog: a table topic read fresh is its table plus every record
above the table's committed offsets, each record exactly once.

The tables here commit every 15 minutes (the longest interval allowed), after a first
round that commits what the topic held when it became a table topic: whatever is
produced after that is only in the log while the test runs, until the test shortens the
interval to force a commit and checks the boundary again.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.config import load_config
from helpers.admin import TABLE_TOPIC_STRING, create_topic, set_topic_config, watermarks
from helpers.broker import Broker, floe_bin
from helpers.module_broker import module_broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_readers import admin_sql
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(420), *SPARK_WARNING_FILTERS]

SLOW_TABLE = {
    **TABLE_TOPIC_STRING,
    "table.topic.enable": "false",
    "table.topic.commit.interval.ms": "900000",
    "table.topic.convert.key.type": "string",
}
"""A table topic (once enabled) whose rounds after the first are 15 minutes apart."""
ROWS = (
    "SELECT _kafka_metadata.partition, _kafka_metadata.offset, _kafka_key, _kafka_value "
    "FROM floe.default.{table}"
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with module_broker(tmp_path_factory.mktemp("fresh") / "data") as b:
        yield b


def config_of(broker: Broker) -> Any:
    return load_config(None, {"data.dir": str(Path(broker.data_dir))}, environ={})


def committed_table(broker: Broker, topic: str, records: list[tuple[bytes, bytes, int]]) -> None:
    """``topic`` made a table topic holding ``records`` (its first round committed)."""
    ends = ends_of(produce(broker, topic, records))
    set_topic_config(broker.bootstrap, topic, "table.topic.enable", "true")
    wait_committed(config_of(broker), topic, ends)


def rows(broker: Broker, statement: str, fresh: bool) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in admin_sql(broker, statement, fresh=fresh))


def aborted_and_committed(broker: Broker, topic: str) -> None:
    """One transaction aborted (its record must never show) and one committed."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-tx", "acks": "all"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", b"kx", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-tx", b"ky", partition=1)
    producer.commit_transaction(30)


def test_a_fresh_read_sees_every_record_once_across_the_commit_boundary(broker: Broker) -> None:
    topic = "clicks"
    create_topic(broker.bootstrap, topic, 2, SLOW_TABLE)
    committed_table(broker, topic, [(b"k1", b"a", 0), (b"k2", b"b", 1), (b"k3", b"c", 0)])
    produce(broker, topic, [(b"k4", b"d", 1), (b"k5", b"e", 0)])
    aborted_and_committed(broker, topic)
    produce(broker, topic, [(b"k6", b"f", 1)])
    time.sleep(0.1)  # produced 0.1 s before the query

    query = ROWS.format(table=topic)
    table = rows(broker, query, fresh=False)
    assert sorted(r[3] for r in table) == ["a", "b", "c"]  # the table alone: the first round
    fresh = rows(broker, query, fresh=True)
    assert sorted(r[3] for r in fresh) == ["a", "b", "c", "d", "e", "f", "in-tx"]
    assert len({(r[0], r[1]) for r in fresh}) == len(fresh)  # each offset once
    assert set(table) <= set(fresh)  # the committed rows unchanged

    # however the statement names the table: a CTE, a subquery, an alias, a self-join
    shapes = [
        f"WITH x AS (SELECT * FROM floe.default.{topic}) SELECT count(*) FROM x",
        f"SELECT count(*) FROM floe.default.{topic} c WHERE c._kafka_key IN "
        f"(SELECT _kafka_key FROM floe.default.`{topic}`)",
        f"SELECT count(*) FROM floe.default.{topic} a JOIN floe.default.{topic} b "
        "ON a._kafka_key = b._kafka_key",
        f"SELECT count(*) FROM floe.default.{topic} WHERE {topic}._kafka_value <> 'zz'",
    ]
    for statement in shapes:
        assert admin_sql(broker, statement, fresh=True) == [[7]], statement
        assert admin_sql(broker, statement, fresh=False) == [[3]], statement
    # time travel is left as written
    snapshot = admin_sql(
        broker, f"SELECT snapshot_id FROM floe.default.{topic}.snapshots", fresh=True
    )[-1][0]
    at = f"SELECT count(*) FROM floe.default.{topic} VERSION AS OF {snapshot}"
    assert admin_sql(broker, at, fresh=True) == [[3]]

    # the CLI asks the running broker
    shown = subprocess.run(
        [floe_bin(), "sql", "--fresh", "--admin", broker.admin_url, "--format", "json",
         f"SELECT _kafka_value FROM floe.default.{topic} ORDER BY _kafka_value"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert [r["_kafka_value"] for r in json.loads(shown)] == ["a", "b", "c", "d", "e", "f", "in-tx"]

    # the boundary moves with a commit: still each record once, and the newest too
    ends = {p: end for p, (_, end) in watermarks(broker.bootstrap, topic, 2).items()}
    set_topic_config(broker.bootstrap, topic, "table.topic.commit.interval.ms", "1000")
    wait_committed(config_of(broker), topic, ends)
    assert len(rows(broker, query, fresh=False)) == 7
    produce(broker, topic, [(b"k7", b"g", 0)])
    time.sleep(0.1)
    fresh = rows(broker, query, fresh=True)
    assert sorted(r[3] for r in fresh) == ["a", "b", "c", "d", "e", "f", "g", "in-tx"]
    assert len({(r[0], r[1]) for r in fresh}) == len(fresh)


def test_a_fresh_read_of_an_upsert_table_applies_the_tail_by_id(broker: Broker) -> None:
    topic = "accounts"
    upsert = {"table.topic.id.columns": "[_kafka_key]", "table.topic.upsert.enable": "true"}
    create_topic(broker.bootstrap, topic, 2, {**SLOW_TABLE, **upsert})
    committed_table(broker, topic, [(b"k1", b"a1", 0), (b"k2", b"b1", 1), (b"k3", b"c1", 0)])
    produce(
        broker,
        topic,
        [
            (b"k1", b"a2", 0),  # replaces a committed row
            (b"k1", b"a3", 1),  # ... twice, in another partition (later timestamp)
            (b"k2", None, 1),  # deletes a committed row
            (b"k9", None, 0),  # deletes an id never seen: nothing
            (b"k4", b"d1", 0),  # a new id
        ],
    )
    query = f"SELECT _kafka_key, _kafka_value FROM floe.default.{topic}"
    assert rows(broker, query, fresh=False) == [("k1", "a1"), ("k2", "b1"), ("k3", "c1")]
    assert rows(broker, query, fresh=True) == [("k1", "a3"), ("k3", "c1"), ("k4", "d1")]


def test_a_fresh_read_shows_a_field_only_the_tail_has(broker: Broker) -> None:
    """The tail's records carry a newer schema than the committed snapshot: the table is
    evolved as the next round would, the statement may name the new column, and the
    snapshot's rows have it null."""
    topic = "people"
    registry = SchemaRegistryClient({"url": broker.registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = {"type": "record", "name": "Person", "fields": [{"name": "name", "type": "string"}]}
    v2 = {
        **v1,
        "fields": [*v1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
    }
    first = AvroSerializer(registry, json.dumps(v1))
    flatten = {
        "table.topic.convert.value.type": "by_schema_id",
        "table.topic.transform.value.type": "flatten",
    }
    create_topic(broker.bootstrap, topic, 1, {**SLOW_TABLE, **flatten})
    committed_table(broker, topic, [(b"1", first({"name": "ada"}, ctx), 0)])
    second = AvroSerializer(registry, json.dumps(v2))
    produce(broker, topic, [(b"2", second({"name": "bob", "email": "bob@x"}, ctx), 0)])

    query = f"SELECT name, email FROM floe.default.{topic}"
    assert rows(broker, query, fresh=True) == [("ada", None), ("bob", "bob@x")]
