"""Schema evolution planning: current table schema + new source schema -> updates.

The plan is data (like a pyiceberg commit): a list of updates the pipeline applies in
one ``update_schema`` transaction (Spark ``ALTER TABLE`` or pyiceberg), or a typed
:class:`Incompatible` result that the topic's error tolerance handles. Rules (issue 6,
point 4): a new field, top-level or nested, becomes an optional column; int->long,
float->double and decimal precision widening (same scale) are applied; a required
column becomes optional; a field renamed with an Avro alias renames its column (the
field id, hence the data, stays); a field removed from the source keeps its column.
A narrower source type than the column's (long column, int field) needs no update.

Invariants: planning is pure and deterministic; every path names fields as they are
in the *current* schema (before any update of the plan), which is how pyiceberg's and
Iceberg's ``UpdateSchema`` resolve names within one transaction; list elements and map
keys/values are addressed as ``element``, ``key`` and ``value``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)

from floe.tabletopic.convert.debezium import CDC_COLUMN
from floe.tabletopic.convert.layout import (
    KEY_COLUMN,
    VALUE_COLUMN,
    FieldIds,
    iceberg_type,
    layout_fields,
)
from floe.tabletopic.convert.source import (
    SourceList,
    SourceMap,
    SourceStruct,
    SourceType,
)

Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AddColumn:
    """Add optional column ``name`` under ``parent`` (``()`` for top level); a top-level
    column goes before ``before`` (None: before ``_kafka_key``, the first Kafka column)."""

    parent: Path
    name: str
    type: IcebergType
    doc: str | None = None
    before: str | None = None


@dataclass(frozen=True, slots=True)
class WidenType:
    """Promote a primitive column to a wider type (int->long, float->double, decimal)."""

    path: Path
    type: PrimitiveType


@dataclass(frozen=True, slots=True)
class MakeOptional:
    """Make a required column optional."""

    path: Path


@dataclass(frozen=True, slots=True)
class RenameColumn:
    """Rename a column (keeps its field id and data)."""

    path: Path
    new_name: str


SchemaUpdate = AddColumn | WidenType | MakeOptional | RenameColumn


@dataclass(frozen=True, slots=True)
class EvolutionPlan:
    """Updates to apply in order; empty when the table already fits the source."""

    updates: tuple[SchemaUpdate, ...]


@dataclass(frozen=True, slots=True)
class Incompatible:
    """The source schema cannot be represented by evolving the table."""

    reasons: tuple[str, ...]


def plan_evolution(
    current: Schema,
    value: SourceType | None,
    key: SourceType | None,
    *,
    flatten: bool,
    debezium: bool = False,
) -> EvolutionPlan | Incompatible:
    """The updates that make ``current`` hold records of the new value and key types.

    A part given as None is left as it is (its columns are not compared): the pipeline
    evolves the table one schema of one part at a time. ``debezium``
    (``flatten_debezium``, implies ``flatten``): the value is a Debezium envelope; its
    row's new fields go before ``_cdc`` (when the table has it), ``_cdc`` evolves as a
    struct like any other column.

    Raises:
        UnsupportedSchemaError: ``flatten`` with a value that is not a struct, or
            ``debezium`` with one that is not an envelope (see
            :func:`.layout.layout_fields`).
    """
    flatten = flatten or debezium
    fields = layout_fields(
        SourceStruct(()) if value is None and flatten else value or BinaryType(),
        key or BinaryType(),
        flatten=flatten,
        debezium=debezium and value is not None,
    )
    skip = set()
    if value is None and not flatten:
        skip.add(VALUE_COLUMN)
    if key is None:
        skip.add(KEY_COLUMN)
    planner = _Planner()
    planner.struct(
        (), current.as_struct(), SourceStruct(tuple(f for f in fields if f.name not in skip))
    )
    if planner.reasons:
        return Incompatible(tuple(planner.reasons))
    updates = planner.updates
    if debezium and any(f.name == CDC_COLUMN for f in current.fields):
        updates = [
            replace(u, before=CDC_COLUMN)
            if isinstance(u, AddColumn) and not u.parent and u.name != CDC_COLUMN
            else u
            for u in updates
        ]
    return EvolutionPlan(tuple(updates))


def _widened(current: PrimitiveType, new: PrimitiveType) -> PrimitiveType | str | None:
    """The type to widen ``current`` to, None when ``current`` already holds ``new``,
    or a reason when it cannot."""
    if current == new:
        return None
    if isinstance(current, IntegerType) and isinstance(new, LongType):
        return new
    if isinstance(current, LongType) and isinstance(new, IntegerType):
        return None
    if isinstance(current, FloatType) and isinstance(new, DoubleType):
        return new
    if isinstance(current, DoubleType) and isinstance(new, FloatType):
        return None
    if (
        isinstance(current, DecimalType)
        and isinstance(new, DecimalType)
        and current.scale == new.scale
    ):
        return new if new.precision > current.precision else None
    return f"{current} cannot change to {new}"


class _Planner:
    """Accumulates updates and reasons over one walk of both schemas."""

    def __init__(self) -> None:
        self.updates: list[SchemaUpdate] = []
        self.reasons: list[str] = []

    def struct(self, path: Path, current: StructType, new: SourceStruct) -> None:
        by_name = {f.name: f for f in current.fields}
        new_names = {f.name for f in new.fields}
        for field in new.fields:
            found = by_name.get(field.name)
            if found is None:
                found = next(
                    (by_name[a] for a in field.aliases if a in by_name and a not in new_names),
                    None,
                )
                if found is not None:
                    self.updates.append(RenameColumn((*path, found.name), field.name))
            if found is None:
                self.updates.append(
                    AddColumn(path, field.name, iceberg_type(field.type, FieldIds()), field.doc)
                )
                continue
            self.field((*path, found.name), found, field.type)
        for old in current.fields:
            if old.required and old.name not in new_names and not self._renamed(old, new):
                self.updates.append(MakeOptional((*path, old.name)))

    @staticmethod
    def _renamed(field: NestedField, new: SourceStruct) -> bool:
        return any(field.name in f.aliases for f in new.fields)

    def field(self, path: Path, current: NestedField, new: SourceType) -> None:
        if current.required:
            self.updates.append(MakeOptional(path))
        self.type(path, current.field_type, new)

    def type(self, path: Path, current: IcebergType, new: SourceType) -> None:
        where = ".".join(path)
        if isinstance(new, SourceStruct):
            if isinstance(current, StructType):
                self.struct(path, current, new)
            else:
                self.reasons.append(f"{where}: {current} cannot change to a struct")
        elif isinstance(new, SourceList):
            if isinstance(current, ListType):
                if current.element_required:
                    self.updates.append(MakeOptional((*path, "element")))
                self.type((*path, "element"), current.element_type, new.element)
            else:
                self.reasons.append(f"{where}: {current} cannot change to a list")
        elif isinstance(new, SourceMap):
            if not isinstance(current, MapType):
                self.reasons.append(f"{where}: {current} cannot change to a map")
            elif current.key_type != new.key:
                self.reasons.append(f"{where}: map key {current.key_type} cannot change")
            else:
                if current.value_required:
                    self.updates.append(MakeOptional((*path, "value")))
                self.type((*path, "value"), current.value_type, new.value)
        elif not isinstance(current, PrimitiveType):
            self.reasons.append(f"{where}: {current} cannot change to {new}")
        else:
            widened = _widened(current, new)
            if isinstance(widened, str):
                self.reasons.append(f"{where}: {widened}")
            elif widened is not None:
                self.updates.append(WidenType(path, widened))
