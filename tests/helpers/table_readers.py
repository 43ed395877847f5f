"""Reading a table topic's table back through each engine, for the catalog end-to-end
tests: rows as ``(partition, offset, value)`` so that every engine's answer compares
with the records a producer had acknowledged."""

from __future__ import annotations

import importlib.resources
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import duckdb
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts

Row = tuple[int, int, str]
COLUMNS = "_kafka_metadata.partition, _kafka_metadata.offset, _kafka_value"
"""The row of a string-mode table topic, as SQL."""


def acked_rows(acked: list[Record]) -> list[Row]:
    """(partition, offset, value) of every acknowledged record, sorted."""
    rows = []
    for r in acked:
        assert r.partition is not None and r.offset is not None and r.value is not None
        rows.append((r.partition, r.offset, r.value.decode()))
    return sorted(rows)


def produce_string_table_topic(
    broker: Broker, topic: str, counts: dict[int, int], word: str
) -> list[Record]:
    """Create ``topic`` as a string-mode table topic (1 s commits) with one partition per
    entry of ``counts``, produce ``counts[p]`` records ``"<word> p-i"`` to partition
    ``p``, and return them as acknowledged."""
    create_topic(
        broker.bootstrap,
        topic,
        len(counts),
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "string",
        },
    )
    base = recent_ts()
    records = [
        Record(f"k{p}-{i}".encode(), f"{word} {p}-{i}".encode(), (), base + i, p)
        for p, n in counts.items()
        for i in range(n)
    ]
    return confluent_produce(broker.bootstrap, topic, records)


def wait_for_rows(
    broker: Broker, settings: cat.CatalogSettings, table: tuple[str, str], n: int, deadline_s: float
) -> None:
    """Poll the table's current snapshot through pyiceberg until it counts ``n`` rows.

    Raises:
        AssertionError: the deadline passed, or the broker died.
    """
    catalog = cat.load_catalog(settings)
    deadline = time.monotonic() + deadline_s
    rows = 0
    while rows < n:
        broker.assert_alive()
        assert time.monotonic() < deadline, (
            f"{rows} of {n} rows in the table after {deadline_s} s; the broker's "
            "table-topic log:\n" + pipeline_log(broker)
        )
        try:
            snapshot = cat.load_table(catalog, *table).current_snapshot()
        except (NoSuchNamespaceError, NoSuchTableError):  # not created yet
            snapshot = None
        if snapshot is not None and snapshot.summary is not None:
            rows = int(snapshot.summary.additional_properties.get("total-records", "0"))
        time.sleep(0.5)


def pipeline_log(broker: Broker, lines: int = 30) -> str:
    """The last ``lines`` lines of ``broker``'s log about its table topics and Spark."""
    found = [
        line
        for line in broker.stderr_text().splitlines()
        if "tabletopic" in line or "spark" in line or "Traceback" in line or "ERROR" in line
    ]
    return "\n".join(found[-lines:])


def catalog_settings(broker: Broker) -> cat.CatalogSettings:
    """The catalog a broker on embedded defaults writes its tables to."""
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    return cat.CatalogSettings.from_config(config)


def wait_for_table_rows(broker: Broker, table: tuple[str, str], n: int, deadline_s: float) -> None:
    """:func:`wait_for_rows` on the broker's embedded catalog, which appears with the
    first round."""
    settings = catalog_settings(broker)
    deadline = time.monotonic() + deadline_s
    while not settings.sqlite_path or not settings.sqlite_path.exists():
        broker.assert_alive()
        assert time.monotonic() < deadline, "no catalog"
        time.sleep(0.5)
    wait_for_rows(broker, settings, table, n, max(1.0, deadline - time.monotonic()))


def pyiceberg_rows(settings: cat.CatalogSettings, table: tuple[str, str]) -> list[Row]:
    arrow = cat.load_table(cat.load_catalog(settings), *table).scan().to_arrow()
    meta = arrow.column("_kafka_metadata").to_pylist()
    values = arrow.column("_kafka_value").to_pylist()
    return sorted((m["partition"], m["offset"], v) for m, v in zip(meta, values, strict=True))


def spark_sql_rows(broker: Broker, table: tuple[str, str]) -> list[Row]:
    """The rows as the broker's own Spark reads them (the admin API's ``POST /sql``)."""
    statement = f"SELECT {COLUMNS} FROM floe.{table[0]}.{table[1]}"
    return sorted((p, o, v) for p, o, v in admin_sql(broker, statement))


def table_status(broker: Broker, topic: str) -> dict[str, Any]:
    """The admin API's status document of a table topic."""
    with urllib.request.urlopen(f"{broker.admin_url}/api/v1/tables/{topic}", timeout=30) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


def admin_sql(broker: Broker, statement: str, fresh: bool = False) -> list[list[Any]]:
    """The rows of ``statement`` run by the broker's Spark (the admin API's ``/sql``;
    ``fresh``: with the table topics' records not committed yet)."""
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1/sql",
        data=json.dumps({"statement": statement, "limit": 10_000, "fresh": fresh}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        answer = json.loads(resp.read())
    assert answer["truncated"] is False
    rows: list[list[Any]] = answer["rows"]
    return rows


def duckdb_connect() -> duckdb.DuckDBPyConnection:
    """DuckDB with its httpfs, avro and iceberg extensions loaded from their wheels
    (offline: nothing is installed or auto-loaded)."""
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for ext in ("httpfs", "avro", "iceberg"):
        pkg = importlib.resources.files(f"duckdb_extension_{ext}")
        path = next(Path(str(pkg)).rglob(f"{ext}.duckdb_extension"))
        con.execute(f"LOAD '{path}'")
    return con


def duckdb_rows(con: duckdb.DuckDBPyConnection, source: str, *params: Any) -> list[Row]:
    """The rows of ``source`` (a table name or an ``iceberg_scan(...)`` call)."""
    rows: list[Row] = con.execute(f"SELECT {COLUMNS} FROM {source}", list(params)).fetchall()
    return sorted(rows)
