"""Table topics on a Hive Metastore catalog, end to end.

A Hive Metastore 2.3.9 from PySpark's own jars (``helpers.hive``) binds every interface,
so the whole module runs in a private network namespace that has only loopback: the
metastore, a ``floe up`` broker (and its Spark JVM) and the test's own clients. The
broker is configured as a user would (``catalog.type = hive``, a thrift URI, a local
warehouse, ``hive.hive2-compatible`` for pyiceberg); a real client (confluent-kafka)
produces to a table topic; once the table holds every record, the broker's Spark SQL
(the admin API's ``/sql``), pyiceberg (Floe's catalog settings) and DuckDB
(``iceberg_scan`` of the metadata file the metastore points at) read the same rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from helpers.broker import Broker
from helpers.hive import HiveMetastore, hive_metastore, private_network
from helpers.module_broker import module_broker
from helpers.records import Record
from helpers.table_readers import (
    acked_rows,
    duckdb_connect,
    duckdb_rows,
    produce_string_table_topic,
    pyiceberg_rows,
    spark_sql_rows,
    wait_for_rows,
)

pytestmark = pytest.mark.timeout(300)

TOPIC = "payments"
COUNTS = {0: 30, 1: 35}  # records per partition
DEADLINE_S = 120.0
THREADS = 8
CALLS_PER_THREAD = 25
HUNG_S = 60.0
"""A thread still in a catalog call after this long is taken as hung (the calls take
milliseconds)."""


@pytest.fixture(scope="module")
def metastore() -> Iterator[HiveMetastore]:
    with private_network(), hive_metastore() as server:
        yield server


def floe_settings(metastore: HiveMetastore, warehouse: Path) -> dict[str, str]:
    """The catalog section of a ``floe.toml`` for the metastore, as ``--set`` pairs."""
    return {
        "catalog.type": "hive",
        "catalog.uri": metastore.uri,
        "catalog.warehouse": str(warehouse),
        "catalog.pyiceberg.hive.hive2-compatible": "true",
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hive")


@pytest.fixture(scope="module")
def settings(metastore: HiveMetastore, root: Path) -> cat.CatalogSettings:
    config = load_config(None, floe_settings(metastore, root / "warehouse"), environ={})
    return cat.CatalogSettings.from_config(config)


@pytest.fixture(scope="module")
def produced(metastore: HiveMetastore, root: Path) -> Iterator[tuple[Broker, list[Record]]]:
    """A broker on the Hive catalog, and the acknowledged records of its table topic."""
    with module_broker(root / "data", floe_settings(metastore, root / "warehouse")) as broker:
        yield broker, produce_string_table_topic(broker, TOPIC, COUNTS, "payment")


@pytest.fixture(scope="module")
def table(settings: cat.CatalogSettings, produced: tuple[Broker, list[Record]]) -> tuple[str, str]:
    """The table topic's (namespace, table), once its table holds every record."""
    broker, acked = produced
    table = table_identifier("default", TOPIC)
    wait_for_rows(broker, settings, table, len(acked), DEADLINE_S)
    return table


def test_the_metastore_points_at_the_table(
    settings: cat.CatalogSettings, table: tuple[str, str]
) -> None:
    t = cat.load_table(cat.load_catalog(settings), *table)
    assert t.properties.get("write.format.default", "parquet") == "parquet"
    assert Path(t.metadata_location.removeprefix("file:")).is_file()


def test_pyiceberg_reads_every_row(
    settings: cat.CatalogSettings, produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    assert pyiceberg_rows(settings, table) == acked_rows(produced[1])


def test_floe_spark_sql_reads_every_row(
    produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    broker, acked = produced
    assert spark_sql_rows(broker, table) == acked_rows(acked)


def test_duckdb_reads_every_row_from_the_metadata_file(
    settings: cat.CatalogSettings, produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    location = cat.load_table(cat.load_catalog(settings), *table).metadata_location
    con = duckdb_connect()
    try:
        rows = duckdb_rows(con, "iceberg_scan(?)", location.removeprefix("file:"))
    finally:
        con.close()
    assert rows == acked_rows(produced[1])


def test_the_shared_catalog_serves_many_threads_at_once(
    settings: cat.CatalogSettings, table: tuple[str, str]
) -> None:
    """The broker's one catalog client is used from several threads at a time (a
    table topic's rounds and its maintenance schedule, the admin API, the metrics):
    every call must get its own answer, none may hang or fail."""
    shared = cat.SharedCatalog(settings)
    expected = cat.load_table(cat.load_catalog(settings), *table).metadata_location
    answers: list[str] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            for _ in range(CALLS_PER_THREAD):
                answers.append(cat.load_table(shared(), *table).metadata_location)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(THREADS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + HUNG_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    assert (hung, errors) == (0, []), f"{hung} threads hung; errors: {errors[:3]}"
    assert answers == [expected] * THREADS * CALLS_PER_THREAD
