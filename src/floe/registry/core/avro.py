"""Avro schemas, parsed and checked with the Apache ``avro`` library.

Compatibility is ``avro.compatibility``'s reader/writer resolution check (the same
algorithm as Apache Avro's Java ``SchemaCompatibility`` that Confluent's registry uses):
type promotions, defaults for missing fields, aliases, unions and enum symbols.
Referenced named types are parsed first into the same name table, so the schema may
use them by full name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import avro.compatibility
import avro.name
import avro.schema
import orjson

from floe.registry.core.model import SchemaType
from floe.registry.core.schemas import Dependency, ParsedSchema, invalid


def _flatten(deps: Sequence[Dependency]) -> list[Dependency]:
    out: list[Dependency] = []
    for dep in deps:
        for inner in _flatten(dep.deps):
            if inner not in out:
                out.append(inner)
        if dep not in out:
            out.append(dep)
    return out


def _qualify_aliases(schema: avro.schema.Schema, seen: set[int]) -> None:
    """Qualify named types' aliases with the type's namespace, as the Avro spec reads
    them: ``avro.compatibility`` compares aliases with the writer's full name, so an
    unqualified ``"aliases": ["Old"]`` would never match ``ns.Old`` otherwise."""
    if id(schema) in seen:
        return
    seen.add(id(schema))
    if isinstance(schema, avro.schema.NamedSchema):
        aliases = schema.props.get("aliases")
        namespace = schema.namespace
        if isinstance(aliases, list) and namespace:
            schema.props["aliases"] = [a if "." in a else f"{namespace}.{a}" for a in aliases]
    children: list[avro.schema.Schema] = []
    if isinstance(schema, avro.schema.RecordSchema):
        children = [field.type for field in schema.fields]
    elif isinstance(schema, avro.schema.ArraySchema):
        children = [schema.items]
    elif isinstance(schema, avro.schema.MapSchema):
        children = [schema.values]
    elif isinstance(schema, avro.schema.UnionSchema):
        children = list(schema.schemas)
    for child in children:
        _qualify_aliases(child, seen)


class AvroSchema(ParsedSchema):
    schema_type = SchemaType.AVRO

    def __init__(self, text: str, deps: Sequence[Dependency] = ()) -> None:
        """Raises:
        InvalidSchemaError: not JSON, not a valid Avro schema, or an unknown name.
        """
        try:
            names = avro.name.Names(validate_names=True)
            for dep in _flatten(deps):
                avro.schema.make_avsc_object(json.loads(dep.text), names)
            self._known = dict(names.names)
            self.schema = avro.schema.make_avsc_object(json.loads(text), names)
            _qualify_aliases(self.schema, set())
        except Exception as exc:  # avro raises many unrelated types on bad input
            raise invalid(self.schema_type, exc) from None

    def _json(self) -> object:
        seed = avro.name.Names()
        seed.names = dict(self._known)
        return self.schema.to_json(seed)

    def canonical(self) -> str:
        return orjson.dumps(self._json()).decode()

    def normalized(self) -> str:
        return self.canonical()

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return ["Incompatible schema type: the other schema is not AVRO"]
        checker = avro.compatibility.ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
        result = checker.get_compatibility(self.schema, writer.schema)
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        locations = sorted(result.locations)
        return [f"{m} at {', '.join(locations)}" for m in sorted(result.messages)] or [
            "reader cannot read data written with the writer schema"
        ]
