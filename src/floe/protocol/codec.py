"""Kafka request decoding and response encoding on top of kio's schemas.

A request frame (the bytes after the size prefix) is decoded in three steps:

1. :func:`peek_header` reads api key, version, correlation id and client id at fixed
   offsets; they are the same in request header v1 and v2.
2. A schema walker, compiled once per kio request class, checks the body's structure in
   Python before kio's native reader sees it. This is not optional: kio's reader
   preallocates arrays from the announced length, and a garbage length (say 2**32)
   aborts the whole process from Rust, where no ``except`` can catch it. The walker
   knows the smallest encoding of every array item (from the schema) and rejects an
   array, or a tagged section, whose announced count cannot fit in the bytes left,
   before walking any item; while it is at it, it records every tagged field the schema
   does not know. It also counts items (array elements and tagged fields) against an
   optional budget: a frame with more is reported (:class:`DecodeBudgetExceededError`) so
   that the server can decode it off its event loop instead of stalling every client.
3. kio's native reader parses the body. Because kio raises ``KeyError`` on unknown
   tagged fields instead of skipping them as Kafka requires, a body that has any is first
   rewritten without them (tagged sections are self-delimiting, so this is a splice).

Trailing bytes after the body are tolerated, as Kafka's own parser does not look for
them either.

Responses are a size prefix, response header v0 (correlation id) or v1 (plus empty
tagged fields, for flexible versions except ApiVersions) and the body: the hand-written
encoders of :mod:`floe.protocol.fast` where they exist, kio's writer otherwise.

Invariant: nothing here does I/O or keeps state beyond per-schema caches, which are
bounded by the (api key, version) pairs kio knows.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeAlias

from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (  # kio is pinned; these mirror its reader's view
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from floe.errors import ErrorCode, FloeError
from floe.protocol.fast import encode_uvarint, fast_encoder
from floe.protocol.framing import SIZE

__all__ = [
    "DecodeBudgetExceededError",
    "MalformedRequestError",
    "RequestHeader",
    "UnsupportedVersionError",
    "decode_request",
    "encode_error_response",
    "encode_response",
    "kio_version_range",
    "peek_header",
    "request_class",
    "request_min_size",
    "response_class",
]

API_VERSIONS_KEY = 18

_HEADER = struct.Struct(">hhih")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_EMPTY_TAGS = b"\x00"

Buffer: TypeAlias = bytes | bytearray | memoryview
Chunks: TypeAlias = list[bytes | memoryview]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fields of a request header the broker needs (header v1 and v2 alike)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class MalformedRequestError(FloeError):
    """A request frame cannot be parsed: truncated, garbage, or not what its header says.

    Attributes:
        header: the request header when at least that was readable, else None.
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


class DecodeBudgetExceededError(FloeError):
    """The frame holds more items (array elements plus tagged fields) than the budget
    passed to :func:`decode_request`; nothing is wrong with it, it is just expensive.

    Attributes:
        header: the request header.
    """

    def __init__(self, message: str, header: RequestHeader) -> None:
        super().__init__(message)
        self.header = header


class UnsupportedVersionError(FloeError):
    """The api key is unknown to kio or the version is outside kio's range for it.

    Attributes:
        header: the request header, when the error comes from decoding a request.
    """

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


# --- schema lookup --------------------------------------------------------------------


@functools.cache
def kio_version_range(api_key: int) -> tuple[int, int]:
    """Return the lowest and highest version kio has schemas for (contiguous in kio).

    Raises:
        UnsupportedVersionError: kio does not know ``api_key``.
    """
    try:
        versions = schema_name_map[api_key_map[api_key]]
    except KeyError:
        raise UnsupportedVersionError(f"unknown api key {api_key}") from None
    return min(versions), max(versions)


