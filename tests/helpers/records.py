"""The one record type every client helper produces and consumes, plus sample data."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Record:
    """One record as produced (partition: target, None = partitioner) or as read back.

    Acknowledged records keep the producer's own timestamp (None: the client chose one).
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None
    partition: int | None = None
    offset: int | None = field(default=None, compare=False)


def assert_same_records(got: Sequence[Record], expected: Sequence[Record], who: str = "") -> None:
    """Keys, values and headers byte for byte, in order; timestamps and offsets where known."""
    assert len(got) == len(expected), f"{who}: {len(got)} records, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert (g.key, g.value, g.headers) == (e.key, e.value, e.headers), f"{who} #{i}: {g} != {e}"
        if e.timestamp is not None:
            assert g.timestamp == e.timestamp, f"{who} #{i}: timestamp {g} != {e}"
        if e.offset is not None:
            assert (g.partition, g.offset) == (e.partition, e.offset), f"{who} #{i}: {g} != {e}"


def recent_ts() -> int:
    """A CreateTime one hour ago: old enough to be distinct, young enough for retention."""
    return (int(time.time()) - 3600) * 1000


def sample_records(
    n: int,
    *,
    text: bool = False,
    partition: int | None = 0,
    base_ts: int | None = -1,
    null_header_values: bool = True,
) -> list[Record]:
    """Records covering keys, null keys, tombstones, empty values and headers.

    ``text``: only kcat-compatible content (UTF-8, one header set, no timestamps, no null
    keys). Otherwise binary keys and values, per-record headers (including empty and null
    header values and repeated header names) and CreateTime timestamps ``base_ts + i``
    seconds (-1: :func:`recent_ts`; None: the client's clock). kafka-python cannot send
    null header values (``null_header_values=False``).
    """
    if base_ts == -1:
        base_ts = recent_ts()
    out = []
    for i in range(n):
        if text:
            out.append(
                Record(
                    f"key-{i % 7}".encode(),
                    None if i % 10 == 9 else f"value {i} é ".encode() * (i % 5 + 1),
                    (("source", b"kcat"), ("empty", b"")),
                    None,
                    partition,
                )
            )
            continue
        key = None if i % 10 == 3 else bytes([i % 256, 0, 255]) + b"key%d" % (i % 7)
        value = (
            None
            if i % 10 == 9
            else (b"" if i % 10 == 5 else bytes(range(256))[i % 200 :] + b"v%d" % i * (i % 9))
        )
        headers: tuple[Header, ...] = ()
        if i % 3 == 0:
            headers = (("trace", b"\x00\x01" + str(i).encode()), ("dup", b"a"), ("dup", b""))
        elif i % 3 == 1 and i % 2 == 0 and null_header_values:
            headers = (("null-value", None),)
        ts = None if base_ts is None else base_ts + i * 1000
        out.append(Record(key, value, headers, ts, partition))
    return out
