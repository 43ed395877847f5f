"""A Spark driver killed under a running broker is rebuilt; the table catches up.

One ``floe up`` with a 2-partition table topic in ``string`` mode (1 s commit
interval): N records land in the table; the Spark driver JVM (its pid is in
``<data dir>/spark/driver.pid``) is SIGKILLed; N more records are produced. The same
broker process logs ``spark.driver_lost``, starts a new driver and the table holds
exactly the 2N records, each (partition, offset) once. Then the new driver is killed
too and the broker still stops cleanly (stopping Spark after a death neither raises
nor hangs).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

TOPIC = "spark_restart"
PARTITIONS = 2
N = 200
DEADLINE_S = 60.0
Row = tuple[int, int, str]
"""(partition, offset, value) of one table row."""


def records(first: int, n: int) -> list[Record]:
    base = recent_ts()
    return [
        Record(f"k{i % 5}".encode(), f"v{i}".encode(), (), base + i, i % PARTITIONS)
        for i in range(first, first + n)
    ]


def table_rows(broker: Broker) -> list[Row]:
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    try:
        table = cat.load_table(
            cat.load_catalog(cat.CatalogSettings.from_config(config)), "default", TOPIC
        )
    except Exception:  # not created yet
        return []
    rows = table.scan().to_arrow().to_pylist()
    return [
        (r["_kafka_metadata"]["partition"], r["_kafka_metadata"]["offset"], r["_kafka_value"])
        for r in rows
    ]


def wait_rows(broker: Broker, n: int) -> list[Row]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = table_rows(broker)
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        broker.assert_alive()
        time.sleep(0.5)


def assert_table_equals(rows: list[Row], produced: list[Record]) -> None:
    """Each produced record once, by (partition, offset), with its value."""
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "duplicate (partition, offset) rows"
    expected = [(r.partition, r.offset, r.value.decode()) for r in produced if r.value]
    assert sorted(rows) == sorted(expected)


def driver_pid(broker: Broker) -> int:
    return int((broker.data_dir / "spark" / "driver.pid").read_text())


def test_a_killed_spark_driver_is_rebuilt_without_a_broker_restart(
    broker_factory: Callable[..., Broker],
) -> None:
    started = time.monotonic()
    b = broker_factory({"spark.sql.shuffle.partitions": "2"})
    assert b.proc is not None
    broker_pid = b.proc.pid
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
    produced = confluent_produce(b.bootstrap, TOPIC, records(0, N))
    assert_table_equals(wait_rows(b, N), produced)
    first = time.monotonic()

    dead = driver_pid(b)
    os.kill(dead, signal.SIGKILL)
    produced += confluent_produce(b.bootstrap, TOPIC, records(N, N))
    rows = wait_rows(b, 2 * N)
    caught_up = time.monotonic()
    time.sleep(2.5)  # two more intervals: nothing lands twice
    assert_table_equals(table_rows(b), produced)
    assert_table_equals(rows, produced)

    assert b.running and b.proc.pid == broker_pid and b.starts == 1, "the broker never restarted"
    log = b.stderr_text()
    assert re.search(rf"WARNING \S+ spark\.driver_lost pid={dead} reason=\S+", log), log[-3000:]
    assert log.count("spark.started ") == 2
    rebuilt = driver_pid(b)
    assert rebuilt != dead and os.path.exists(f"/proc/{rebuilt}")

    # a driver that dies and is not needed again must not stop the broker from stopping
    os.kill(rebuilt, signal.SIGKILL)
    b.stop()  # asserts exit code 0 within 30 s
    print(f"first rows {first - started:.1f}s, caught up {caught_up - first:.1f}s after the kill")


def test_a_broker_stopped_while_spark_starts_runs_no_round_after_the_stop(
    broker_factory: Callable[..., Broker],
) -> None:
    """SIGTERM while the first round waits for Spark to start: the round is cancelled
    when Spark is up, before its job, not run to its commit (a loaded machine took 30 s
    to stop: a cancel sent before the job existed was lost, and the whole round ran)."""
    broker = broker_factory()
    create_topic(
        broker.bootstrap,
        TOPIC,
        PARTITIONS,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "string",
        },
    )
    confluent_produce(broker.bootstrap, TOPIC, records(0, N))
    deadline = time.monotonic() + DEADLINE_S
    while "tabletopic.table_created" not in broker.stderr_text():  # Spark starts next
        broker.assert_alive()
        assert time.monotonic() < deadline, "no table created"
        time.sleep(0.01)
    assert "spark.started" not in broker.stderr_text()
    broker.stop()  # SIGTERM, exit code 0
    log = broker.stderr_text()
    assert "spark.started" in log  # the round waited for Spark, then was cancelled
    assert table_rows(broker) == []  # its job never ran, nothing was committed
    assert "tabletopic.round_cancelled" in log
