"""Upsert settings (``id.columns``, ``upsert.enable``, ``cdc.field``) and what the tasks
make of each record (:func:`floe.tabletopic.upsert.mark_rows`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, StructType

from floe.config import tabletopic as tt
from floe.errors import ConfigError
from floe.tabletopic.spark.files import FileTarget
from floe.tabletopic.spark.upsert import write_position_deletes
from floe.tabletopic.upsert import Upsert, UpsertSpecError, check_columns, mark_rows


def test_id_columns_parse_with_or_without_brackets() -> None:
    configs = {
        "automq.table.topic.id.columns": "region, user.id",
        "table.topic.upsert.enable": "true",
    }
    tt.validate_table_topic_configs(configs)
    cfg = tt.resolve_table_topic(configs)
    assert cfg.id_columns == ("region", "user.id") and cfg.upserts
    assert not tt.resolve_table_topic({"table.topic.id.columns": "[id]"}).upserts  # ids alone
    assert tt.resolve_table_topic({"table.topic.id.columns": "[]"}).id_columns == ()


@pytest.mark.parametrize(
    ("configs", "reason"),
    [
        ({"table.topic.upsert.enable": "true"}, "upserts need the columns identifying a row"),
        ({"table.topic.cdc.field": "op"}, "upserts need the columns identifying a row"),
        ({"table.topic.id.columns": "[a, a]"}, "column 'a' is listed twice"),
        ({"table.topic.id.columns": "[a, ]"}, "'' is not a column"),
        ({"table.topic.id.columns": "[a"}, "unbalanced brackets"),
        ({"table.topic.id.columns": "[_kafka_metadata.offset]"}, "cannot identify a row"),
        ({"table.topic.id.columns": "[id]", "table.topic.cdc.field": "o p"}, "not a column"),
    ],
)
def test_bad_upsert_settings_are_refused_in_one_line(configs: dict[str, str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as info:
        tt.validate_table_topic_configs(configs)
    assert "\n" not in str(info.value)


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "score", DoubleType(), required=False),
    NestedField(3, "user", StructType(NestedField(4, "name", StringType())), required=False),
    NestedField(5, "op", StringType(), required=False),
    NestedField(6, "n", LongType(), required=False),
)


@pytest.mark.parametrize(
    ("upsert", "reason"),
    [
        (Upsert(("nope",)), "id.columns 'nope': the table has no column 'nope'"),
        (Upsert(("score",)), "id.columns 'score' is double: an id column must be a primitive"),
        (Upsert(("user",)), "id.columns 'user' is struct"),
        (Upsert(("id",), "n"), "cdc.field 'n' is long, not a string"),
    ],
)
def test_id_columns_must_fit_the_table(upsert: Upsert, reason: str) -> None:
    with pytest.raises(UpsertSpecError, match=reason):
        check_columns(SCHEMA, upsert)
    check_columns(SCHEMA, Upsert(("id", "user.name"), "op"))


def batch(ids: list[int | None], ops: list[str | None]) -> pa.RecordBatch:
    meta = pa.array(
        [{"partition": 3, "offset": 10 + i} for i in range(len(ids))],
        pa.struct([("partition", pa.int32()), ("offset", pa.int64())]),
    )
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int64()), pa.array(ops, pa.string()), meta],
        names=["id", "op", "_kafka_metadata"],
    )


def test_a_d_in_the_cdc_field_or_a_tombstone_deletes_and_a_null_id_is_bad() -> None:
    rows = batch([1, 2, None, 4, 5, 6], ["I", "delete", "I", None, "u", "x"])
    marked, bad = mark_rows(rows, Upsert(("id",), "op"), tombstones=[15])
    assert marked.column("id").to_pylist() == [1, 2, 4, 5, 6]
    assert marked.column("_floe_delete").to_pylist() == [False, True, False, False, True]
    assert bad == [(3, 12, "id column id is null")]


def test_without_a_cdc_field_only_tombstones_delete() -> None:
    marked, bad = mark_rows(batch([1, 2], ["D", "D"]), Upsert(("id",)), tombstones=[11])
    assert marked.column("_floe_delete").to_pylist() == [False, True] and bad == []


def positions(pairs: list[tuple[str, int]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([f for f, _ in pairs]), pa.array([p for _, p in pairs], pa.int64())],
        names=["_file", "_pos"],
    )


def test_position_deletes_are_written_one_file_per_data_file(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    target = FileTarget(str(tmp_path), "zstd", None, 1 << 30, 1 << 20, {})
    set_id = "0" * 32
    # an empty shuffle partition: no file, no row, no error
    assert list(write_position_deletes(iter([]), target=target, set_id=set_id)) == []
    sorted_rows = [positions([("a.parquet", 1), ("a.parquet", 7)]), positions([("b.parquet", 3)])]
    [result] = write_position_deletes(iter(sorted_rows), target=target, set_id=set_id)
    rows = result.to_pylist()
    assert [(r["data_file"], r["rows"]) for r in rows] == [("a.parquet", 2), ("b.parquet", 1)]
    first = pq.read_table(rows[0]["path"])
    assert first.to_pydict() == {"file_path": ["a.parquet", "a.parquet"], "pos": [1, 7]}
    ids = [f.metadata[b"PARQUET:field_id"] for f in first.schema]
    assert ids == [b"2147483546", b"2147483545"]  # Iceberg's reserved position delete ids
