"""Where every field of an encoded request sits: the map schema-aware mutations use.

:func:`layout` walks a well-formed request frame with kio's schema for its api key and
version and returns one :class:`Span` per wire element: fixed-width integers, string
and bytes length prefixes and their contents, array counts, record sets, nullable
struct markers, and the parts of every tagged-field section. It is computed once per
seed; mutators then rewrite one span's bytes without re-encoding the request.

The walk is independent of the broker's own decoder on purpose: two readings of the
same schema that disagree are exactly what a fuzzer should find.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from kio.index import load_request_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from fuzz.wire import I16, I32, read_uvarint

FIXED = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

# Span kinds.
INT = "int"  # a fixed-width integer (also float64, uuid)
BOOL = "bool"  # a boolean (0 or 1; anything else is malformed)
LEN16 = "len16"  # legacy string length
LEN32 = "len32"  # legacy bytes/records length
ULEN = "ulen"  # compact string/bytes/records length (uvarint, value + 1)
COUNT32 = "count32"  # legacy array count
UCOUNT = "ucount"  # compact array count (uvarint, value + 1)
STR = "str"  # string content
BYTES = "bytes"  # bytes content
RECORDS = "records"  # a record set (Produce)
MARKER = "marker"  # nullable struct marker (int8 -1 or 1)
TAGS = "tags"  # a whole tagged-field section
TAGCOUNT = "tagcount"  # the number of tagged fields (uvarint)
TAG = "tag"  # a tag number (uvarint)
TAGSIZE = "tagsize"  # a tagged field's size (uvarint)
HEADER = "header"  # api key, version, correlation id: handled by header mutators


@dataclass(frozen=True, slots=True)
class Span:
    """``frame[start:end]`` holds one wire element named ``name`` of kind ``kind``.

    Positions are absolute in the framed request (size prefix included).
    """

    start: int
    end: int
    kind: str
    name: str


class LayoutError(ValueError):
    """The frame does not parse with the schema it claims (the seed is skipped)."""


Walker = Callable[[bytes, int, list[Span]], int]


def _fixed(size: int, name: str, kind: str = INT) -> Walker:
    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        if pos + size > len(buf):
            raise LayoutError(f"truncated {name}")
        out.append(Span(pos, pos + size, kind, name))
        return pos + size

    return walk


def _sized(kafka_type: str, flexible: bool, name: str) -> Walker:
    content = {"string": STR, "records": RECORDS}.get(kafka_type, BYTES)

    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        if flexible:
            value, end = read_uvarint(buf, pos)
            out.append(Span(pos, end, ULEN, name))
            length = value - 1
        else:
            prefix = I16 if kafka_type == "string" else I32
            end = pos + prefix.size
            if end > len(buf):
                raise LayoutError(f"truncated length of {name}")
            length = prefix.unpack_from(buf, pos)[0]
            out.append(Span(pos, end, LEN16 if prefix is I16 else LEN32, name))
        if length < 0:
            return end
        if end + length > len(buf):
            raise LayoutError(f"truncated {name}")
        out.append(Span(end, end + length, content, name))
        return end + length

    return walk


def _array(flexible: bool, item: Walker, name: str) -> Walker:
    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        if flexible:
            value, end = read_uvarint(buf, pos)
            out.append(Span(pos, end, UCOUNT, name))
            count = value - 1
        else:
            end = pos + 4
            if end > len(buf):
                raise LayoutError(f"truncated count of {name}")
            count = I32.unpack_from(buf, pos)[0]
            out.append(Span(pos, end, COUNT32, name))
        if count > len(buf):
            raise LayoutError(f"absurd count of {name}")
        for _ in range(max(count, 0)):
            end = item(buf, end, out)
        return end

    return walk


def _nullable(entity: Walker, name: str) -> Walker:
    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        if pos >= len(buf):
            raise LayoutError(f"truncated marker of {name}")
        out.append(Span(pos, pos + 1, MARKER, name))
        if buf[pos] == 0xFF:
            return pos + 1
        return entity(buf, pos + 1, out)

    return walk


def tagged_section(known: dict[int, Walker] | None = None) -> Walker:
    """Walk a tagged-field section, descending into the tags the schema knows."""
    known = known or {}

    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        start = pos
        count, pos2 = read_uvarint(buf, pos)
        marks = [Span(pos, pos2, TAGCOUNT, "tags")]
        pos = pos2
        for _ in range(count):
            tag, after_tag = read_uvarint(buf, pos)
            marks.append(Span(pos, after_tag, TAG, f"tag{tag}"))
            size, after_size = read_uvarint(buf, after_tag)
            marks.append(Span(after_tag, after_size, TAGSIZE, f"tag{tag}"))
            pos = after_size + size
            if pos > len(buf):
                raise LayoutError("truncated tagged field")
            inner = known.get(tag)
            if inner is not None:
                inner(buf, after_size, marks)
        out.append(Span(start, pos, TAGS, "tags"))
        out.extend(marks)
        return pos

    return walk


def _field(field: Any, flexible: bool, tagged: bool) -> Walker:
    kind = classify_field(field)
    name = field.name
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        size = FIXED.get(kafka_type)
        if size is None:
            scalar = _sized(kafka_type, flexible, name)
        else:
            scalar = _fixed(size, name, BOOL if kafka_type == "bool" else INT)
        return _array(flexible, scalar, name) if kind.is_array else scalar
    if isinstance(kind, EntityTupleField):
        return _array(flexible, _entity(kind.type_), name)
    assert isinstance(kind, EntityField)
    entity = _entity(kind.type_)
    return _nullable(entity, name) if is_optional(field) and not tagged else entity


@functools.cache
def _entity(entity_type: type[Any]) -> Walker:
    flexible: bool = entity_type.__flexible__
    steps: list[Walker] = []
    known: dict[int, Walker] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            known[int(tag)] = _field(field, flexible, tagged=True)
        else:
            steps.append(_field(field, flexible, tagged=False))
    if flexible:
        steps.append(tagged_section(known))

    def walk(buf: bytes, pos: int, out: list[Span]) -> int:
        for step in steps:
            pos = step(buf, pos, out)
        return pos

    return walk


@functools.cache
def request_schema(api_key: int, version: int) -> type[Any]:
    """kio's request class (raises kio's errors for unknown keys or versions)."""
    return load_request_schema(api_key, version)


def layout(framed: bytes) -> list[Span]:
    """Every span of a framed, well-formed request (size prefix at 0, header at 4).

    Raises:
        LayoutError: the frame does not parse with its claimed schema.
    """
    if len(framed) < 14:
        raise LayoutError("frame too short")
    api_key, version = I16.unpack_from(framed, 4)[0], I16.unpack_from(framed, 6)[0]
    try:
        cls: Any = request_schema(api_key, version)
    except Exception as exc:  # kio raises its own index errors for unknown schemas
        raise LayoutError(f"no schema for {api_key} v{version}: {exc}") from None
    out = [
        Span(0, 4, HEADER, "size"),
        Span(4, 6, HEADER, "api_key"),
        Span(6, 8, HEADER, "api_version"),
        Span(8, 12, HEADER, "correlation_id"),
    ]
    pos = _sized("string", False, "client_id")(framed, 12, out)
    try:
        if cls.__header_schema__.__flexible__:
            pos = tagged_section()(framed, pos, out)
        end = _entity(cls)(framed, pos, out)
    except (ValueError, IndexError) as exc:
        raise LayoutError(str(exc)) from None
    if end != len(framed):
        raise LayoutError(f"{len(framed) - end} trailing bytes")
    return out
