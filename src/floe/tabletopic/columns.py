"""A configured column path (``a.b``) found in a table's Iceberg schema: the one walk
that ``partition.by`` and ``id.columns`` share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from floe.errors import FloeError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField


class ColumnPathError(FloeError):
    """A path the schema does not have, or one crossing a list, map or primitive."""


def field_at(schema: Schema, column: str) -> NestedField:
    """The field a dotted path names, reached through structs only.

    Raises:
        ColumnPathError: no such column, or a path crossing a list, map or primitive
            (the message names the part that breaks it).
    """
    from pyiceberg.types import ListType, MapType, StructType

    path = column.split(".")
    fields = schema.as_struct()
    field = None
    for depth, name in enumerate(path):
        field = next((f for f in fields.fields if f.name == name), None)
        if field is None:
            where = ".".join(path[:depth]) or "the table"
            raise ColumnPathError(f"{where} has no column {name!r}")
        if depth < len(path) - 1:
            prefix = ".".join(path[: depth + 1])
            if isinstance(field.field_type, (ListType, MapType)):
                raise ColumnPathError(
                    f"{prefix} is a list or map (columns must be reached through structs)"
                )
            if not isinstance(field.field_type, StructType):
                raise ColumnPathError(f"{prefix} is {field.field_type}, not a struct")
            fields = field.field_type
    assert field is not None  # a path has at least one name
    return field
