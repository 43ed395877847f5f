"""JSON Schemas (drafts 4, 6, 7, 2019-09, 2020-12), validated with ``jsonschema``.

The draft comes from ``$schema`` (draft 7 when absent, as Confluent does); the schema
must pass its draft's meta-schema, and every ``$ref`` must resolve, locally or to a
referenced schema registered under the reference's name. Compatibility is in
:mod:`.json_compat`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jsonschema.validators
import orjson
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError

from floe.registry.core.errors import InvalidSchemaError
from floe.registry.core.model import SchemaType
from floe.registry.core.schemas import Dependency, ParsedSchema, invalid


def _resources(deps: Sequence[Dependency]) -> Iterator[tuple[str, referencing.Resource[Any]]]:
    for dep in deps:
        yield from _resources(dep.deps)
        contents = orjson.loads(dep.text)
        yield (
            dep.name,
            referencing.Resource.from_contents(
                contents, default_specification=referencing.jsonschema.DRAFT7
            ),
        )


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                yield value
            elif key not in ("enum", "const", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


class JsonSchema(ParsedSchema):
    schema_type = SchemaType.JSON

    def __init__(self, text: str, deps: Sequence[Dependency] = ()) -> None:
        """Raises:
        InvalidSchemaError: not JSON, not a schema of its draft, or a ``$ref`` that
            does not resolve.
        """
        try:
            self.raw: Any = orjson.loads(text)
            if not isinstance(self.raw, dict | bool):
                raise InvalidSchemaError("a JSON Schema is an object or a boolean")
            cls = jsonschema.validators.validator_for(
                self.raw, default=jsonschema.validators.Draft7Validator
            )
            cls.check_schema(self.raw)
            registry: referencing.Registry[Any] = referencing.Registry().with_resources(
                _resources(deps)
            )
            spec = referencing.jsonschema.specification_with(
                cls.META_SCHEMA["$schema"], default=referencing.jsonschema.DRAFT7
            )
            root = referencing.Resource.from_contents(self.raw, default_specification=spec)
            self.resolver = registry.resolver_with_root(root)
            for ref in _refs(self.raw):
                self.resolver.lookup(ref)
        except SchemaError as exc:
            raise invalid(self.schema_type, exc.message) from None
        except referencing.exceptions.Unresolvable as exc:
            raise invalid(self.schema_type, f"unresolvable $ref: {exc}") from None
        except (orjson.JSONDecodeError, InvalidSchemaError, TypeError, ValueError) as exc:
            raise invalid(self.schema_type, exc) from None

    def canonical(self) -> str:
        return orjson.dumps(self.raw, option=orjson.OPT_SORT_KEYS).decode()

    def normalized(self) -> str:
        return self.canonical()

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, JsonSchema):
            return ["Incompatible schema type: the other schema is not JSON"]
        from floe.registry.core.json_compat import JsonCompat

        return JsonCompat(self.resolver, writer.resolver).check(self.raw, writer.raw)
