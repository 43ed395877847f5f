"""Property: over any log (compacted holes, removed batches, transactions, control
batches, damaged batches, deleted segments, sparse or torn indexes), ``scan_range``
accounts for every offset of the range exactly once, in offset order."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.storage.local.reader import partition_dir, scan_range
from helpers.log_model import Model, batch_spec, build, check_accounted


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
    check_accounted(chunks, model, start, end)
