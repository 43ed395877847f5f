"""Type stub of the C record walk (src/floe/protocol/_recwalk.c)."""

import mmap

def walk(
    data: bytes | bytearray | memoryview | mmap.mmap, pos: int, end: int, count: int, /
) -> tuple[int, int, list[int]]:
    """Check the framing of ``count`` v2 records in ``data[pos:end]``; returns the lowest
    and highest timestamp delta and the indexes of records with a non-UTF-8 header key.

    Raises:
        ValueError: a framing error (the message says which record and why).
        IndexError: a field runs past the data.
    """
