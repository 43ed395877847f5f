"""The read-only segment reader skips control batches and aborted transactions."""

from __future__ import annotations

from pathlib import Path

from floe.protocol.records import Record, encode_batch
from floe.storage.local.reader import Aborted, partition_dir, read_range


def batch(base: int, n: int, **kw: object) -> bytes:
    recs = [Record(base + i, 1000 + i, b"k", b"v%d" % (base + i)) for i in range(n)]
    return encode_batch(recs, base_offset=base, **kw)  # type: ignore[arg-type]


def write_log(tmp_path: Path) -> Path:
    d = partition_dir(tmp_path, "t", 0)
    d.mkdir(parents=True)
    first = (
        batch(0, 3)
        + batch(3, 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        + batch(5, 1, producer_id=7, producer_epoch=0, transactional=True, control=True)
        + batch(6, 2)
    )
    (d / f"{0:020d}.log").write_bytes(first)
    (d / f"{8:020d}.log").write_bytes(batch(8, 4) + b"\x00\x00\x00")  # a torn tail
    return tmp_path


def offsets(logs: Path, start: int, end: int, aborted: tuple[Aborted, ...] = ()) -> list[int]:
    return [
        r.offset for _, recs in read_range(logs, "t", 0, start, end, aborted=aborted) for r in recs
    ]


def test_read_ranges_across_segments(tmp_path: Path) -> None:
    logs = write_log(tmp_path)
    assert offsets(logs, 0, 12) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert offsets(logs, 1, 9) == [1, 2, 3, 4, 6, 7, 8]
    assert offsets(logs, 9, 11) == [9, 10]
    assert offsets(logs, 0, 12, (Aborted(7, 3, 5),)) == [0, 1, 2, 6, 7, 8, 9, 10, 11]
    assert offsets(logs, 12, 20) == []
