"""A model of one partition's log for the range-reader property tests: random batches
(data with compacted holes, committed and aborted transactions, control batches, damaged
batches, batches compacted away, segment rolls, codecs), encoded as the log holds them,
with what a range reader must say about every offset; and the check of what it said.

Used by the segment reader's test (the model written as segment files) and the
fetch-based reader's test (the model served as a broker answers Fetch requests).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hypothesis import strategies as st

from floe.protocol.ranges import Aborted, BadBatch, Chunk, Missing, Records
from floe.protocol.records import Record, encode_batch

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
    log_end: int


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
    return Model(segments, expected, values, aborted, offset)


def check_accounted(chunks: Iterable[Chunk], model: Model, start: int, end: int) -> None:
    """Every offset of ``[start, end)`` accounted for once, in order, as the model says
    (skipped batches absent, adjacent missing offsets coalesced, record values intact)."""
    seen: list[tuple[int, str]] = []
    prev: Chunk | None = None
    for chunk in chunks:
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
        prev = chunk
    want = [(o, model.expected.get(o, "missing")) for o in range(start, end)]
    assert seen == [(o, kind) for o, kind in want if kind != "skip"]
