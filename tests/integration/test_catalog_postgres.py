"""Floe's non-default catalog setup: an Iceberg JDBC catalog on PostgreSQL.

A throwaway PostgreSQL 15 server (``helpers.postgres``), and a ``floe.toml`` whose
``[catalog]`` points at it exactly as a user would write it (``type = "jdbc"``,
``uri = "jdbc:postgresql://..."``, credentials as ``jdbc.user``/``jdbc.password`` in
``[catalog.properties]``, warehouse in a temp directory). Spark's confs and the
pyiceberg catalog are both derived by ``floe.tabletopic.catalog`` as ``floe up`` does.
Spark and pyiceberg then append to one table at the same time: no errors, no lost or
duplicated rows, every commit's snapshot property readable. One SparkSession for the
module.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from floe.config import BrokerConfig, load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.spark import SparkManager
from floe.tabletopic.spark.session import JDBC_JARS
from helpers.postgres import PostgresServer, postgres_server
from helpers.spark import SPARK_WARNING_FILTERS

pytestmark = SPARK_WARNING_FILTERS

NS = "floe_pg"
PG_JAR = JDBC_JARS[1]
ROUNDS = 6  # appends per engine in the concurrent test
ROWS = 50  # rows per append


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, pg: PostgresServer) -> BrokerConfig:
    root = tmp_path_factory.mktemp("pgcat")
    toml = root / "floe.toml"
    toml.write_text(
        f"""
[data]
dir = "{root / "data"}"

[catalog]
type = "jdbc"
uri = "{pg.jdbc_url}"
warehouse = "{root / "warehouse"}"

[catalog.properties]
"jdbc.user" = "{pg.user}"
"jdbc.password" = "{pg.password}"

