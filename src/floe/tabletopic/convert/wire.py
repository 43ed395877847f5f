"""Confluent wire format framing, sans I/O.

A framed payload is ``0x00`` (magic), a big-endian int32 schema id, then for Protobuf a
message-index path (a zigzag-varint count then that many zigzag-varint indexes; a count
of 0 means ``[0]``), then the serialized value.

Invariant: parsing never reads past the payload; malformed framing raises
:class:`FramingError` (a ``ValueError``) with a reason, never ``IndexError``.
"""

from __future__ import annotations

from floe.registry.core.model import SchemaId

MAGIC = 0
HEADER_SIZE = 5
MAX_INDEXES = 64


class FramingError(ValueError):
    """A payload that is not in the Confluent wire format."""


def split(payload: bytes | memoryview) -> tuple[SchemaId, memoryview]:
    """The schema id and the rest of a framed payload.

    Raises:
        FramingError: too short, or the first byte is not the magic byte 0.
    """
    if len(payload) < HEADER_SIZE:
        raise FramingError(f"{len(payload)} bytes are too short for the wire-format header")
    view = memoryview(payload)
    if view[0] != MAGIC:
        raise FramingError(f"unknown magic byte {view[0]} (expected 0)")
    return SchemaId(int.from_bytes(view[1:HEADER_SIZE], "big", signed=True)), view[HEADER_SIZE:]


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, position after it).

    Raises:
        FramingError: truncated or longer than 5 bytes.
    """
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise FramingError("truncated message-index varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
    raise FramingError("message-index varint longer than 5 bytes")


def message_indexes(body: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """The Protobuf message-index path at the start of ``body`` and the message bytes.

    Raises:
        FramingError: a truncated, negative or implausibly long path.
    """
    count, pos = _varint(body, 0)
    if count == 0:
        return (0,), body[pos:]
    if not 0 < count <= MAX_INDEXES:
        raise FramingError(f"message-index count {count} is out of range")
    indexes = []
    for _ in range(count):
        index, pos = _varint(body, pos)
        if index < 0:
            raise FramingError(f"negative message index {index}")
        indexes.append(index)
    return tuple(indexes), body[pos:]


def zigzag(value: int) -> bytes:
    """``value`` as a zigzag varint (how producers frame message indexes)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def frame(schema_id: int, body: bytes, indexes: tuple[int, ...] | None = None) -> bytes:
    """A framed payload (tests, the demo and benchmarks produce with it); ``indexes`` is
    the Protobuf message-index path, ``None`` for Avro and JSON."""
    head = bytes([MAGIC]) + schema_id.to_bytes(4, "big", signed=True)
    if indexes is None:
        return head + body
    if indexes == (0,):
        return head + b"\x00" + body
    return head + zigzag(len(indexes)) + b"".join(zigzag(i) for i in indexes) + body
