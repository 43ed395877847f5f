"""Property: over any log (compacted holes, removed batches, transactions, control
batches, damaged batches, deleted segments, sparse or torn indexes), ``scan_range``
accounts for every offset of the range exactly once, in offset order."""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.protocol.records import Record, encode_batch
from floe.storage.local.reader import Aborted, BadBatch, Missing, Records, partition_dir, scan_range

KINDS = ("data", "data", "txn", "aborted", "control", "corrupt", "removed")

batch_spec = st.tuples(
    st.integers(1, 4),  # offsets spanned
    st.sampled_from(KINDS),
    st.integers(0, 15),  # records removed by compaction (bit mask, data batches)
    st.booleans(),  # starts a new segment
    st.sampled_from([0, 1, 4]),  # compression
)


@dataclass
class Segment:
    base: int
    data: bytearray = field(default_factory=bytearray)
    starts: list[tuple[int, int]] = field(default_factory=list)  # (offset, position)


@dataclass
class Model:
    """The log as written, and what the reader must say about each offset."""

    segments: list[Segment]
    expected: dict[int, str]  # offset -> rec | skip | bad (absent: missing)
    values: dict[int, bytes]
    aborted: list[Aborted]


def build(specs: list[tuple[int, str, int, bool, int]]) -> Model:
    segments = [Segment(0)]
    expected: dict[int, str] = {}
    values: dict[int, bytes] = {}
    aborted: list[Aborted] = []
    offset = 0
    for spec_span, kind, holes, new_segment, compression in specs:
        span = 1 if kind == "control" else spec_span
        if new_segment and (segments[-1].data or segments[-1].base < offset):
            segments.append(Segment(offset))
        seg = segments[-1]
        base, offset = offset, offset + span
        if kind == "removed":
            continue
        present = list(range(base, offset))
        if kind == "data":
            present = [o for o in present if not holes >> (o - base) & 1] or [offset - 1]
        recs = [Record(o, 1000 + o, b"k", b"v%d" % o) for o in present]
        data = encode_batch(
            recs, base_offset=base, compression=compression,
            producer_id=-1 if kind in ("data", "corrupt") else 1 + (kind == "aborted"),
            producer_epoch=0, transactional=kind in ("txn", "aborted", "control"),
            control=kind == "control", last_offset_delta=span - 1,
        )  # fmt: skip
        if kind == "corrupt":
            data = data[:-1] + bytes([data[-1] ^ 0x40])
        seg.starts.append((base, len(seg.data)))
        seg.data += data
        if kind in ("aborted", "control"):
            expected.update(dict.fromkeys(range(base, offset), "skip"))
            if kind == "aborted":
                aborted.append(Aborted(2, base, offset - 1))
        elif kind == "corrupt":
            expected.update(dict.fromkeys(range(base, offset), "bad"))
        else:
            expected.update(dict.fromkeys(present, "rec"))
            values.update((r.offset, r.value or b"") for r in recs)
    return Model(segments, expected, values, aborted)


def write(model: Model, root: Path, deleted: set[int], index_every: int, torn: bool) -> None:
    d = partition_dir(root, "t", 0)
    d.mkdir(parents=True)
    for i, seg in enumerate(model.segments):
        following = model.segments[i + 1].base if i + 1 < len(model.segments) else None
        if i in deleted:
            for o in [
                o for o in model.expected if o >= seg.base and (following is None or o < following)
            ]:
                del model.expected[o]
            continue
        (d / f"{seg.base:020d}.log").write_bytes(seg.data)
        if index_every:
            entries = seg.starts[1::index_every]
            index = b"".join(struct.pack(">ii", o - seg.base, p) for o, p in entries)
            (d / f"{seg.base:020d}.index").write_bytes(index + (b"\x00\x01" if torn else b""))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(batch_spec, min_size=1, max_size=30),
    deleted=st.sets(st.integers(0, 8), max_size=2),
    index_every=st.integers(0, 3),
    torn=st.booleans(),
    bounds=st.tuples(st.integers(0, 130), st.integers(0, 130)),
)
def test_every_offset_is_accounted_once_in_order(
    specs: list[tuple[int, str, int, bool, int]],
    deleted: set[int],
    index_every: int,
    torn: bool,
    bounds: tuple[int, int],
) -> None:
    start, end = sorted(bounds)
    model = build(specs)
    with tempfile.TemporaryDirectory() as tmp:
        write(model, Path(tmp), deleted, index_every, torn)
        chunks = list(scan_range(Path(tmp), "t", 0, start, end, aborted=model.aborted))
    seen: list[tuple[int, str]] = []
    for prev, chunk in zip([None, *chunks], chunks, strict=False):
        if isinstance(chunk, Records):
            for r in chunk.records:
                assert r.value == model.values[r.offset]
                seen.append((r.offset, "rec"))
        elif isinstance(chunk, BadBatch):
            seen += [(o, "bad") for o in range(chunk.first, chunk.last + 1)]
        else:
            assert chunk.first <= chunk.last
            if isinstance(prev, Missing):
                assert prev.last + 1 < chunk.first, "adjacent missing offsets coalesce"
            seen += [(o, "missing") for o in range(chunk.first, chunk.last + 1)]
    want = [(o, model.expected.get(o, "missing")) for o in range(start, end)]
    assert seen == [(o, kind) for o, kind in want if kind != "skip"]
