"""``end_for_bytes``: where a bounded read of a range should stop, from the indexes."""

from __future__ import annotations

import random

import pytest
from localstore_helpers import StoreFactory, T, append, batch, records

from floe.storage.local import LocalPartitionLog
from floe.types import Offset, PartitionId

Batch = tuple[int, int, int]  # base offset, next offset, bytes


def build(open_store: StoreFactory, sizes: list[tuple[int, int]], **configs: str) -> tuple[
    LocalPartitionLog, list[Batch]
]:  # fmt: skip
    store = open_store()
    store.create_topic(T, 1, configs)
    plog = store.partition(T, PartitionId(0))
    out: list[Batch] = []
    for n, size in sizes:
        data = batch(records(n, size=size))
        r = append(plog, data)
        out.append((r.base_offset, r.last_offset + 1, len(data)))
    return plog, out


def expected(batches: list[Batch], start: int, end: int, max_bytes: int) -> int:
    """The definition, by brute force over every batch."""
    spanned = [b for b in batches if b[1] > start and b[0] < end]
    best, total = min(spanned[0][1], end), 0
    for _, nxt, size in spanned:
        total += size
        if total > max_bytes:
            return best
        best = min(nxt, end)
    return end


def test_uniform_batches_across_segments(open_store: StoreFactory) -> None:
    plog, batches = build(open_store, [(3, 100)] * 12, **{"segment.bytes": "1500"})
    size = batches[0][2]
    assert len({b[2] for b in batches}) == 1
    assert len(plog.segments) > 2
    seg_end = plog.segments[0].next_offset
    end = Offset(36)
    assert plog.end_for_bytes(Offset(0), end, 2 * size) == 6
    assert plog.end_for_bytes(Offset(0), end, 3 * size - 1) == 6
    assert plog.end_for_bytes(Offset(4), end, 2 * size) == 9  # from the batch holding 4
    assert plog.end_for_bytes(Offset(seg_end - 3), end, 3 * size) == seg_end + 6  # crosses
    assert plog.end_for_bytes(Offset(0), end, 10) == 3  # one batch larger than the cap
    assert plog.end_for_bytes(Offset(7), end, 1) == 9
    assert plog.end_for_bytes(Offset(0), end, 1 << 30) == 36
    assert plog.end_for_bytes(Offset(0), Offset(5), 1 << 30) == 5
    assert plog.end_for_bytes(Offset(1), Offset(2), 1) == 2  # never beyond end
    with pytest.raises(ValueError, match="empty"):
        plog.end_for_bytes(Offset(3), Offset(3), 100)


@pytest.mark.parametrize("interval", ["0", "300", "100000000"])
def test_matches_the_definition_on_mixed_batches(open_store: StoreFactory, interval: str) -> None:
    rng = random.Random(int(interval))
    sizes = [(rng.randint(1, 4), rng.choice([10, 50, 400, 2000])) for _ in range(60)]
    configs = {"segment.bytes": "3000", "index.interval.bytes": interval}
    plog, batches = build(open_store, sizes, **configs)
    log_end = plog.log_end_offset
    for _ in range(400):
        start = rng.randrange(log_end)
        end = rng.randint(start + 1, log_end)
        max_bytes = rng.choice([0, 100, 1000, 3000, 5000, 20000])
        got = plog.end_for_bytes(Offset(start), Offset(end), max_bytes)
        assert got == expected(batches, start, end, max_bytes), (start, end, max_bytes)


def test_offsets_below_the_log_start_cost_nothing(open_store: StoreFactory) -> None:
    plog, batches = build(open_store, [(3, 100)] * 12, **{"segment.bytes": "1500"})
    plog.delete_records(Offset(plog.segments[1].base_offset))
    first = plog.log_start_offset
    size = batches[0][2]
    assert plog.end_for_bytes(Offset(0), Offset(36), 2 * size) == first + 6
