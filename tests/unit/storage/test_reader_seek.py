"""The reader starts a range at the position the segment's offset index gives, and
falls back to the segment start when the index cannot be trusted."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from localstore_helpers import StoreFactory, T, append, batch, records

from floe.protocol.batch import read_header
from floe.storage.local import LocalPartitionLog
from floe.storage.local.reader import BadBatch, Records, index_position, scan_range
from floe.types import PartitionId


def big_segment(open_store: StoreFactory) -> tuple[LocalPartitionLog, Path]:
    store = open_store()
    store.create_topic(T, 1, {"segment.bytes": str(1 << 30), "index.interval.bytes": "500"})
    plog = store.partition(T, PartitionId(0))
    for _ in range(200):
        append(plog, batch(records(5, size=100)))
    return plog, Path(store.log_dir())


def read_offsets(logs: Path, start: int, end: int) -> list[int]:
    chunks = list(scan_range(logs, T, 0, start, end))
    assert all(isinstance(c, Records) for c in chunks)
    return [r.offset for c in chunks if isinstance(c, Records) for r in c.records]


def position(plog: LocalPartitionLog, offset: int) -> int:
    seg = plog.segments[0]
    with open(seg.path, "rb") as f:
        return index_position(f.fileno(), seg.offset_index.path, seg.base_offset, offset)


def test_a_late_offset_is_read_from_its_indexed_position(open_store: StoreFactory) -> None:
    plog, logs = big_segment(open_store)
    seg = plog.segments[0]
    pos = position(plog, 900)
    assert pos == seg.offset_index.lookup(900) > seg.size * 0.8
    header = read_header(os.pread(seg.fd, 61, pos))
    assert header.base_offset <= 900
    # damage the first batch: a read from byte 0 would meet it, a seek does not
    with open(seg.path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 4)  # its length field
    assert read_offsets(logs, 900, 1000) == list(range(900, 1000))
    assert isinstance(next(scan_range(logs, T, 0, 0, 10)), BadBatch)


@pytest.mark.parametrize("damage", ["torn entry", "missing", "empty", "garbage", "shifted"])
def test_an_untrustworthy_index_is_tolerated(open_store: StoreFactory, damage: str) -> None:
    plog, logs = big_segment(open_store)
    path = plog.segments[0].offset_index.path
    good = position(plog, 900)
    data = path.read_bytes()
    expect = 0
    if damage == "torn entry":
        path.write_bytes(data + b"\x00\x00\x01")  # the broker is appending an entry
        expect = good
    elif damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"\x00\x00\x00\x01\x7f\xff\xff\xff" * 10)
    else:  # positions that are not batch starts (a stale index of a rewritten file)
        entries = struct.iter_unpack(">ii", data)
        path.write_bytes(b"".join(struct.pack(">ii", rel, pos + 7) for rel, pos in entries))
    assert position(plog, 900) == expect
    assert read_offsets(logs, 900, 1000) == list(range(900, 1000))
