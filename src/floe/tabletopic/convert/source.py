"""The source-neutral type tree every schema format maps into, before field ids exist.

Avro, JSON Schema and Protobuf schemas become a :class:`SourceType` tree whose leaves are
pyiceberg primitive types; :mod:`.layout` turns the tree into an Iceberg schema (with
fresh field ids) and :mod:`.evolution` compares it with a table's current schema.

Invariants: the tree is immutable and acyclic (recursive source types are refused while
mapping); every struct field is optional in Iceberg terms (see docs/table-topics-row-
layout.md: records of other schema versions and tombstones leave any column null), so
the tree records no nullability; ``aliases`` carries Avro field aliases, the only
rename signal a source schema gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.types import PrimitiveType


class UnsupportedSchemaError(ValueError):
    """A source schema has a construct the table layout cannot represent.

    ``path`` is the dotted field path (empty for the root) and ``reason`` says why, in
    words meant for ``floe table status`` and the broker log.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path or '<root>'}: {reason}")


@dataclass(frozen=True, slots=True)
class SourceField:
    """A named member of a struct; ``aliases`` are former names (Avro only)."""

    name: str
    type: SourceType
    aliases: tuple[str, ...] = ()
    doc: str | None = None


@dataclass(frozen=True, slots=True)
class SourceStruct:
    fields: tuple[SourceField, ...]


@dataclass(frozen=True, slots=True)
class SourceList:
    element: SourceType


@dataclass(frozen=True, slots=True)
class SourceMap:
    """A map with string keys (Avro and JSON) or a protobuf map's scalar key."""

    key: PrimitiveType
    value: SourceType


SourceType = PrimitiveType | SourceStruct | SourceList | SourceMap


def child_path(path: str, name: str) -> str:
    """``path.name``, or ``name`` at the root."""
    return f"{path}.{name}" if path else name
