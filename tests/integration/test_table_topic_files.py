"""The data files a table topic's rounds write, as Iceberg engines rely on them.

The Spark tasks write an unpartitioned table's Parquet files themselves (pyarrow) and
the driver commits them; a table its user partitioned is written by Spark's Iceberg
writer. Either way every engine reads the same rows, and the files carry what engines
prune with: Iceberg field ids in the Parquet schema, and per-column value counts, null
counts and bounds in the manifests.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.transforms import IdentityTransform

from floe.tabletopic import catalog as cat
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts
from helpers.table_readers import (
    acked_rows,
    catalog_settings,
    duckdb_connect,
    duckdb_rows,
    produce_string_table_topic,
    pyiceberg_rows,
    spark_sql_rows,
    wait_for_table_rows,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::ResourceWarning")]

DEADLINE_S = 120.0


def more_records(topic_word: str, counts: dict[int, int], first: int) -> list[Record]:
    base = recent_ts()
    return [
        Record(f"k{p}-{i}".encode(), f"{topic_word} {p}-{i}".encode(), (), base + i, p)
        for p, n in counts.items()
        for i in range(first, first + n)
    ]


def test_round_files_carry_field_ids_and_column_metrics(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    settings = catalog_settings(broker)
    topic, table_id = "files_metrics", ("default", "files_metrics")
    acked = produce_string_table_topic(broker, topic, {0: 120, 1: 80}, "hello")
    wait_for_table_rows(broker, table_id, 200, DEADLINE_S)
    acked += confluent_produce(broker.bootstrap, topic, more_records("again", {0: 30, 1: 20}, 200))
    wait_for_table_rows(broker, table_id, 250, DEADLINE_S)

    table = cat.load_table(cat.load_catalog(settings), *table_id)
    schema = table.schema()
    offset_id = schema.find_field("_kafka_metadata.offset").field_id
    partition_id = schema.find_field("_kafka_metadata.partition").field_id
    value_id = schema.find_field("_kafka_value").field_id
    files = table.inspect.files().to_pylist()
    assert files and sum(f["record_count"] for f in files) == 250
    io = PyArrowFileIO(settings.fileio_properties())
    for f in files:
        assert f["file_format"] == "PARQUET"
        for metric in ("value_counts", "null_value_counts", "lower_bounds", "upper_bounds"):
            f[metric] = dict(f[metric])  # Arrow maps come as (key, value) lists
        # what engines prune with: counts, nulls and bounds of every column
        for column in (offset_id, partition_id, value_id):
            assert f["value_counts"][column] == f["record_count"]
            assert f["null_value_counts"][column] == 0
            assert column in f["lower_bounds"] and column in f["upper_bounds"]
        with io.new_input(f["file_path"]).open() as stream:
            parquet = pq.ParquetFile(stream)
            parquet_schema = parquet.schema_arrow
            assert parquet.metadata.created_by.startswith("parquet-cpp-arrow")  # the tasks
        assert parquet_schema.field("_kafka_value").metadata[b"PARQUET:field_id"] == (
            str(value_id).encode()
        )
        # the bounds are the file's: a partition's files do not overlap in offsets
        assert f["lower_bounds"][partition_id] == f["upper_bounds"][partition_id]

    want = acked_rows(acked)
    assert pyiceberg_rows(settings, table_id) == want
    assert spark_sql_rows(broker, table_id) == want
    source = f"iceberg_scan('{table.metadata_location}')"
    assert duckdb_rows(duckdb_connect(), source) == want


def test_a_table_its_user_partitioned_keeps_receiving_rounds(
    broker_factory: Callable[..., Broker],
) -> None:
    """Spark's Iceberg writer writes the rounds of a table partitioned after its
    creation (here by pyiceberg, as a user's engine would): new files are partitioned,
    every record lands once."""
    broker = broker_factory()
    settings = catalog_settings(broker)
    topic, table_id = "files_partitioned", ("default", "files_partitioned")
    acked = produce_string_table_topic(broker, topic, {0: 50, 1: 50}, "before")
    wait_for_table_rows(broker, table_id, 100, DEADLINE_S)
    table = cat.load_table(cat.load_catalog(settings), *table_id)
    with table.update_spec() as spec:
        spec.add_field("_kafka_metadata.partition", IdentityTransform(), "kafka_partition")

    acked += confluent_produce(broker.bootstrap, topic, more_records("after", {0: 40, 1: 30}, 50))
    wait_for_table_rows(broker, table_id, 170, DEADLINE_S)

    table = cat.load_table(cat.load_catalog(settings), *table_id)
    files = table.inspect.files().to_pylist()
    partitioned = [f for f in files if f["spec_id"] == table.spec().spec_id]
    assert sorted(f["partition"]["kafka_partition"] for f in partitioned) == [0, 1]
    assert sum(f["record_count"] for f in partitioned) == 70
    io = PyArrowFileIO(settings.fileio_properties())
    for f in partitioned:  # written by Spark's Iceberg writer (Java's parquet-mr)
        with io.new_input(f["file_path"]).open() as stream:
            assert pq.ParquetFile(stream).metadata.created_by.startswith("parquet-mr")
    want = acked_rows(acked)
    assert pyiceberg_rows(settings, table_id) == want
    assert spark_sql_rows(broker, table_id) == want
