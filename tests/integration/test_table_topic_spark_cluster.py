"""A table topic materializes through a Spark standalone cluster: ``floe up`` with
``spark.master = spark://...`` (a master and a worker from the pyspark wheel), so each
round's tasks run in executor processes that share nothing with the broker but its
advertised Kafka listener, and fetch their records from it.

Records produced with a real client (two bursts, plus an aborted transaction whose
records must not land) are in the Iceberg table exactly once: the count and the
distinct (partition, offset) pairs match what the producer had acknowledged, read back
through pyiceberg, through Spark SQL on the cluster (the admin API's SQL endpoint) and
through DuckDB. The master's own account shows the application ran on its executors.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts
from helpers.spark_cluster import SparkCluster
from helpers.table_readers import (
    acked_rows,
    duckdb_connect,
    duckdb_rows,
    pyiceberg_rows,
    spark_sql_rows,
    wait_for_rows,
)
from helpers.txn import txn_producer

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::ResourceWarning")]

TOPIC = "clicks_cluster"
TABLE = ("default", TOPIC)
PARTITIONS = 3
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    made = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield made.start()
    finally:
        made.stop()


def records(first: int, n: int) -> list[Record]:
    base = recent_ts()
    return [
        Record(f"k{i}".encode(), f"v{i}".encode(), (), base + i, i % PARTITIONS)
        for i in range(first, first + n)
    ]


def aborted_transaction(bootstrap: str) -> None:
    """A record per partition in a transaction that aborts: it must never land."""
    producer = txn_producer(bootstrap, "cluster-aborted")
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(TOPIC, b"never", partition=p)
    producer.flush(30)
    producer.abort_transaction(30)


def test_a_table_topic_materializes_exactly_once_on_a_standalone_cluster(
    cluster: SparkCluster, broker_factory: Callable[..., Broker]
) -> None:
    broker = broker_factory({**cluster.app_confs(), "spark.sql.shuffle.partitions": "2"})
    settings = cat.CatalogSettings.from_config(
        load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    )
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
    acked = confluent_produce(broker.bootstrap, TOPIC, records(0, 600))
    aborted_transaction(broker.bootstrap)
    acked += confluent_produce(broker.bootstrap, TOPIC, records(600, 400))
    want = acked_rows(acked)

    deadline = time.monotonic() + DEADLINE_S
    while "catalog.ready" not in broker.stderr_text():  # the broker creates the catalog
        assert time.monotonic() < deadline, "the broker did not prepare its catalog"
        time.sleep(0.2)
    wait_for_rows(broker, settings, TABLE, len(want), DEADLINE_S)
    time.sleep(2.5)  # two more rounds: nothing lands twice, nothing aborted lands
    rows = pyiceberg_rows(settings, TABLE)
    assert len({(p, o) for p, o, _ in rows}) == len(rows) == len(want)
    assert rows == want

    assert spark_sql_rows(broker, TABLE) == want
    location = cat.load_table(cat.load_catalog(settings), *TABLE).metadata_location
    assert duckdb_rows(duckdb_connect(), "iceberg_scan(?)", location) == want

    apps = cluster.state()["activeapps"]
    assert [a["name"] for a in apps] == ["floe"], apps
    assert apps[0]["cores"] > 0, "the rounds ran on the cluster's executors"