[spark]
"sql.shuffle.partitions" = "2"
"""
    )
    return load_config(toml, environ={})


_opened: list[Any] = []
"""pyiceberg catalogs this module opened: each ``SqlCatalog`` holds a SQLAlchemy pool."""


def _load_catalog(settings: cat.CatalogSettings) -> Any:
    catalog = cat.load_catalog(settings)
    _opened.append(catalog)
    return catalog


@pytest.fixture(scope="module")
def settings(config: BrokerConfig) -> Iterator[cat.CatalogSettings]:
    yield cat.CatalogSettings.from_config(config)
    while _opened:  # close pooled connections before the server goes away
        _opened.pop().engine.dispose()


@pytest.fixture(scope="module")
def manager(config: BrokerConfig, settings: cat.CatalogSettings) -> Iterator[SparkManager]:
    if not PG_JAR.exists():
        pytest.fail(f"{PG_JAR} is missing: run `make test` (installs libpostgresql-jdbc-java)")
    _opened.append(cat.bootstrap(settings))  # pyiceberg creates the catalog tables
    _opened.append(cat.bootstrap(settings))  # idempotent
    assert _opened[-1] is not None
    m = SparkManager.from_config(config)
    try:
        yield m
    finally:
        m.stop_sync()


@pytest.fixture(scope="module")
def spark(manager: SparkManager) -> Any:
    session = asyncio.run(manager.get_session())
    print(f"\nspark start {manager.start_seconds:.1f}s")
    return session


def _table(settings: cat.CatalogSettings, name: str) -> str:
    return f"{settings.name}.{NS}.{name}"


def test_settings_point_both_engines_at_postgres(
    settings: cat.CatalogSettings, pg: PostgresServer, spark: Any
) -> None:
    assert settings.uri == pg.jdbc_url
    props = settings.pyiceberg_catalog_properties()
    assert props["type"] == "sql"
    assert props["uri"] == pg.sqlalchemy_url  # user and password from [catalog.properties]
    conf = spark.sparkContext.getConf()
    prefix = f"spark.sql.catalog.{settings.name}"
    assert conf.get(f"{prefix}.type") == "jdbc"
    assert conf.get(f"{prefix}.uri") == pg.jdbc_url
    assert conf.get(f"{prefix}.jdbc.user") == pg.user
    assert conf.get(f"{prefix}.jdbc.password") == pg.password
    assert conf.get(f"{prefix}.jdbc.init-catalog-tables") == "false"
    assert str(PG_JAR) in conf.get("spark.jars").split(",")
    assert conf.get("spark.sql.shuffle.partitions") == "2"


def test_spark_append_read_back_through_pyiceberg(
    spark: Any, settings: cat.CatalogSettings
) -> None:
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
    df.writeTo(t).option("snapshot-property.floe.commit-id", "c1").append()

    row = spark.sql(f"SELECT count(*) AS n, sum(id) AS s FROM {t}").collect()[0]
    assert (row["n"], row["s"]) == (100, sum(range(100)))

    catalog = _load_catalog(settings)
    assert (NS,) in catalog.list_namespaces()
    table = cat.load_table(catalog, NS, "clicks")
    assert table.metadata.format_version == 2
    arrow = table.scan().to_arrow()
    assert sorted(arrow.column("id").to_pylist()) == list(range(100))
    info = next(cat.snapshots(table))
    assert (info.summary["floe.commit-id"], info.operation) == ("c1", "append")


def test_concurrent_spark_and_pyiceberg_appends(spark: Any, settings: cat.CatalogSettings) -> None:
    """Both engines commit to one table at once; optimistic concurrency in the catalog
    (a conditional UPDATE of the metadata location) makes the loser retry."""
    t = _table(settings, "mixed")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {settings.name}.{NS}")
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, writer STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='20')"
    )
    from pyiceberg.exceptions import CommitFailedException

    start = threading.Barrier(2, timeout=60)
    warm = threading.Event()  # Spark's first write is slow: overlap the warm ones
    retries = {"pyiceberg": 0}

    def spark_writer() -> None:
        start.wait()
        for i in range(ROUNDS):
            lo = i * ROWS
            df = spark.sql(f"SELECT id, 'spark' AS writer FROM range({lo}, {lo + ROWS})")
            df.writeTo(t).option("snapshot-property.floe.commit-id", f"s{i}").append()
            warm.set()

    def pyiceberg_writer() -> None:
        table = cat.load_table(_load_catalog(settings), NS, "mixed")
        schema = pa.schema([("id", pa.int64()), ("writer", pa.string())])
        start.wait()
        assert warm.wait(60)
        for i in range(ROUNDS):
            lo = 100_000 + i * ROWS
            batch = pa.table(
                {"id": pa.array(range(lo, lo + ROWS), pa.int64()), "writer": ["pyiceberg"] * ROWS},
                schema=schema,
            )
            for _ in range(20):
                try:
                    table.append(batch, snapshot_properties={"floe.commit-id": f"p{i}"})
                    break
                except CommitFailedException:  # Spark committed in between: retry on top
                    retries["pyiceberg"] += 1
                    table.refresh()
            else:
                raise AssertionError(f"pyiceberg append p{i} kept conflicting")
            time.sleep(0.2)  # about Spark's pace, so the commits interleave

    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(spark_writer), pool.submit(pyiceberg_writer)]
        for f in futures:
            f.result()  # re-raises any writer's error
    elapsed = time.monotonic() - started

    spark_ids = {i * ROWS + j for i in range(ROUNDS) for j in range(ROWS)}
    py_ids = {100_000 + i * ROWS + j for i in range(ROUNDS) for j in range(ROWS)}
    total = 2 * ROUNDS * ROWS

    row = spark.sql(
        f"SELECT count(*) AS n, count(DISTINCT id) AS d, "
        f"sum(CAST(writer = 'spark' AS INT)) AS s FROM {t}"
    ).collect()[0]
    assert (row["n"], row["d"], row["s"]) == (total, total, ROUNDS * ROWS)

    table = cat.load_table(_load_catalog(settings), NS, "mixed")
    arrow = table.scan().to_arrow()
    ids = arrow.column("id").to_pylist()
    assert len(ids) == total  # no duplicates
    assert set(ids) == spark_ids | py_ids  # no lost rows

    infos = list(cat.snapshots(table))  # the current snapshot's ancestry
    order = " ".join(i.summary.get("floe.commit-id", "?") for i in reversed(infos))
    print(
        f"\n{2 * ROUNDS} appends {elapsed:.1f}s, pyiceberg retries {retries['pyiceberg']}: {order}"
    )
    assert len(infos) == 2 * ROUNDS
    assert all(i.operation == "append" for i in infos)
    assert sorted(i.summary["floe.commit-id"] for i in infos) == sorted(
        [f"s{i}" for i in range(ROUNDS)] + [f"p{i}" for i in range(ROUNDS)]
    )
    assert sum(int(i.summary["added-records"]) for i in infos) == total
    assert "floe.commit-id" in infos[0].summary  # newest first


def test_catalog_rows_live_in_postgres(pg: PostgresServer, settings: cat.CatalogSettings) -> None:
    """Both engines share the catalog's rows (keyed by the same catalog name)."""
    import sqlalchemy as sa

    engine = sa.create_engine(pg.sqlalchemy_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT table_name FROM iceberg_tables "
                    "WHERE catalog_name = :c AND table_namespace = :n ORDER BY table_name"
                ),
                {"c": settings.name, "n": NS},
            ).fetchall()
    finally:
        engine.dispose()
    assert [r[0] for r in rows] == ["clicks", "mixed"]


def test_warehouse_is_the_configured_directory(settings: cat.CatalogSettings) -> None:
    assert any(Path(settings.warehouse).rglob("*.metadata.json"))
