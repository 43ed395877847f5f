"""Type stub of the C record walks (src/floe/protocol/_recwalk.c)."""

import mmap
from typing import TypeVar

_R = TypeVar("_R")

def walk(
    data: bytes | bytearray | memoryview | mmap.mmap, pos: int, end: int, count: int, /
) -> tuple[int, int, list[int]]:
    """Check the framing of ``count`` v2 records in ``data[pos:end]``; returns the lowest
    and highest timestamp delta and the indexes of records with a non-UTF-8 header key.

    Raises:
        ValueError: a framing error (the message says which record and why).
        IndexError: a field runs past the data.
    """

def decode(
    data: bytes | bytearray | memoryview | mmap.mmap,
    start: int,
    stop: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None,
    record_type: type[_R],
    /,
) -> list[_R]:
    """The ``count`` v2 records of ``data[start:stop]`` (slice bounds), each a
    ``record_type(offset, timestamp, key, value, headers)`` built by filling its
    ``__slots__`` (its ``__init__`` is not called). Offsets are ``base_offset`` plus the
    delta; timestamps ``append_time``, or ``base_timestamp`` plus the delta when None.

    Raises:
        ValueError: malformed records (the message is decode_batch's).
        TypeError: ``record_type`` lacks one of those slots.
    """
