"""``flatten_debezium`` and ``[_from_debezium_key_]`` settings: the config checks, the
``_cdc.op`` CDC default, the round's key-column resolution and what the tasks make of
Debezium deletes and tombstones (:func:`floe.tabletopic.upsert.mark_rows`)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, StructType

from floe.config import tabletopic as tt
from floe.config.id_columns import FROM_DEBEZIUM_KEY
from floe.errors import ConfigError
from floe.registry.core.model import SchemaType
from floe.tabletopic.convert import ConvertType
from floe.tabletopic.convert.debezium import CDC_COLUMN
from floe.tabletopic.schemas import PartPlan, RawSchema, RegistrySnapshot
from floe.tabletopic.upsert import (
    Upsert,
    UpsertSpecError,
    check_columns,
    debezium_key_columns,
    mark_rows,
)

DEBEZIUM = {
    "table.topic.convert.value.type": "by_schema_id",
    "automq.table.topic.transform.value.type": "flatten_debezium",
}


def test_flatten_debezium_is_a_transform_under_both_spellings() -> None:
    tt.validate_table_topic_configs(DEBEZIUM)
    cfg = tt.resolve_table_topic(DEBEZIUM)
    assert cfg.transform_value_type == "flatten_debezium" and cfg.debezium and cfg.flattens
    assert not cfg.upserts and cfg.cdc_field == ""  # no id columns: append-only
    plain = tt.resolve_table_topic({"table.topic.transform.value.type": "flatten"})
    assert plain.flattens and not plain.debezium


def test_a_debezium_table_with_id_columns_applies_the_changes_by_cdc_op() -> None:
    configs = {**DEBEZIUM, "table.topic.id.columns": "[id]"}
    tt.validate_table_topic_configs(configs)
    cfg = tt.resolve_table_topic(configs)
    assert cfg.upserts and cfg.cdc_field == f"{CDC_COLUMN}.op" == tt.DEBEZIUM_CDC_FIELD
    mine = tt.resolve_table_topic({**configs, "table.topic.cdc.field": "kind"})
    assert mine.cdc_field == "kind"  # a field set is kept


@pytest.mark.parametrize(
    ("configs", "reason"),
    [
        (
            {"table.topic.transform.value.type": "flatten_debezium"},
            "table.topic.transform.value.type: 'flatten_debezium' needs a schema: set "
            "table.topic.convert.value.type to by_schema_id or by_latest_schema (it is 'raw')",
        ),
        (
            {**DEBEZIUM, "table.topic.id.columns": "[_from_debezium_key_]"},
            "table.topic.id.columns: [_from_debezium_key_] takes the columns from the key's "
            "record schema: set table.topic.convert.key.type to by_schema_id or "
            "by_latest_schema (it is 'string')",
        ),
        (
            {
                "table.topic.convert.value.type": "by_schema_id",
                "table.topic.convert.key.type": "by_schema_id",
                "table.topic.id.columns": "[_from_debezium_key_]",
            },
            "table.topic.id.columns: [_from_debezium_key_] names value columns: set "
            "table.topic.transform.value.type to flatten_debezium or flatten (it is 'none')",
        ),
        (
            {**DEBEZIUM, "table.topic.id.columns": "[_from_debezium_key_, id]"},
            "_from_debezium_key_ stands alone",
        ),
        (
            {"table.topic.transform.value.type": "debezium"},
            "'debezium' is not one of none, flatten, flatten_debezium",
        ),
    ],
)
def test_bad_debezium_settings_are_refused_in_one_line(
    configs: dict[str, str], reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        tt.validate_table_topic_configs(configs)
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_from_debezium_key_with_a_schema_key() -> None:
    for mode in ("by_schema_id", "by_latest_schema"):
        configs = {
            **DEBEZIUM,
            "table.topic.convert.key.type": mode,
            "table.topic.id.columns": "[_from_debezium_key_]",
        }
        tt.validate_table_topic_configs(configs)
        cfg = tt.resolve_table_topic(configs)
        assert cfg.id_columns == (FROM_DEBEZIUM_KEY,) and cfg.upserts


KEY_TYPE = StructType(
    NestedField(20, "id", IntegerType(), required=False),
    NestedField(21, "region", StringType(), required=False),
)
TABLE = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "name", StringType(), required=False),
    NestedField(4, "_cdc", StructType(NestedField(5, "op", StringType())), required=False),
    NestedField(6, "_kafka_key", KEY_TYPE, required=False),
)


def avro_record(*fields: tuple[str, str]) -> str:
    items = [{"name": n, "type": t} for n, t in fields]
    return json.dumps({"type": "record", "name": "Key", "fields": items})


def registry(*texts: str) -> RegistrySnapshot:
    schemas = {i: RawSchema(i, SchemaType.AVRO, t) for i, t in enumerate(texts, start=1)}
    return RegistrySnapshot(schemas, {"t-key": tuple(schemas)}, len(texts) + 1)


def key_plan(*covered: int, latest: int | None = None) -> PartPlan:
    if latest is not None:
        return PartPlan("key", ConvertType.BY_LATEST_SCHEMA, latest=latest)
    return PartPlan("key", ConvertType.BY_SCHEMA_ID, covered=frozenset(covered))


def test_from_debezium_key_is_the_newest_key_schema_s_fields() -> None:
    snap = registry(avro_record(("id", "int")), avro_record(("id", "int"), ("region", "string")))
    assert debezium_key_columns(TABLE, key_plan(1), snap) == ("id",)
    assert debezium_key_columns(TABLE, key_plan(1, 2), snap) == ("id", "region")
    assert debezium_key_columns(TABLE, key_plan(latest=1), snap) == ("id",)
    # the subject's newest version, not the highest id: its v1 is id 2, its v2 id 1
    # (that text was registered earlier under another subject)
    assert debezium_key_columns(TABLE, key_plan(1, 2), snap, (2, 1)) == ("id",)
    upsert = Upsert(("id", "region"), "_cdc.op", from_key=True)
    check_columns(TABLE, upsert)  # int key field into a long id column: it fits


@pytest.mark.parametrize(
    ("snap", "plan", "reason"),
    [
        (registry('"string"'), key_plan(1), "key schema id 1 is not a record"),
        (
            registry(avro_record(("id", "int"), ("tenant", "string"))),
            key_plan(1),
            "key schema id 1 field 'tenant' is not a column of the table",
        ),
        (registry(), key_plan(), "no key schema the table holds is registered yet"),
        (registry(), PartPlan("key", ConvertType.STRING), "the key is string"),
    ],
)
def test_a_key_that_names_no_columns_fails_the_round(
    snap: RegistrySnapshot, plan: PartPlan, reason: str
) -> None:
    with pytest.raises(UpsertSpecError) as info:
        debezium_key_columns(TABLE, plan, snap)
    assert str(info.value).startswith("id.columns [_from_debezium_key_]: ")
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_a_key_field_of_another_type_than_its_column_is_refused() -> None:
    table = Schema(
        NestedField(1, "id", StringType(), required=False),
        NestedField(6, "_kafka_key", KEY_TYPE, required=False),
    )
    with pytest.raises(UpsertSpecError, match="the key's id \\(int\\) does not fit it"):
        check_columns(table, Upsert(("id",), from_key=True))


def rows(ids: list[int | None], ops: list[str | None], keys: list[int | None]) -> pa.RecordBatch:
    n = len(ids)
    key_type = pa.struct([("id", pa.int32()), ("region", pa.string())])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array(
                [None if o is None else {"op": o} for o in ops], pa.struct([("op", pa.string())])
            ),
            pa.array([None if k is None else {"id": k, "region": "eu"} for k in keys], key_type),
            pa.array(
                [{"partition": 0, "offset": 10 + i} for i in range(n)],
                pa.struct([("partition", pa.int32()), ("offset", pa.int64())]),
            ),
        ],
        names=["id", "_cdc", "_kafka_key", "_kafka_metadata"],
    )


def test_debezium_deletes_and_tombstones_delete_by_the_key() -> None:
    batch = rows(
        ids=[1, 2, 2, None, 3, None],
        ops=["c", "u", "d", None, "r", None],
        keys=[1, 2, 2, 2, 3, None],
    )
    upsert = Upsert(("id",), "_cdc.op", from_key=True)
    marked, bad = mark_rows(batch, upsert, tombstones=[13, 15])
    assert marked.column("id").to_pylist() == [1, 2, 2, 2, 3]  # the tombstone's id: its key
    assert marked.column("_floe_delete").to_pylist() == [False, False, True, True, False]
    assert bad == [(0, 15, "id column id is null")]  # a tombstone without a key
    # without from_key a tombstone's null id is a bad record, as before
    _, bad = mark_rows(batch, Upsert(("id",), "_cdc.op"), tombstones=[13])
    assert [offset for _, offset, _ in bad] == [13, 15]
