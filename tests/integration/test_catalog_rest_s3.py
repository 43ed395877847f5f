"""Table topics on object storage through a real Iceberg REST catalog, end to end.

SeaweedFS (``helpers.seaweed``: ``weed mini`` on 127.0.0.1 free ports) serves both an S3
API and an Iceberg REST catalog; its table bucket ``warehouse`` is the catalog's
warehouse. A ``floe up`` broker is configured exactly as a user would (``catalog.type =
rest``, the catalog's OAuth2 credential in ``[catalog.properties]``, the object store in
``[catalog.s3]``), so its Spark pipeline writes the table topic's files to S3 through
Hadoop S3A and commits through the REST catalog. A real client (confluent-kafka)
produces to the table topic; once the table holds every record, three engines read the
same rows: the broker's own Spark SQL (the admin API's ``/sql``), pyiceberg (Floe's
catalog settings) and DuckDB (ATTACH of the REST catalog, S3 through httpfs). One
SeaweedFS and one broker (one Spark) for the module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from helpers.broker import Broker
from helpers.module_broker import module_broker
from helpers.records import Record
from helpers.seaweed import SeaweedServer, seaweed_server
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

TABLE_BUCKET = "warehouse"
TOPIC = "orders"
COUNTS = {0: 40, 1: 25}  # records per partition
DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedServer]:
    with seaweed_server() as server:
        tables = server.s3_client("s3tables")  # an S3 Tables bucket is one REST warehouse
        tables.create_table_bucket(name=TABLE_BUCKET)
        yield server


def floe_settings(s: SeaweedServer) -> dict[str, str]:
    """The catalog section of a ``floe.toml`` for SeaweedFS, as ``--set`` pairs."""
    return s.catalog_settings(TABLE_BUCKET)


@pytest.fixture(scope="module")
def settings(seaweed: SeaweedServer) -> cat.CatalogSettings:
    return cat.CatalogSettings.from_config(load_config(None, floe_settings(seaweed), environ={}))


@pytest.fixture(scope="module")
def produced(
    tmp_path_factory: pytest.TempPathFactory, seaweed: SeaweedServer
) -> Iterator[tuple[Broker, list[Record]]]:
    """A broker on the REST catalog, and the acknowledged records of its table topic."""
    data = tmp_path_factory.mktemp("rest-s3") / "data"
    with module_broker(data, floe_settings(seaweed)) as broker:
        yield broker, produce_string_table_topic(broker, TOPIC, COUNTS, "order")


@pytest.fixture(scope="module")
def table(settings: cat.CatalogSettings, produced: tuple[Broker, list[Record]]) -> tuple[str, str]:
    """The table topic's (namespace, table), once its table holds every record."""
    broker, acked = produced
    table = table_identifier("default", TOPIC)
    wait_for_rows(broker, settings, table, len(acked), DEADLINE_S)
    return table


def test_the_table_lives_in_the_table_bucket(
    settings: cat.CatalogSettings, table: tuple[str, str]
) -> None:
    t = cat.load_table(cat.load_catalog(settings), *table)
    assert t.metadata_location.startswith(f"s3://{TABLE_BUCKET}/")
    data_files = [task.file.file_path for task in t.scan().plan_files()]
    assert data_files and all(p.startswith(f"s3://{TABLE_BUCKET}/") for p in data_files)


def test_pyiceberg_reads_every_row(
    settings: cat.CatalogSettings, produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    assert pyiceberg_rows(settings, table) == acked_rows(produced[1])


def test_floe_spark_sql_reads_every_row(
    produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    broker, acked = produced
    assert spark_sql_rows(broker, table) == acked_rows(acked)


def test_duckdb_reads_every_row_through_the_rest_catalog(
    seaweed: SeaweedServer, produced: tuple[Broker, list[Record]], table: tuple[str, str]
) -> None:
    s = seaweed
    con = duckdb_connect()
    try:
        con.execute(
            "CREATE SECRET lake_s3 (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
            "URL_STYLE 'path', USE_SSL false)",
            [s.access_key, s.secret_key, s.region, s.s3_endpoint.removeprefix("http://")],
        )
        con.execute(
            "CREATE SECRET lake_rest (TYPE iceberg, CLIENT_ID ?, CLIENT_SECRET ?, "
            "OAUTH2_SERVER_URI ?)",
            [s.access_key, s.secret_key, f"{s.iceberg_uri}/v1/oauth/tokens"],
        )
        con.execute(
            f"ATTACH '{TABLE_BUCKET}' AS lake "
            f"(TYPE iceberg, ENDPOINT '{s.iceberg_uri}', SECRET lake_rest)"
        )
        rows = duckdb_rows(con, f'lake."{table[0]}"."{table[1]}"')
    finally:
        con.close()
    assert rows == acked_rows(produced[1])
