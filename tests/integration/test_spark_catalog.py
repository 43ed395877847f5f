"""Spark, pyiceberg and DuckDB share Floe's embedded Iceberg catalog (JDBC on SQLite).

One SparkSession for the module (starting one costs ~5 s). Proves the foundation of
table topics: the catalog settings Floe derives from its config work in both engines,
snapshot-summary properties written by Spark are read back by our catalog helpers,
and Python workers (``mapInArrow``) run in Floe's venv.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from floe.config import BrokerConfig, load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.spark import SparkManager
from helpers.spark import SPARK_WARNING_FILTERS

pytestmark = SPARK_WARNING_FILTERS

NS = "floe_it"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> BrokerConfig:
    data = tmp_path_factory.mktemp("spark") / "data"
    return load_config(
        None,
        {"data.dir": str(data), "spark.sql.shuffle.partitions": "2"},
        environ={},
    )


@pytest.fixture(scope="module")
def settings(config: BrokerConfig) -> cat.CatalogSettings:
    return cat.CatalogSettings.from_config(config)


@pytest.fixture(scope="module")
def manager(config: BrokerConfig, settings: cat.CatalogSettings) -> Iterator[SparkManager]:
    cat.bootstrap(settings)
    cat.bootstrap(settings)  # idempotent
    m = SparkManager.from_config(config)
    try:
        yield m
    finally:
        m.stop_sync()


@pytest.fixture(scope="module")
def spark(manager: SparkManager) -> Any:
    session = asyncio.run(manager.get_session())  # started in a worker thread
    print(f"\nspark start {manager.start_seconds:.1f}s")
    return session


def _table(settings: cat.CatalogSettings, name: str) -> str:
    return f"{settings.name}.{NS}.{name}"


def test_session_settings(spark: Any, manager: SparkManager, config: BrokerConfig) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.driver.memory") == "1g"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.sql.shuffle.partitions") == "2"  # [spark] passthrough
    assert conf.get("spark.sql.catalog.floe.jdbc.init-catalog-tables") == "false"
    assert conf.get("spark.sql.catalog.floe.cache-enabled") == "false"
    assert Path(conf.get("spark.local.dir")).is_relative_to(Path(config.values["data.dir"]))
    assert (manager.settings.work_dir / "log4j2.properties").exists()
    assert asyncio.run(manager.get_session()) is spark  # one session per process


def test_append_read_back_through_three_engines(spark: Any, settings: cat.CatalogSettings) -> None:
    t = _table(settings, "clicks")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.name}.{NS}")
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, page STRING, ts TIMESTAMP) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    df = spark.sql(
        "SELECT id, concat('/p', CAST(id AS STRING)) AS page, "
        "timestamp_seconds(1700000000 + id) AS ts FROM range(100)"
    )
    started = time.monotonic()
    df.writeTo(t).option("snapshot-property.floe.commit-id", "c1").append()
    print(f"\nfirst append {time.monotonic() - started:.1f}s")

    # Spark SQL
    row = spark.sql(f"SELECT count(*) AS n, sum(id) AS s FROM {t}").collect()[0]
    assert (row["n"], row["s"]) == (100, sum(range(100)))

    # pyiceberg, through the same catalog settings
    catalog = cat.load_catalog(settings)
    table = cat.load_table(catalog, NS, "clicks")
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == 100
    assert sorted(arrow.column("id").to_pylist()) == list(range(100))
    assert arrow.schema.field("ts").type == pa.timestamp("us", tz="UTC")  # timestamptz
    assert table.metadata.format_version == 2

    # snapshot summary, as our helper reads it
    info = next(cat.snapshots(table))
    assert info.summary["floe.commit-id"] == "c1"
    assert info.operation == "append"
    assert [s.snapshot_id for s in cat.snapshots(table)] == [info.snapshot_id]

    # DuckDB, on the metadata file, extensions loaded from the wheels (offline)
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for ext in ("avro", "iceberg"):
        pkg = importlib.resources.files(f"duckdb_extension_{ext}")
        path = next(Path(str(pkg)).rglob(f"{ext}.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    n, s = con.execute(
        "SELECT count(*), sum(id) FROM iceberg_scan(?)", [table.metadata_location]
    ).fetchone()
    assert (n, s) == (100, sum(range(100)))


def test_second_commit_walks_back(spark: Any, settings: cat.CatalogSettings) -> None:
    t = _table(settings, "walk")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.name}.{NS}")
    spark.sql(f"CREATE TABLE {t} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    spark.range(3).writeTo(t).option("snapshot-property.floe.commit-id", "a").append()
    spark.sql(f"DELETE FROM {t} WHERE id = 0")  # another writer: no Floe property
    table = cat.load_table(cat.load_catalog(settings), NS, "walk")
    infos = list(cat.snapshots(table))
    assert len(infos) == 2
    assert "floe.commit-id" not in infos[0].summary
    assert infos[1].summary["floe.commit-id"] == "a"
    assert [i.parent_id for i in infos] == [infos[1].snapshot_id, None]  # newest first


def test_map_in_arrow_appends_in_one_commit(spark: Any, settings: cat.CatalogSettings) -> None:
    t = _table(settings, "generated")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.name}.{NS}")
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, source STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )

    def generate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A Python worker: each task row (task, n) becomes n generated rows. Defined
        here so cloudpickle ships it by value (workers cannot import test modules)."""
        for batch in batches:
            tasks, counts = batch.column("task").to_pylist(), batch.column("n").to_pylist()
            for task, n in zip(tasks, counts, strict=True):
                ids = pa.array(range(task * 1000, task * 1000 + n), pa.int64())
                yield pa.record_batch(
                    [ids, pa.array([f"task-{task}"] * n, pa.string())], names=["id", "source"]
                )

    tasks = spark.createDataFrame([(i, 500) for i in range(4)], "task INT, n INT").repartition(2)
    out = tasks.mapInArrow(generate, "id BIGINT, source STRING")
    out.writeTo(t).option("snapshot-property.floe.commit-id", "gen-1").append()

    table = cat.load_table(cat.load_catalog(settings), NS, "generated")
    infos = list(cat.snapshots(table))
    assert len(infos) == 1  # one Iceberg commit
    assert infos[0].summary["floe.commit-id"] == "gen-1"
    assert infos[0].summary["added-records"] == "2000"
    row = spark.sql(f"SELECT count(*) AS n, count(DISTINCT source) AS s FROM {t}").collect()[0]
    assert (row["n"], row["s"]) == (2000, 4)
