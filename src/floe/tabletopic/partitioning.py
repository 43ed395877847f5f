"""A table topic's partition spec (``table.topic.partition.by``) bound to its table.

:func:`partition_spec` builds the spec of a table about to be created; :func:`evolve_spec`
moves an existing table's spec to the configured terms within a pyiceberg transaction
(a metadata-only change: files written before keep their spec, Iceberg plans queries
over both). Both check each term against the table's schema first: the column must
exist, sit in structs only (not in a list or map), and be of a type the transform takes
(Iceberg's rules, as pyiceberg's transforms state them).

The terms are compared as a set: reordering them changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from floe.config.partition_by import PartitionTerm, render_partition_by
from floe.errors import FloeError
from floe.tabletopic.columns import ColumnPathError, field_at

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import Transform

FIRST_FIELD_ID = 1000
"""Iceberg's first partition field id."""


class PartitionSpecError(FloeError):
    """A configured term the table's schema cannot take: the message says which and
    why, in one line."""


def transform_of(term: PartitionTerm) -> Transform[Any, Any]:
    from pyiceberg import transforms as t

    if term.transform in ("bucket", "truncate"):
        assert term.width is not None, "the grammar gives these a width"
        if term.transform == "bucket":
            return t.BucketTransform(num_buckets=term.width)
        return t.TruncateTransform(width=term.width)
    simple: dict[str, Transform[Any, Any]] = {
        "identity": t.IdentityTransform(),
        "year": t.YearTransform(),
        "month": t.MonthTransform(),
        "day": t.DayTransform(),
        "hour": t.HourTransform(),
    }
    return simple[term.transform]


def _source_id(schema: Schema, term: PartitionTerm) -> int:
    """The field id of the term's column, checked for the transform.

    Raises:
        PartitionSpecError: no such column, one inside a list or map, or a type the
            transform does not take.
    """
    try:
        field = field_at(schema, term.column)
    except ColumnPathError as exc:
        raise PartitionSpecError(f"partition.by {term.render()!r}: {exc}") from None
    if not field.field_type.is_primitive or not transform_of(term).can_transform(field.field_type):
        raise PartitionSpecError(
            f"partition.by {term.render()!r}: {term.transform} does not apply to "
            f"{term.column} of type {field.field_type}"
        )
    return field.field_id


def partition_spec(schema: Schema, terms: tuple[PartitionTerm, ...] | None) -> PartitionSpec:
    """The spec of a new table with ``schema`` (unpartitioned for None or no terms).

    Raises:
        PartitionSpecError: see :func:`_source_id`.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    fields = [
        PartitionField(_source_id(schema, t), FIRST_FIELD_ID + i, transform_of(t), t.field_name)
        for i, t in enumerate(terms or ())
    ]
    return PartitionSpec(*fields)


def evolve_spec(txn: Any, terms: tuple[PartitionTerm, ...] | None) -> bool:
    """Within pyiceberg transaction ``txn``, make the table's current spec hold exactly
    ``terms`` (None: leave it as it is). True when the spec changed.

    Raises:
        PartitionSpecError: see :func:`_source_id`.
    """
    if terms is None:
        return False
    metadata = txn.table_metadata
    schema = metadata.schema()
    wanted = {(_source_id(schema, t), str(transform_of(t))): t for t in terms}
    current = {(f.source_id, str(f.transform)): f for f in metadata.spec().fields}
    drop = [f.name for key, f in current.items() if key not in wanted]
    add = [t for key, t in wanted.items() if key not in current]
    if not drop and not add:
        return False
    with txn.update_spec() as update:
        for name in drop:
            update.remove_field(name)
        for term in add:
            update.add_field(term.column, transform_of(term), term.field_name)
    return True


def describe_spec(spec: PartitionSpec, schema: Schema) -> str:
    """A table's spec in the ``partition.by`` syntax (``[]``: unpartitioned), for status
    lines; a transform outside that syntax (void...) is shown by its Iceberg name."""
    from floe.config.partition_by import parse_partition_by

    terms = []
    for f in spec.fields:
        column = schema.find_column_name(f.source_id) or f"#{f.source_id}"
        name = str(f.transform)
        if name == "identity":
            terms.append(column)
        elif "[" in name:  # bucket[16], truncate[4]
            kind, width = name.rstrip("]").split("[")
            terms.append(f"{kind}({column}, {width})")
        else:
            terms.append(f"{name}({column})")
    text = "[" + ", ".join(terms) + "]"
    try:
        return render_partition_by(parse_partition_by(text))
    except FloeError:
        return text
