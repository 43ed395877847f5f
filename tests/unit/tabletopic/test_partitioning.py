"""``table.topic.partition.by``: the grammar refuses what is not a spec with one line
saying why, and a parsed spec binds to a table's schema as Iceberg's rules allow (the
column exists, is reached through structs, is of a type the transform takes)."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from floe.config.partition_by import PartitionTerm, parse_partition_by, render_partition_by
from floe.config.tabletopic import resolve_table_topic, validate_table_topic_configs
from floe.errors import ConfigError
from floe.tabletopic.partitioning import (
    PartitionSpecError,
    describe_spec,
    partition_spec,
)

SCHEMA = Schema(
    NestedField(1, "user_id", LongType()),
    NestedField(2, "name", StringType()),
    NestedField(3, "score", DoubleType()),
    NestedField(4, "tags", ListType(7, StructType(NestedField(8, "t", StringType())))),
    NestedField(
        5,
        "_kafka_metadata",
        StructType(
            NestedField(9, "partition", IntegerType()),
            NestedField(10, "timestamp", TimestamptzType()),
        ),
    ),
)


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("", None),
        ("  ", None),
        ("[]", ()),
        ("user_id", (PartitionTerm("identity", "user_id"),)),
        (
            "[bucket(user_id, 16), day(_kafka_metadata.timestamp)]",
            (
                PartitionTerm("bucket", "user_id", 16),
                PartitionTerm("day", "_kafka_metadata.timestamp"),
            ),
        ),
        ("[bucket(16, user_id)]", (PartitionTerm("bucket", "user_id", 16),)),  # Spark's order
        (
            "[HOURS(ts), truncate(name,4)]",
            (PartitionTerm("hour", "ts"), PartitionTerm("truncate", "name", 4)),
        ),
        ("[identity(a.b)]", (PartitionTerm("identity", "a.b"),)),
    ],
)
def test_specs_parse(text: str, terms: tuple[PartitionTerm, ...] | None) -> None:
    assert parse_partition_by(text) == terms
    assert parse_partition_by(render_partition_by(terms)) == terms


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[day(ts)", "unbalanced brackets"),
        ("[day(ts]", "'(' without its ')'"),
        ("[a,,b]", "empty term"),
        ("[week(ts)]", "unknown transform 'week'"),
        ("[bucket(user_id)]", "write bucket(column, N)"),
        ("[bucket(user_id, 0)]", "width from 1"),
        ("[day(ts, 3)]", "write day(column)"),
        ("[1abc]", "neither a column nor a transform"),
        ("[day(ts), hour(ts)]", "one time transform per column"),
        ("[a, identity(a)]", "one is enough"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_partition_by(text)
    assert reason in str(err.value)
    assert "\n" not in str(err.value)


def test_the_config_key_refuses_a_bad_spec_and_resolves_either_spelling() -> None:
    with pytest.raises(ConfigError, match=r"automq\.table\.topic\.partition\.by"):
        validate_table_topic_configs({"automq.table.topic.partition.by": "[week(ts)]"})
    cfg = resolve_table_topic({"automq.table.topic.partition.by": "[bucket(user_id, 4)]"})
    assert cfg.partition_by == (PartitionTerm("bucket", "user_id", 4),)
    assert resolve_table_topic({}).partition_by is None


def test_a_spec_binds_to_the_schema_with_iceberg_names() -> None:
    terms = parse_partition_by("[bucket(user_id, 16), day(_kafka_metadata.timestamp), name]")
    spec = partition_spec(SCHEMA, terms)
    assert [(f.source_id, str(f.transform), f.name) for f in spec.fields] == [
        (1, "bucket[16]", "user_id_bucket_16"),
        (10, "day", "_kafka_metadata_timestamp_day"),
        (2, "identity", "name"),
    ]
    assert describe_spec(spec, SCHEMA) == (
        "[bucket(user_id, 16), day(_kafka_metadata.timestamp), name]"
    )
    assert partition_spec(SCHEMA, None).is_unpartitioned()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[day(nope)]", "the table has no column 'nope'"),
        ("[_kafka_metadata.nope]", "_kafka_metadata has no column 'nope'"),
        ("[day(name)]", "day does not apply to name of type string"),
        ("[truncate(score, 2)]", "truncate does not apply to score of type double"),
        ("[_kafka_metadata]", "identity does not apply to _kafka_metadata"),
        ("[tags.t]", "tags is a list or map"),
        ("[name.x]", "name is string, not a struct"),
    ],
)
def test_a_spec_the_schema_cannot_take_is_refused(text: str, reason: str) -> None:
    with pytest.raises(PartitionSpecError) as err:
        partition_spec(SCHEMA, parse_partition_by(text))
    assert reason in str(err.value)
