"""A by_latest_schema latest version the table cannot represent, end to end (issue 12).

One ``floe up`` (registry, Spark, Iceberg), JSON Schema ``by_latest_schema`` +
``flatten``: v1 has an integer ``n`` and its rows land; v2 (registered under NONE
compatibility) makes ``n`` a number, which an Iceberg ``long`` column cannot become. Its
records are conversion errors naming the schema: ``errors.tolerance=all`` skips and
counts them and the rounds go on (no failed round, no retry loop), and a representable
v3 is used by the next round; ``none`` stops the table with that reason. Rows are read
back with pyiceberg (no second JVM), the status with ``GET /api/v1/tables/<topic>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaRegistryClient,
    ServerConfig,
)

from floe.config import BrokerConfig, load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.table_readers import table_status
from helpers.table_schemas import ends_of, produce, wait_committed

pytestmark = [pytest.mark.timeout(240), *SPARK_WARNING_FILTERS]

DEADLINE_S = 120.0


def json_obj(topic: str, **properties: Any) -> Schema:
    """A JSON Schema titled per topic (the same text under two subjects shares one id)."""
    return Schema(json.dumps({"title": topic, "type": "object", "properties": properties}), "JSON")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("refused") / "data", {"spark.sql.shuffle.partitions": "1"})
    try:
        yield b.start()
    finally:
        b.close()


@pytest.fixture(scope="module")
def config(broker: Broker) -> BrokerConfig:
    return load_config(None, {"data.dir": str(broker.data_dir)}, environ={})


def rows(config: BrokerConfig, topic: str) -> list[dict[str, Any]]:
    """The table's flattened value columns, by offset."""
    table = cat.load_table(
        cat.load_catalog(cat.CatalogSettings.from_config(config)), "default", topic
    )
    got = table.scan().to_arrow().to_pylist()
    got.sort(key=lambda r: r["_kafka_metadata"]["offset"])
    return [{k: v for k, v in r.items() if not k.startswith("_kafka_")} for r in got]


def values(*objs: dict[str, Any]) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(None, json.dumps(o).encode(), 0) for o in objs]


@pytest.mark.parametrize("tolerance", ["all", "none"])
def test_refused_latest_schema_is_skipped_or_stops_never_loops(
    broker: Broker, config: BrokerConfig, tolerance: str
) -> None:
    topic = f"refused_{tolerance}"
    subject = f"{topic}-value"
    registry = SchemaRegistryClient({"url": broker.registry_url})
    registry.register_schema(subject, json_obj(topic, n={"type": "integer"}))
    registry.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel.NONE))
    create_topic(
        broker.bootstrap,
        topic,
        1,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "by_latest_schema",
            "table.topic.transform.value.type": "flatten",
            "table.topic.errors.tolerance": tolerance,
        },
    )
    first = produce(broker, topic, values(*({"n": i} for i in range(3))))
    wait_committed(config, topic, ends_of(first))
    assert rows(config, topic) == [{"n": 0}, {"n": 1}, {"n": 2}]

    # long -> double: not an Iceberg type promotion
    v2 = registry.register_schema(subject, json_obj(topic, n={"type": "number"}))
    refused = produce(broker, topic, values(*({"n": i + 0.5} for i in range(3))))
    why = f"value schema id {v2} (latest of subject {subject}) cannot be written to "
    failed_line = f"tabletopic.round_failed topic={topic} "

    if tolerance == "all":
        wait_committed(config, topic, ends_of(refused))
        s = table_status(broker, topic)
        assert s["status"] == "ok" and s["skipped_records"] == 3, s
        assert why in json.dumps(s), f"the status does not name the refused schema: {s}"
        assert rows(config, topic) == [{"n": 0}, {"n": 1}, {"n": 2}]
        # a representable latest version is used by the next round
        registry.register_schema(
            subject, json_obj(topic, n={"type": "integer"}, m={"type": "string"})
        )
        last = produce(broker, topic, values({"n": 10, "m": "x"}))
        wait_committed(config, topic, ends_of(last))
        assert rows(config, topic)[-1] == {"n": 10, "m": "x"}
        assert table_status(broker, topic)["skipped_records"] == 3
    else:
        deadline = time.monotonic() + DEADLINE_S
        while (s := table_status(broker, topic))["status"] != "stopped":
            assert time.monotonic() < deadline, f"the table did not stop: {s}"
            broker.assert_alive()
            time.sleep(0.5)
        assert why in s["last_error"] and "n: long cannot change to double" in s["last_error"]
        assert f"offset {refused[0][1]}" in s["last_error"]
        time.sleep(2.5)  # two more commit intervals: nothing may land, nothing retried
        assert rows(config, topic) == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert broker.stderr_text().count(f"tabletopic.stopped_on_bad_record topic={topic} ") == 1
    assert failed_line not in broker.stderr_text(), "a refused schema must not fail rounds"
