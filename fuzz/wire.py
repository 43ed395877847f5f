"""Kafka wire primitives the fuzzer writes by hand: varints, request headers, frames.

Hand-written because the fuzzer must be able to write what a correct encoder never
would (overlong varints, lying lengths, unknown tags) and because kio's writer costs
microseconds per call that a million frames cannot afford. Nothing here does I/O.
"""

from __future__ import annotations

import struct

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
HEADER = struct.Struct(">hhih")
"""api key, api version, correlation id, client id length: request header v1 and v2."""

INT_LIMITS = {1: (-(2**7), 2**7 - 1), 2: (-(2**15), 2**15 - 1), 4: (-(2**31), 2**31 - 1)}
INT_LIMITS[8] = (-(2**63), 2**63 - 1)


_ONE_BYTE = [bytes((i,)) for i in range(128)]


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as Kafka's unsigned varint (any non-negative size)."""
    if 0 <= value < 128:
        return _ONE_BYTE[value]  # lengths and counts almost always are
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zig-zag signed varint (record fields), 64-bit."""
    if -64 <= value < 64:
        return _ONE_BYTE[(value << 1) ^ (value >> 63)]
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def overlong_uvarint(value: int, width: int) -> bytes:
    """``value`` spread over ``width`` bytes (continuation bits on padding zeros).

    A canonical decoder accepts up to 5 (or 10) bytes; wider is a protocol error.
    """
    out = bytearray()
    for i in range(width):
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if i < width - 1 else 0))
    return bytes(out)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; returns (value, position after it).

    Raises:
        ValueError: truncated, or longer than 10 bytes.
    """
    value = shift = 0
    for _ in range(10):
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def string(value: bytes | None, flexible: bool) -> bytes:
    """A (nullable) Kafka string: int16 length, or compact (uvarint length + 1)."""
    if flexible:
        return b"\x00" if value is None else uvarint(len(value) + 1) + value
    return I16.pack(-1) if value is None else I16.pack(len(value)) + value


def bytes_field(value: bytes | None, flexible: bool) -> bytes:
    """(Nullable) Kafka bytes: int32 length, or compact (uvarint length + 1)."""
    if flexible:
        return b"\x00" if value is None else uvarint(len(value) + 1) + value
    return I32.pack(-1) if value is None else I32.pack(len(value)) + value


def array_len(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else I32.pack(count)


def request_header(
    api_key: int, version: int, correlation_id: int, client_id: bytes, flexible: bool
) -> bytes:
    """Request header v1 (``flexible=False``) or v2 (with an empty tagged section)."""
    head = HEADER.pack(api_key, version, correlation_id, len(client_id)) + client_id
    return head + b"\x00" if flexible else head


def frame(payload: bytes) -> bytes:
    """Size-prefixed frame."""
    return I32.pack(len(payload)) + payload


def frame_correlation_id(framed: bytes) -> int | None:
    """The correlation id inside a framed request, or None when it is too short."""
    if len(framed) < 12:
        return None
    return int(I32.unpack_from(framed, 8)[0])


def frame_api(framed: bytes) -> tuple[int, int]:
    """(api key, api version) of a framed request, (-1, -1) when too short."""
    if len(framed) < 8:
        return -1, -1
    key, version = struct.unpack_from(">hh", framed, 4)
    return int(key), int(version)
