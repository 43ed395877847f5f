"""A table topic in ``string`` mode materializes through a real ``floe up`` with Spark.

One broker, one topic of 3 partitions with a 1 s commit interval: two produce bursts,
a clean restart and a third burst, then a burst while the table topic is disabled.
After each, the Iceberg table (read with pyiceberg in the test process) holds exactly
the produced records, field by field, each (partition, offset) once; after the restart
the coordinator resumes from the offsets recorded in the table's snapshot summary;
while disabled nothing lands, and re-enabling resumes from the table.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

TOPIC = "clicks_raw"
PARTITIONS = 3
DEADLINE_S = 90.0


def records(first: int, n: int) -> list[Record]:
    """UTF-8 keys and values (string mode), null keys, tombstones, headers with a null."""
    base = recent_ts()
    out = []
    for i in range(first, first + n):
        key = None if i % 10 == 3 else f"user-{i % 7}".encode()
        value = None if i % 10 == 9 else f"page {i} é".encode()
        headers = (("src", b"web"), ("n", str(i).encode()), ("null", None)) if i % 2 else ()
        out.append(Record(key, value, headers, base + i, i % PARTITIONS))
    return out


def table_rows(broker: Broker) -> list[dict[str, Any]]:
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    settings = cat.CatalogSettings.from_config(config)
    try:
        table = cat.load_table(cat.load_catalog(settings), "default", TOPIC)
    except Exception:  # not created yet
        return []
    rows: list[dict[str, Any]] = table.scan().to_arrow().to_pylist()
    return rows


def wait_rows(broker: Broker, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = table_rows(broker)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        broker.assert_alive()
        time.sleep(0.5)


def assert_table_equals(rows: list[dict[str, Any]], produced: list[Record]) -> None:
    where = [(r["_kafka_metadata"]["partition"], r["_kafka_metadata"]["offset"]) for r in rows]
    assert len(where) == len(set(where)), "duplicate (partition, offset) rows"
    assert len(rows) == len(produced)
    by_offset = {w: r for w, r in zip(where, rows, strict=True)}
    for rec in produced:
        row = by_offset[(rec.partition, rec.offset)]
        assert row["_kafka_value"] == (None if rec.value is None else rec.value.decode())
        assert row["_kafka_key"] == (None if rec.key is None else rec.key.decode())
        assert list(row["_kafka_header"] or []) == list(rec.headers)
        meta = row["_kafka_metadata"]
        assert int(meta["timestamp"].timestamp() * 1000) == rec.timestamp
        assert meta["timestamp_type"] == "CreateTime"


def committed(broker: Broker) -> list[tuple[int, float, str]]:
    """(rows, seconds, offsets) of each tabletopic.committed log line."""
    pattern = r"tabletopic\.committed .*? rows=(\d+) .*?seconds=([\d.]+) offsets=(\S+)"
    return [(int(m[1]), float(m[2]), m[3]) for m in re.finditer(pattern, broker.stderr_text())]


def set_enable(broker: Broker, value: str) -> None:
    res = ConfigResource(
        ResourceType.TOPIC,
        TOPIC,
        incremental_configs=[
            ConfigEntry("table.topic.enable", value, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin(broker.bootstrap).incremental_alter_configs([res])[res].result(ADMIN_TIMEOUT_S)


def test_string_topic_materializes_exactly_once(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory({"spark.sql.shuffle.partitions": "2"})
    create_topic(
        b.bootstrap,
        TOPIC,
        PARTITIONS,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "string",
        },
    )
    produced = confluent_produce(b.bootstrap, TOPIC, records(0, 300))
    # a key that is not UTF-8 cannot be a string key: skipped (errors.tolerance default)
    bad = confluent_produce(b.bootstrap, TOPIC, [Record(b"\xff\xfe", b"x", (), None, 0)])
    assert_table_equals(wait_rows(b, len(produced)), produced)

    produced += confluent_produce(b.bootstrap, TOPIC, records(300, 200))
    rows = wait_rows(b, len(produced))
    time.sleep(2.5)  # two more intervals: rounds without new data commit nothing
    assert_table_equals(table_rows(b), produced)
    before = committed(b)
    assert sum(r for r, _, _ in before) == len(produced)
    log = b.stderr_text()
    assert f"tabletopic.bad_record topic={TOPIC} partition=0 offset={bad[0].offset}" in log
    assert re.search(r"tabletopic\.committed .*? skipped=1 ", log)

    b.restart()  # SIGTERM, clean exit, start
    produced += confluent_produce(b.bootstrap, TOPIC, records(500, 100))
    rows = wait_rows(b, len(produced))
    assert_table_equals(rows, produced)
    log = b.stderr_text()
    recovered = re.findall(r"tabletopic\.recovered .*?offsets=(\S+)", log)
    assert recovered[-1] == before[-1][2], "resumed from the offsets recorded in the table"
    assert json.loads(committed(b)[-1][2]) == {
        str(p): sum(1 for r in produced + bad if r.partition == p) for p in range(PARTITIONS)
    }

    # disabled: nothing more lands, the table stays; re-enabled: resumes from the table
    set_enable(b, "false")
    time.sleep(1.5)  # the manager sees the change within a second
    more = confluent_produce(b.bootstrap, TOPIC, records(600, 30))
    time.sleep(2.5)
    assert len(table_rows(b)) == len(produced)
    set_enable(b, "true")
    produced += more
    assert_table_equals(wait_rows(b, len(produced)), produced)

    # deleting the topic stops its coordinator and keeps the table with its rows
    stop_line = f"tabletopic.stopped topic={TOPIC}"
    stops = b.stderr_text().count(stop_line)  # one already: the disable above
    admin(b.bootstrap).delete_topics([TOPIC], operation_timeout=10)[TOPIC].result(ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + 10
    while b.stderr_text().count(stop_line) == stops:
        assert time.monotonic() < deadline, "the coordinator did not stop"
        time.sleep(0.2)
    assert_table_equals(table_rows(b), produced)

    for n, seconds, _ in committed(b):
        print(f"round rows={n} seconds={seconds:.2f} rows/s={n / seconds:.0f}")
