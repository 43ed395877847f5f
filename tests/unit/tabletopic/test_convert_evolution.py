"""Schema evolution planning: each rule of issue 6 point 4, and incompatible changes."""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from floe.registry.core.avro import AvroSchema
from floe.tabletopic.convert import (
    AddColumn,
    EvolutionPlan,
    Incompatible,
    MakeOptional,
    RenameColumn,
    WidenType,
    plan_evolution,
    table_schema,
)
from floe.tabletopic.convert.avro import AvroCodec
from floe.tabletopic.convert.source import SourceType

KEY = StringType()


def source(*fields: dict[str, Any]) -> SourceType:
    schema = {"type": "record", "name": "R", "namespace": "n", "fields": list(fields)}
    return AvroCodec(AvroSchema(json.dumps(schema))).source


def f(name: str, t: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": t, **extra}


def plan(old: SourceType, new: SourceType, *, flatten: bool = True) -> EvolutionPlan | Incompatible:
    return plan_evolution(table_schema(old, KEY, flatten=flatten), new, KEY, flatten=flatten)


def test_same_schema_needs_nothing() -> None:
    s = source(f("a", "int"), f("b", {"type": "array", "items": "string"}))
    assert plan(s, s) == EvolutionPlan(())


def test_new_fields_top_level_and_nested_become_optional_columns() -> None:
    inner_v1 = {"type": "record", "name": "I", "fields": [f("x", "int")]}
    inner_v2 = {"type": "record", "name": "I", "fields": [f("x", "int"), f("y", "string")]}
    result = plan(
        source(f("a", "int"), f("i", inner_v1)),
        source(f("a", "int"), f("i", inner_v2), f("c", "long", doc="new")),
    )
    assert result == EvolutionPlan(
        (AddColumn(("i",), "y", StringType()), AddColumn((), "c", LongType(), "new"))
    )
    wrapped = plan(source(f("a", "int")), source(f("a", "int"), f("b", "int")), flatten=False)
    assert wrapped == EvolutionPlan((AddColumn(("_kafka_value",), "b", IntegerType()),))


def test_widening_rules() -> None:
    def dec(p: int, s: int) -> dict[str, Any]:
        return {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s}

    old = source(f("i", "int"), f("fl", "float"), f("d", dec(5, 2)))
    new = source(f("i", "long"), f("fl", "double"), f("d", dec(9, 2)))
    assert plan(old, new) == EvolutionPlan(
        (
            WidenType(("i",), LongType()),
            WidenType(("fl",), DoubleType()),
            WidenType(("d",), DecimalType(9, 2)),
        )
    )
    assert plan(new, old) == EvolutionPlan(())  # the table already holds the narrower types


def test_incompatible_changes_are_results_not_exceptions() -> None:
    result = plan(
        source(f("a", "string"), f("d", {"type": "bytes", "logicalType": "decimal",
                                         "precision": 5, "scale": 2})),
        source(f("a", "int"), f("d", {"type": "bytes", "logicalType": "decimal",
                                      "precision": 9, "scale": 3})),
    )  # fmt: skip
    assert isinstance(result, Incompatible)
    assert result.reasons == (
        "a: string cannot change to int",
        "d: decimal(5, 2) cannot change to decimal(9, 3)",
    )
    kinds = plan(source(f("a", "int")), source(f("a", {"type": "array", "items": "int"})))
    assert kinds == Incompatible(("a: int cannot change to a list",))


def test_rename_by_alias_keeps_the_field_id() -> None:
    result = plan(source(f("old", "int")), source(f("new", "long", aliases=["old"])))
    assert result == EvolutionPlan((RenameColumn(("old",), "new"), WidenType(("old",), LongType())))


def test_removed_fields_keep_their_column_and_required_becomes_optional() -> None:
    current = Schema(
        NestedField(1, "a", IntegerType(), required=True),
        NestedField(2, "gone", StringType(), required=True),
        NestedField(3, "s", StructType(NestedField(4, "x", IntegerType(), required=True)),
                    required=False),
        *table_schema(source(f("z", "int")), KEY, flatten=True).fields[1:],
    )  # fmt: skip
    inner = {"type": "record", "name": "S", "fields": [f("x", "int")]}
    result = plan_evolution(current, source(f("a", "int"), f("s", inner)), KEY, flatten=True)
    assert result == EvolutionPlan(
        (MakeOptional(("a",)), MakeOptional(("s", "x")), MakeOptional(("gone",)))
    )