def _check_version(api_key: int, api_version: int) -> None:
    low, high = kio_version_range(api_key)
    if not low <= api_version <= high:
        raise UnsupportedVersionError(
            f"api key {api_key} version {api_version} not in {low}..{high}"
        )


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """Return kio's request dataclass for this api key and version.

    Raises:
        UnsupportedVersionError: kio has no such schema.
    """
    _check_version(api_key, api_version)
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    """Return kio's response dataclass for this api key and version.

    Raises:
        UnsupportedVersionError: kio has no such schema.
    """
    _check_version(api_key, api_version)
    return load_response_schema(api_key, api_version)


# --- structure walker -----------------------------------------------------------------


class _InvalidFrameError(Exception):
    """Internal: the walker found the frame truncated or structurally impossible."""


Edit: TypeAlias = tuple[int, int, bytes]
"""Replace ``buf[start:end]`` by the bytes (a tagged section without unknown tags)."""


class _Walk:
    """One walk's mutable state: the edits to apply and the items it may still visit."""

    __slots__ = ("budget", "edits")

    def __init__(self, budget: int) -> None:
        self.edits: list[Edit] = []
        self.budget = budget

    def spend(self, items: int) -> None:
        self.budget -= items
        if self.budget < 0:
            raise _BudgetError


class _BudgetError(Exception):
    """Internal: the walk visited more items than its budget."""


Walker: TypeAlias = Callable[[Buffer, int, _Walk], int]
"""Checks the value at ``pos``, records needed edits, returns the position after it."""
Compiled: TypeAlias = tuple[Walker, int]
"""A walker and the fewest bytes any value it accepts takes."""
_UNLIMITED = 2**62

