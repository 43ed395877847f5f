"""JSON Schema compatibility: can data valid under the writer schema be read (i.e. is
it valid) under the reader schema?

Rules follow Confluent's JSON Schema diff (same outcomes for the common changes):

- ``type``: the reader may widen (``integer`` -> ``number``, more types); narrowing or
  changing a type is incompatible.
- objects: a property the reader adds is fine when the writer's content model is
  closed (``additionalProperties: false``) and the property is not required; added to
  an open writer model it is incompatible (old data may hold anything under that
  name) unless the reader accepts anything there. A property the reader drops is fine
  when the reader's model is open, incompatible when it is closed. Newly required
  properties are incompatible; ``additionalProperties`` may only widen.
- ``enum`` may only grow; ``const`` may not change or appear; numeric, length, item
  and property-count bounds may only relax; ``pattern``/``format`` may not change.
- arrays: ``items`` (and ``prefixItems``) compared recursively.
- combinators ``oneOf``/``anyOf``/``allOf``: compared position by position when both
  sides have them with the same length; any other change to them is incompatible.
- ``$ref`` is followed (locally and into referenced schemas) before comparing.
"""

from __future__ import annotations

from typing import Any

from referencing._core import Resolver  # not re-exported by the package

_Resolver = Resolver[Any]

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_FIXED = ("pattern", "format", "multipleOf", "uniqueItems")
_MAX_DEPTH = 64


def _types(schema: dict[str, Any]) -> set[str] | None:
    value = schema.get("type")
    if value is None:
        return None
    return {value} if isinstance(value, str) else set(value)


def _accepts_anything(schema: object) -> bool:
    return schema is True or schema == {}


