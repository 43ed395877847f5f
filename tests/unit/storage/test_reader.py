"""The read-only segment reader: every offset of a range is accounted for, as records,
a skipped control or aborted batch, a bad batch or a missing span."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest
from localstore_helpers import StoreFactory, T, append

from floe.protocol.records import Record, encode_batch
from floe.storage.local.reader import (
    Aborted,
    BadBatch,
    Chunk,
    Records,
    partition_dir,
    scan_range,
)
from floe.types import Offset, PartitionId


def batch(base: int, n: int, **kw: object) -> bytes:
    recs = [Record(base + i, 1000 + i, b"k", b"v%d" % (base + i)) for i in range(n)]
    return encode_batch(recs, base_offset=base, **kw)  # type: ignore[arg-type]


def patched(data: bytes, at: int, new: bytes) -> bytes:
    """``data`` with ``new`` written at ``at`` and the CRC recomputed (a batch that is
    intact on disk but wrong inside)."""
    out = bytearray(data)
    out[at : at + len(new)] = new
    out[17:21] = crc32c.crc32c(memoryview(out)[21:]).to_bytes(4, "big")
    return bytes(out)


def write_segments(tmp_path: Path, *segments: tuple[int, bytes]) -> Path:
    d = partition_dir(tmp_path, "t", 0)
    d.mkdir(parents=True)
    for base, data in segments:
        (d / f"{base:020d}.log").write_bytes(data)
    return tmp_path


def write_log(tmp_path: Path) -> Path:
    first = (
        batch(0, 3)
        + batch(3, 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        + batch(5, 1, producer_id=7, producer_epoch=0, transactional=True, control=True)
        + batch(6, 2)
    )
    return write_segments(tmp_path, (0, first), (8, batch(8, 4) + b"\x00\x00\x00"))  # torn tail


def offsets(logs: Path, start: int, end: int, aborted: tuple[Aborted, ...] = ()) -> list[int]:
    chunks = scan_range(logs, "t", 0, start, end, aborted=aborted)
    return [r.offset for c in chunks if isinstance(c, Records) for r in c.records]


Summary = tuple[str, int, int]


def summary(chunks: list[Chunk]) -> list[Summary]:
    """("rec", first, last) per Records chunk, ("bad" | "missing", first, last) else."""
    out: list[Summary] = []
    for c in chunks:
        if isinstance(c, Records):
            offs = [r.offset for r in c.records]
            assert offs == list(range(offs[0], offs[-1] + 1)), "a Records chunk has no holes"
            out.append(("rec", offs[0], offs[-1]))
        elif isinstance(c, BadBatch):
            assert "\n" not in c.reason
            out.append(("bad", c.first, c.last))
        else:
            out.append(("missing", c.first, c.last))
    return out


def scanned(logs: Path, start: int, end: int, **kw: object) -> list[Summary]:
    return summary(list(scan_range(logs, "t", 0, start, end, **kw)))  # type: ignore[arg-type]


def test_records_across_segments(tmp_path: Path) -> None:
    logs = write_log(tmp_path)
    assert offsets(logs, 0, 12) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert offsets(logs, 1, 9) == [1, 2, 3, 4, 6, 7, 8]
    assert offsets(logs, 9, 11) == [9, 10]
    assert offsets(logs, 0, 12, (Aborted(7, 3, 5),)) == [0, 1, 2, 6, 7, 8, 9, 10, 11]


def test_scan_range_skips_control_and_aborted_batches(tmp_path: Path) -> None:
    logs = write_log(tmp_path)
    assert scanned(logs, 0, 12) == [
        ("rec", 0, 2), ("rec", 3, 4), ("rec", 6, 7), ("rec", 8, 11),
    ]  # fmt: skip
    assert scanned(logs, 1, 9, aborted=(Aborted(7, 3, 5),)) == [
        ("rec", 1, 2), ("rec", 6, 7), ("rec", 8, 8),
    ]  # fmt: skip


def test_scan_range_beyond_the_log_end_is_missing_not_silent(tmp_path: Path) -> None:
    logs = write_log(tmp_path)
    assert scanned(logs, 12, 20) == [("missing", 12, 19)]
    assert scanned(logs, 10, 20) == [("rec", 10, 11), ("missing", 12, 19)]


def test_scan_range_reports_deleted_segments_and_partial_batches(tmp_path: Path) -> None:
    torn = batch(12, 3)[:-5]  # the last segment ends with half a batch
    logs = write_segments(tmp_path, (8, batch(8, 4)), (12, torn))
    assert scanned(logs, 0, 15) == [("missing", 0, 7), ("rec", 8, 11), ("missing", 12, 14)]


def test_scan_range_reports_compacted_holes_coalesced(tmp_path: Path) -> None:
    recs = [Record(0, 1, b"a", b"0"), Record(2, 1, b"b", b"2")]
    holed = encode_batch(recs, base_offset=0, last_offset_delta=3)  # 1 and 3 compacted
    logs = write_segments(tmp_path, (0, holed + batch(6, 2)))  # batch 4..5 gone
    assert scanned(logs, 0, 8) == [
        ("rec", 0, 0), ("missing", 1, 1), ("rec", 2, 2), ("missing", 3, 5), ("rec", 6, 7),
    ]  # fmt: skip
    assert scanned(logs, 2, 7) == [("rec", 2, 2), ("missing", 3, 5), ("rec", 6, 6)]


def bad_batches() -> dict[str, bytes]:
    plain = batch(3, 2)
    headers = encode_batch(
        [Record(3, 1, b"k", b"v", (("é", b"x"),)), Record(4, 1, b"k", b"v")], base_offset=3
    )
    at = headers.index("é".encode())
    return {
        "crc": plain[:-1] + bytes([plain[-1] ^ 1]),
        "header key": patched(headers, at, b"\xff\xfe"),
        "codec": patched(plain, 22, bytes([plain[22] | 5])),
        "decompress": patched(plain, 22, bytes([plain[22] | 1])),
        "framing": patched(plain, 57, (3).to_bytes(4, "big")),
    }


@pytest.mark.parametrize("kind", sorted(bad_batches()))
def test_scan_range_reports_undecodable_batches(tmp_path: Path, kind: str) -> None:
    logs = write_segments(tmp_path, (0, batch(0, 3) + bad_batches()[kind] + batch(5, 2)))
    chunks = list(scan_range(logs, "t", 0, 1, 7))
    assert summary(chunks) == [("rec", 1, 2), ("bad", 3, 4), ("rec", 5, 6)]
    bad = chunks[1]
    assert isinstance(bad, BadBatch) and bad.reason
    assert scanned(logs, 4, 6) == [("bad", 4, 4), ("rec", 5, 5)]  # clipped to the range


def test_scan_range_without_crc_check_reads_a_damaged_value(tmp_path: Path) -> None:
    logs = write_segments(tmp_path, (0, bad_batches()["crc"]))
    assert scanned(logs, 3, 5, verify_crc=False) == [("rec", 3, 4)]


def test_an_unreadable_header_spoils_the_rest_of_its_segment(tmp_path: Path) -> None:
    garbage = b"\xff" * 80
    logs = write_segments(tmp_path, (0, batch(0, 3) + garbage + batch(5, 2)), (8, batch(8, 2)))
    assert scanned(logs, 0, 10) == [("rec", 0, 2), ("bad", 3, 7), ("rec", 8, 9)]
    # in the last segment the rest of the range is unreadable
    logs = write_segments(tmp_path / "last", (0, batch(0, 3) + garbage))
    assert scanned(logs, 1, 9) == [("rec", 1, 2), ("bad", 3, 8)]
    # a header of another format: its length cannot be trusted either
    magic = batch(3, 2)[:16] + b"\x01" + batch(3, 2)[17:]
    logs = write_segments(tmp_path / "magic", (0, batch(0, 3) + magic + batch(5, 2)), (7, b""))
    assert scanned(logs, 0, 8) == [("rec", 0, 2), ("bad", 3, 6), ("missing", 7, 7)]
    # a length that overruns a sealed segment is damage, not a torn tail
    cut = batch(3, 2)[:-4]
    logs = write_segments(tmp_path / "sealed", (0, batch(0, 3) + cut), (5, batch(5, 1)))
    assert scanned(logs, 0, 6) == [("rec", 0, 2), ("bad", 3, 4), ("rec", 5, 5)]


def test_a_segment_deleted_while_scanning_becomes_missing(tmp_path: Path) -> None:
    logs = write_segments(tmp_path, (0, batch(0, 4)), (4, batch(4, 4)), (8, batch(8, 4)))
    chunks = scan_range(logs, "t", 0, 2, 12)
    first = next(chunks)  # segments listed, the first one read
    (partition_dir(logs, "t", 0) / f"{4:020d}.log").unlink()  # retention, meanwhile
    assert summary([first, *chunks]) == [("rec", 2, 3), ("missing", 4, 7), ("rec", 8, 11)]


def test_a_missing_partition_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        list(scan_range(tmp_path, "t", 0, 0, 5))


def test_offsets_below_the_log_start_are_missing(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    append(plog, batch(0, 10))
    plog.delete_records(Offset(4))  # mid-segment: the bytes stay, the offsets are gone
    logs = Path(store.log_dir())
    assert scanned(logs, 0, 10) == [("missing", 0, 3), ("rec", 4, 9)]