_FIXED_SIZES = {
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


def _uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes, as Kafka does."""
    try:
        byte = buf[pos]
        if byte < 0x80:  # the common case: lengths and counts below 128
            return byte, pos + 1
        value = 0
        for shift in range(0, 35, 7):
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
    except IndexError:
        raise _InvalidFrameError("truncated varint") from None
    raise _InvalidFrameError("varint longer than 5 bytes")


def _skip(size: int) -> Walker:
    def skip(buf: Buffer, pos: int, walk: _Walk) -> int:
        pos += size
        if pos > len(buf):
            raise _InvalidFrameError("truncated")
        return pos

    return skip


def _null_error(name: str) -> _InvalidFrameError:
    """Kafka refuses the whole request when a non-nullable field is null."""
    return _InvalidFrameError(f"non-nullable field {name} was serialized as null")


def _sized(prefix: struct.Struct, null: str | None) -> Walker:
    """A legacy string (int16 length) or bytes (int32 length); -1 is null, which a
    non-nullable field (``null``: its name; None when nullable) refuses."""

    def sized(buf: Buffer, pos: int, walk: _Walk) -> int:
        if pos + prefix.size > len(buf):
            raise _InvalidFrameError("truncated length")
        (length,) = prefix.unpack_from(buf, pos)
        pos += prefix.size
        if length < -1:
            raise _InvalidFrameError("negative length")
        if length == -1 and null is not None:
            raise _null_error(null)
        pos += max(length, 0)
        if pos > len(buf):
            raise _InvalidFrameError("truncated string or bytes")
        return pos

    return sized


def _compact(null: str | None) -> Walker:
    """A compact string or bytes: varint length + 1, 0 is null (``null`` as in
    ``_sized``)."""

    def compact(buf: Buffer, pos: int, walk: _Walk) -> int:
        length, pos = _uvarint(buf, pos)
        if not length and null is not None:
            raise _null_error(null)
        pos += max(length - 1, 0)
        if pos > len(buf):
            raise _InvalidFrameError("truncated compact string or bytes")
        return pos

    return compact


def _array(
    flexible: bool, item_size: int | None, item: Walker, item_min: int, null: str | None
) -> Walker:
    """An array; ``item_size`` for fixed-size items (skipped over, not visited),
    ``item_min`` the fewest bytes one item takes (at least 1); ``null`` as in
    ``_sized``."""
    item_min = max(item_min, 1)

    def array(buf: Buffer, pos: int, walk: _Walk) -> int:
        if flexible:
            count, pos = _uvarint(buf, pos)
            count -= 1
        else:
            if pos + 4 > len(buf):
                raise _InvalidFrameError("truncated array length")
            (count,) = _I32.unpack_from(buf, pos)
            pos += 4
            if count < -1:
                raise _InvalidFrameError("negative array length")
        if count == -1 and null is not None:
            raise _null_error(null)
        if count <= 0:
            return pos
        # The frame must hold every item's smallest encoding: this bound keeps kio's
        # preallocation proportional to the frame, and refuses an impossible count
        # before a single item is walked.
        if count * item_min > len(buf) - pos:
            raise _InvalidFrameError(
                f"array of {count} items needs at least {count * item_min} bytes, "
                f"{len(buf) - pos} left"
            )
        walk.spend(count)
        if item_size is not None:
            return pos + count * item_size
        for _ in range(count):
            pos = item(buf, pos, walk)
        return pos

    return array


def _nullable(entity: Walker) -> Walker:
    """A nullable struct (KIP-893): int8 marker -1 (null) or 1, then the struct."""

    def nullable(buf: Buffer, pos: int, walk: _Walk) -> int:
        if pos >= len(buf):
            raise _InvalidFrameError("truncated struct marker")
        (marker,) = _I8.unpack_from(buf, pos)
        if marker == -1:
            return pos + 1
        if marker != 1:
            raise _InvalidFrameError("bad struct marker")
        return entity(buf, pos + 1, walk)

    return nullable


def _splice(buf: Buffer, start: int, end: int, edits: Sequence[Edit]) -> bytes:
    """Return ``buf[start:end]`` with the (ordered, disjoint) edits applied."""
    out = bytearray()
    for edit_start, edit_end, replacement in edits:
        out += buf[start:edit_start]
        out += replacement
        start = edit_end
    out += buf[start:end]
    return bytes(out)


def _tagged_section(known: dict[int, Walker]) -> Walker:
    def tagged_section(buf: Buffer, pos: int, walk: _Walk) -> int:
        start = pos
        count, pos = _uvarint(buf, pos)
        if not count:
            return pos
        if count * 2 > len(buf) - pos:  # a tag and a size, one byte each at least
            raise _InvalidFrameError(
                f"{count} tagged fields needs at least {count * 2} bytes, {len(buf) - pos} left"
            )
        walk.spend(count)
        kept: list[tuple[int, bytes | memoryview]] = []
        changed = False
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            size, pos = _uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise _InvalidFrameError("truncated tagged field")
            walker = known.get(tag)
            if walker is None:
                changed = True
            else:
                inner = _Walk(walk.budget)
                if walker(buf, pos, inner) != end:
                    raise _InvalidFrameError(f"tagged field {tag} does not fill its {size} bytes")
                walk.spend(walk.budget - inner.budget)
                edits = inner.edits
                value = _splice(buf, pos, end, edits) if edits else memoryview(buf)[pos:end]
                changed = changed or bool(edits)
                kept.append((tag, value))
            pos = end
        if changed:
            section = bytearray(encode_uvarint(len(kept)))
            for tag, value in kept:
                section += encode_uvarint(tag) + encode_uvarint(len(value))
                section += value
            walk.edits.append((start, pos, bytes(section)))
        return pos

    return tagged_section


def _field_walker(field: Any, flexible: bool, tagged: bool) -> Compiled:
    kind = classify_field(field)
    array_min = 1 if flexible else 4  # a varint count, or an int32 one
    null = None if is_optional(field) else field.name
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        size = _FIXED_SIZES.get(kafka_type)
        scalar: Walker
        if size is not None:
            scalar, scalar_min = _skip(size), size
        elif flexible:
            scalar, scalar_min = _compact(None if kind.is_array else null), 1
        elif kafka_type == "string":
            scalar, scalar_min = _sized(_I16, None if kind.is_array else null), 2
        else:
            scalar, scalar_min = _sized(_I32, None if kind.is_array else null), 4
        if kind.is_array:
            return _array(flexible, size, scalar, scalar_min, null), array_min
        return scalar, scalar_min
    if isinstance(kind, EntityTupleField):
        item, item_min = _entity_walker(kind.type_)
        return _array(flexible, None, item, item_min, null), array_min
    assert isinstance(kind, EntityField)
    entity, entity_min = _entity_walker(kind.type_)
    # kio writes tagged structs without the nullable marker.
    if is_optional(field) and not tagged:
        return _nullable(entity), 1
    return entity, entity_min


@functools.cache
def _entity_walker(entity_type: type[Any]) -> Compiled:
    """Compile a walker for one kio entity: fixed-size runs merged, tags at the end;
    with the entity's smallest encoding (tagged fields may be absent: they add 0)."""
    flexible: bool = entity_type.__flexible__
    steps: list[Walker] = []
    known_tags: dict[int, Walker] = {}
    fixed_run = 0
    min_size = 0
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            known_tags[int(tag)] = _field_walker(field, flexible, tagged=True)[0]
            continue
        size = _FIXED_SIZES.get(field.metadata.get("kafka_type", ""))
        if size is not None and isinstance(classify_field(field), PrimitiveField):
            fixed_run += size
            min_size += size
            continue
        if fixed_run:
            steps.append(_skip(fixed_run))
            fixed_run = 0
        step, step_min = _field_walker(field, flexible, tagged=False)
        steps.append(step)
        min_size += step_min
    if fixed_run:
        steps.append(_skip(fixed_run))
    if flexible:
        steps.append(_tagged_section(known_tags))
        min_size += 1
    compiled = tuple(steps)

    def entity(buf: Buffer, pos: int, walk: _Walk) -> int:
        for step in compiled:
            pos = step(buf, pos, walk)
        return pos

    return entity, min_size


def request_min_size(cls: Any) -> int:
    """The fewest bytes a body of kio request (or nested entity) class ``cls`` takes."""
    return _entity_walker(cls)[1]


_HEADER_TAGS = _tagged_section({})  # request header v2 declares no tagged fields


# --- decoding -------------------------------------------------------------------------


def peek_header(frame: Buffer) -> RequestHeader:
    """Read the request header fields common to header v1 and v2, without the body schema.

    Raises:
        MalformedRequestError: the frame is shorter than the fixed fields, or the client
            id is truncated or not UTF-8 (``.header`` is None then).
    """
    return _peek(frame)[0]


def _peek(frame: Buffer) -> tuple[RequestHeader, int]:
    """Return the header and the position after its client id."""
    if len(frame) < _HEADER.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes has no complete header")
    api_key, api_version, correlation_id, length = _HEADER.unpack_from(frame)
    client_id: str | None = None
    end = _HEADER.size
    if length >= 0:
        end = _HEADER.size + length
        if end > len(frame):
            raise MalformedRequestError("truncated client id")
        try:
            client_id = str(frame[_HEADER.size : end], "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError("client id is not UTF-8") from None
    elif length != -1:
        raise MalformedRequestError("negative client id length")
    return RequestHeader(api_key, api_version, correlation_id, client_id), end


@functools.cache
def _request_schema(api_key: int, api_version: int) -> tuple[bool, Walker, Callable[..., Any]]:
    """Per (key, version): header v2?, body walker, kio body reader."""
    cls: Any = request_class(api_key, api_version)
    return cls.__header_schema__.__flexible__, _entity_walker(cls)[0], entity_reader(cls)


def decode_request(
    frame: Buffer, *, item_budget: int | None = None
) -> tuple[RequestHeader, object]:
    """Decode a request frame (the bytes after the size prefix) into header and kio body.

    ``item_budget`` bounds the array elements and tagged fields the frame may hold
    (None: no bound); decoding costs time in proportion to them, not to the frame's
    size, so a caller that must stay responsive decodes over-budget frames elsewhere.
    The walk stops at the first item past the budget, so an over-budget frame costs
    about as much as a frame of ``item_budget`` items.

    Raises:
        MalformedRequestError: the header or body cannot be parsed.
        UnsupportedVersionError: kio has no schema for the api key and version.
        DecodeBudgetExceededError: the frame holds more than ``item_budget`` items.
    """
    header, pos = _peek(frame)
    try:
        flexible_header, walker, read = _request_schema(header.api_key, header.api_version)
    except UnsupportedVersionError as error:
        error.header = header
        raise
    walk = _Walk(_UNLIMITED if item_budget is None else item_budget)
    try:
        if flexible_header:
            pos = _HEADER_TAGS(frame, pos, walk)  # header tags are all unknown: skipped
            walk.edits.clear()
        walker(frame, pos, walk)
    except _InvalidFrameError as error:
        raise MalformedRequestError(str(error), header) from None
    except _BudgetError:
        raise DecodeBudgetExceededError(
            f"more than {item_budget} items in a {len(frame)}-byte frame", header
        ) from None
    edits = walk.edits
    buffer: Buffer = frame
    if edits:
        buffer, pos = _splice(frame, pos, len(frame), edits), 0
    try:
        body, _ = read(buffer, pos)
    # A parse boundary: whatever kio raises on bad input (DecodeError, ValueError for an
    # unknown error code, ...) means the same thing to the broker.
    except Exception as error:
        raise MalformedRequestError(f"{type(error).__name__}: {error}", header) from None
    return header, body


# --- encoding -------------------------------------------------------------------------


@functools.cache
def _kio_writer(entity_type: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(entity_type)


def _response_header(header: RequestHeader, flexible: bool) -> bytes:
    correlation = _I32.pack(header.correlation_id)
    # ApiVersions responses always use header v0 so that a client can read them whatever
    # version it asked for.
    if flexible and header.api_key != API_VERSIONS_KEY:
        return correlation + _EMPTY_TAGS
    return correlation


def _encode(header: RequestHeader, body: Any) -> Chunks:
    body_type: Any = type(body)
    response_header = _response_header(header, body_type.__flexible__)
    fast = fast_encoder(body_type)
    if fast is not None:
        return fast(body, response_header)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(response_header)
    _kio_writer(body_type)(buffer, body)
    frame = buffer.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    return [frame]


def encode_response(header: RequestHeader, body: object) -> Chunks:
    """Encode a framed response: size prefix, response header and body, as chunks.

    The chunks are meant for ``transport.writelines()``; record bytes of a Fetch
    response are their own chunks, never copied.

    Raises:
        ValueError: ``body`` is not the kio response for the request's key and version.
    """
    body_type: Any = type(body)
    if (
        getattr(body_type, "__api_key__", None) != header.api_key
        or body_type.__version__ != header.api_version
    ):
        raise ValueError(f"{body_type.__name__} does not answer {header}")
    return _encode(header, body)


def encode_error_response(
    header: RequestHeader, error_code: ErrorCode, body: object | None = None
) -> Chunks | None:
    """Best-effort response to a request that could not be decoded, or None.

    Only ApiVersions has a defined answer: a v0 response (Kafka's rule for versions it
    does not support) carrying ``error_code``; pass ``body`` (an ApiVersionsResponse v0)
    to include the supported api keys. For any other api the caller should close the
    connection, since the client cannot be told anything it would understand.
    """
    if header.api_key != API_VERSIONS_KEY:
        return None
    if body is None:
        body = ApiVersionsResponseV0(error_code=error_code, api_keys=())
    return _encode(header, body)
