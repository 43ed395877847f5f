"""The contract every schema type implements, and the one entry point that parses.

A parsed schema knows its canonical form (what "identical" means), its normalized text
(stored when a client asks ``normalize=true``), how to render itself for a ``format``
query parameter, and how it reads data written with another schema of its type (the
compatibility check, with the parsed schema as the reader).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from floe.registry.core.errors import InvalidSchemaError
from floe.registry.core.model import Reference, SchemaType


@dataclass(frozen=True)
class Dependency:
    """A referenced schema, resolved: its reference name, type, text and own
    dependencies (``deps`` lists them, dependencies first)."""

    name: str
    schema_type: SchemaType
    text: str
    deps: tuple[Dependency, ...] = ()


class ParsedSchema(ABC):
    """A validated schema of one type. Immutable once built."""

    schema_type: SchemaType

    @abstractmethod
    def canonical(self) -> str:
        """A text that is equal for schemas the registry treats as identical."""

    @abstractmethod
    def normalized(self) -> str:
        """The text stored for ``normalize=true``."""

    def stored(self, text: str, *, normalize: bool) -> str:
        """The text to store for a registration of ``text``."""
        return self.normalized() if normalize else text

    def formatted(self, fmt: str | None, text: str) -> str:
        """``text`` (the stored schema) rendered for a ``format`` query parameter;
        types without special formats return it unchanged."""
        return text

    @abstractmethod
    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        """Why this schema, as the reader, cannot read data written with ``writer``;
        empty when it can."""


def parse(schema_type: SchemaType, text: str, deps: Sequence[Dependency] = ()) -> ParsedSchema:
    """Parse and validate ``text`` of ``schema_type`` with its resolved references.

    Raises:
        InvalidSchemaError: the text does not parse, does not validate, or names a
            type it does not define or reference.
    """
    if schema_type is SchemaType.AVRO:
        from floe.registry.core.avro import AvroSchema

        return AvroSchema(text, deps)
    if schema_type is SchemaType.JSON:
        from floe.registry.core.json_schema import JsonSchema

        return JsonSchema(text, deps)
    from floe.registry.core.protobuf import ProtobufSchema

    return ProtobufSchema(text, deps)


def fingerprint(parsed: ParsedSchema, references: Sequence[Reference]) -> str:
    """Identity of (type, canonical text, references) across subjects: equal
    fingerprints share one schema id."""
    h = hashlib.sha256(parsed.schema_type.value.encode())
    h.update(b"\0" + parsed.canonical().encode())
    for ref in references:
        h.update(f"\0{ref.name}\0{ref.subject}\0{ref.version}".encode())
    return h.hexdigest()


def invalid(schema_type: SchemaType, exc: BaseException | str) -> InvalidSchemaError:
    """One message shape for every parser failure."""
    return InvalidSchemaError(f"Invalid {schema_type.value} schema: {exc}")
