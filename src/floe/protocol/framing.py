"""Kafka framing: every request and response is an int32 size prefix plus that many bytes.

The size counts the bytes after the prefix. A reader checks it against a maximum before
buffering anything, so a garbage or hostile prefix cannot make the broker reserve memory.
"""

from __future__ import annotations

import struct

from floe.errors import FloeError

__all__ = ["SIZE", "FrameTooLargeError", "read_frame_size"]

SIZE = struct.Struct(">i")
"""The 4-byte big-endian size prefix of every Kafka frame."""


class FrameTooLargeError(FloeError):
    """A frame's size prefix is negative or above the allowed maximum.

    Either way the stream cannot be resynchronised: the connection must be closed.

    Attributes:
        size: the size the prefix announced.
        max_size: the largest size the reader accepts.
    """

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"frame size {size} outside 0..{max_size}")
        self.size = size
        self.max_size = max_size


def read_frame_size(prefix: bytes | bytearray | memoryview, max_size: int) -> int:
    """Return the size announced by the 4-byte prefix at the start of ``prefix``.

    Raises:
        FrameTooLargeError: the size is negative or greater than ``max_size``.
        struct.error: ``prefix`` holds fewer than 4 bytes (a caller bug: wait for 4).
    """
    (size,) = SIZE.unpack_from(prefix)
    if size < 0 or size > max_size:
        raise FrameTooLargeError(size, max_size)
    return int(size)