class JsonCompat:
    """One compatibility check between two parsed schemas (holds their resolvers)."""

    def __init__(self, reader: _Resolver, writer: _Resolver) -> None:
        self._resolvers = (reader, writer)
        self.messages: list[str] = []

    def check(self, reader: Any, writer: Any) -> list[str]:
        self._compare(reader, writer, self._resolvers[0], self._resolvers[1], "#", 0)
        return self.messages

    def _fail(self, path: str, what: str) -> None:
        self.messages.append(f"{what} at {path}")

    def _deref(self, schema: Any, resolver: _Resolver) -> tuple[Any, _Resolver]:
        for _ in range(_MAX_DEPTH):
            if not isinstance(schema, dict) or "$ref" not in schema:
                break
            resolved = resolver.lookup(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema, resolver = resolved.contents, resolved.resolver
            if rest and isinstance(schema, dict):
                schema = {**schema, **rest}
        return schema, resolver

    def _compare(  # noqa: PLR0917 (one recursive walk, all positional)
        self, reader: Any, writer: Any, rr: _Resolver, wr: _Resolver, path: str, depth: int
    ) -> None:
        if depth > _MAX_DEPTH:
            return  # recursive schemas: what was compared up to here stands
        reader, rr = self._deref(reader, rr)
        writer, wr = self._deref(writer, wr)
        if _accepts_anything(reader) or writer is False:
            return
        if reader is False or _accepts_anything(writer):
            if not _accepts_anything(reader):
                self._fail(path, "reader narrows a schema that accepted anything")
            return
        if not isinstance(reader, dict) or not isinstance(writer, dict):
            return
        self._compare_types(reader, writer, path)
        self._compare_values(reader, writer, path)
        self._compare_object(reader, writer, rr, wr, path, depth)
        self._compare_array(reader, writer, rr, wr, path, depth)
        for combinator in ("oneOf", "anyOf", "allOf"):
            r_parts, w_parts = reader.get(combinator), writer.get(combinator)
            if r_parts == w_parts:
                continue
            if r_parts is None and combinator != "allOf":
                continue  # dropping a oneOf/anyOf only accepts more
            if r_parts is None or w_parts is None or len(r_parts) != len(w_parts):
                self._fail(path, f"{combinator} changed")
                continue
            for i, (r_part, w_part) in enumerate(zip(r_parts, w_parts, strict=True)):
                self._compare(r_part, w_part, rr, wr, f"{path}/{combinator}/{i}", depth + 1)
        if "not" in reader and reader.get("not") != writer.get("not"):
            self._fail(path, "not added or changed")

    def _compare_types(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        r_types, w_types = _types(reader), _types(writer)
        if r_types is None:
            return
        if w_types is None:
            self._fail(path, f"type narrowed to {sorted(r_types)}")
            return
        if "number" in r_types:
            r_types = r_types | {"integer"}
        missing = w_types - r_types
        if missing:
            self._fail(path, f"type changed from {sorted(w_types)} to {sorted(r_types)}")

    def _compare_values(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> None:
        if "enum" in reader:
            if "enum" not in writer:
                self._fail(path, "enum added")
            elif not all(v in reader["enum"] for v in writer["enum"]):
                self._fail(path, "enum values removed")
        if "const" in reader and reader.get("const") != writer.get("const"):
            self._fail(path, "const added or changed")
        for key in _LOWER_BOUNDS:
            if key in reader and (key not in writer or reader[key] > writer[key]):
                self._fail(path, f"{key} added or increased")
        for key in _UPPER_BOUNDS:
            if key in reader and (key not in writer or reader[key] < writer[key]):
                self._fail(path, f"{key} added or decreased")
        for key in _FIXED:
            if key in reader and reader[key] != writer.get(key) and reader[key] is not False:
                self._fail(path, f"{key} added or changed")

    def _compare_object(  # noqa: PLR0917
        self,
        reader: dict[str, Any],
        writer: dict[str, Any],
        rr: _Resolver,
        wr: _Resolver,
        path: str,
        depth: int,
    ) -> None:
        r_props: dict[str, Any] = reader.get("properties", {})
        w_props: dict[str, Any] = writer.get("properties", {})
        r_extra = reader.get("additionalProperties", True)
        w_extra = writer.get("additionalProperties", True)
        w_required = set(writer.get("required", []))
        for name in sorted(set(reader.get("required", [])) - w_required):
            self._fail(f"{path}/required", f"required property '{name}' added")
        for name, r_prop in r_props.items():
            sub = f"{path}/properties/{name}"
            if name in w_props:
                self._compare(r_prop, w_props[name], rr, wr, sub, depth + 1)
            elif w_extra is not False and not _accepts_anything(r_prop):
                if _accepts_anything(w_extra):
                    self._fail(sub, "property added to an open content model")
                else:
                    self._compare(r_prop, w_extra, rr, wr, sub, depth + 1)
        for name, w_prop in w_props.items():
            if name in r_props:
                continue
            sub = f"{path}/properties/{name}"
            if r_extra is False:
                self._fail(sub, "property removed from a closed content model")
            elif not _accepts_anything(r_extra):
                self._compare(r_extra, w_prop, rr, wr, sub, depth + 1)
        if not _accepts_anything(r_extra) and w_extra is not False:
            if r_extra is False or _accepts_anything(w_extra):
                self._fail(f"{path}/additionalProperties", "additionalProperties narrowed")
            else:
                self._compare(r_extra, w_extra, rr, wr, f"{path}/additionalProperties", depth + 1)

    def _compare_array(  # noqa: PLR0917
        self,
        reader: dict[str, Any],
        writer: dict[str, Any],
        rr: _Resolver,
        wr: _Resolver,
        path: str,
        depth: int,
    ) -> None:
        r_items, w_items = reader.get("items"), writer.get("items")
        if isinstance(r_items, list) or isinstance(w_items, list):
            if r_items != w_items:
                self._fail(f"{path}/items", "tuple items changed")
        elif r_items is not None:
            self._compare(
                r_items, True if w_items is None else w_items, rr, wr, f"{path}/items", depth + 1
            )
        r_prefix, w_prefix = reader.get("prefixItems", []), writer.get("prefixItems", [])
        for i, r_item in enumerate(r_prefix):
            w_item = w_prefix[i] if i < len(w_prefix) else True
            self._compare(r_item, w_item, rr, wr, f"{path}/prefixItems/{i}", depth + 1)
