"""Append, read, segment rolls, indexes, KIP-74 limits and timestamp lookups."""

from __future__ import annotations

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, batch, kv, records

from floe.errors import InvalidRecordError
from floe.protocol.batch import scan
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.storage.interface import OffsetOutOfRangeError
from floe.types import Offset, PartitionId


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for h in scan(data) for r in decode_batch(data, h)]


def test_append_assigns_dense_offsets_and_reads_back(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    r1 = append(plog, batch(records(3)))
    r2 = append(plog, batch(records(2)), batch(records(4)))
    assert (r1.base_offset, r1.last_offset) == (0, 2)
    assert (r2.base_offset, r2.last_offset) == (3, 8)
    assert r1.log_append_time == -1
    assert plog.log_end_offset == plog.high_watermark == 9
    data = plog.read(Offset(0), 1 << 20)
    assert offsets_of(data) == list(range(9))
    assert plog.read(Offset(9), 1 << 20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(Offset(10), 1 << 20)


def test_read_across_segment_rolls_uses_index(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"segment.bytes": "2000", "index.interval.bytes": "100"})
    plog = store.partition(T, PartitionId(0))
    for _ in range(100):
        append(plog, batch(records(2, size=50)))
    assert len(plog.segments) > 5
    assert len(plog.segments[0].offset_index) > 0
    assert plog.size_bytes == sum(s.size for s in plog.segments)
    for offset in range(0, 200, 7):
        data = plog.read(Offset(offset), 1 << 20)
        first = scan(data)[0]
        assert first.base_offset <= offset <= first.last_offset
    everything = []
    pos = 0
    while pos < 200:
        data = plog.read(Offset(pos), 1 << 20)
        got = offsets_of(data)
        everything += [o for o in got if o >= pos]
        pos = scan(data)[-1].next_offset
    assert everything == list(range(200))


def test_kip74_read_limits(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    big = batch(records(1, size=5000))
    small = batch(records(1, size=10))
    append(plog, big)
    append(plog, small)
    append(plog, small)
    assert len(plog.read(Offset(0), 100)) == len(big)  # at least one batch
    assert plog.read(Offset(0), 100, min_one=False) == b""
    assert len(plog.read(Offset(0), len(big) + len(small) + 10)) == len(big) + len(small)
    assert len(plog.read(Offset(1), 1 << 20)) == 2 * len(small)


def test_log_append_time_stamps_batches(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"message.timestamp.type": "LogAppendTime"})
    plog = store.partition(T, PartitionId(0))
    result = append(plog, batch(records(3, start_ts=5)), now_ms=NOW + 123)
    assert result.log_append_time == NOW + 123
    data = plog.read(Offset(0), 1 << 20)
    (h,) = scan(data)  # CRC still valid
    assert {r.timestamp for r in decode_batch(data, h)} == {NOW + 123}
    assert plog.offset_for_timestamp(NOW + 100) == (0, NOW + 123)


def test_offset_for_timestamp_and_max_timestamp(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"segment.bytes": "1000", "index.interval.bytes": "0"})
    plog = store.partition(T, PartitionId(0))
    assert plog.max_timestamp() is None
    assert plog.offset_for_timestamp(0) is None
    for i in range(50):  # timestamps 1000 + 10*offset, with one out-of-order record
        recs = [Record(j, 1000 + 10 * (2 * i + j), b"k", b"v") for j in range(2)]
        if i == 20:
            recs[1] = Record(1, 99_999, b"k", b"v")
        append(plog, encode_batch(recs, base_offset=0))
    assert plog.offset_for_timestamp(0) == (0, 1000)
    assert plog.offset_for_timestamp(1005) == (1, 1010)
    assert plog.offset_for_timestamp(1000 + 10 * 70) == (41, 99_999)
    assert plog.offset_for_timestamp(1000 + 10 * 71) == (41, 99_999)
    assert plog.offset_for_timestamp(1000 + 10 * 99) == (41, 99_999)
    assert plog.offset_for_timestamp(100_000) is None
    assert plog.max_timestamp() == (41, 99_999)


def test_roll_by_time(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"segment.ms": "1000"})
    plog = store.partition(T, PartitionId(0))
    append(plog, kv(b"a", b"1"), now_ms=NOW)
    append(plog, kv(b"a", b"1"), now_ms=NOW + 500)
    assert len(plog.segments) == 1
    append(plog, kv(b"a", b"1"), now_ms=NOW + 1000)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    store.run_maintenance(NOW + 5000)
    assert [s.base_offset for s in plog.segments] == [0, 2, 3]
    store.run_maintenance(NOW + 10000)  # an empty active segment is not rolled
    assert len(plog.segments) == 3


def test_null_key_rejected_on_compacted_topic(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"cleanup.policy": "compact"})
    plog = store.partition(T, PartitionId(0))
    append(plog, kv(b"a", b"1"))
    with pytest.raises(InvalidRecordError):
        append(plog, batch(records(2, key=None), compression=1))
    assert plog.log_end_offset == 1
    store.create_topic(T.__class__("plain"), 1, {})
    append(store.partition(T.__class__("plain"), PartitionId(0)), batch(records(2, key=None)))


def test_timestamp_lookups_respect_log_start(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    append(plog, batch(records(4, start_ts=100)))
    append(plog, batch(records(2, start_ts=50)))
    plog.delete_records(Offset(2))
    assert plog.offset_for_timestamp(0) == (2, 102)
    assert plog.max_timestamp() == (3, 103)


def test_read_returns_the_longest_whole_batch_prefix(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"index.interval.bytes": "150"})
    plog = store.partition(T, PartitionId(0))
    sizes = []
    for i in range(60):
        b = batch(records(1 + i % 3, size=i * 7 % 90))
        append(plog, b)
        sizes.append(len(b))
    everything = plog.read(Offset(0), 1 << 20)
    assert len(everything) == sum(sizes)
    for start_batch in (0, 7, 31):
        start = scan(everything)[start_batch]
        for max_bytes in range(1, 3000, 37):
            data = plog.read(Offset(start.base_offset), max_bytes)
            expected, total = 0, 0
            for size in sizes[start_batch:]:
                if total + size > max_bytes:
                    break
                total += size
                expected += 1
            assert len(scan(data)) == max(expected, 1)
            assert data == everything[start.position : start.position + len(data)]


def test_huge_offset_spans_roll_or_are_rejected(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    append(plog, batch(records(1)))
    wide = encode_batch([Record(0, NOW, b"k", b"v")], base_offset=0, last_offset_delta=2**31 - 2)
    append(plog, wide)  # would overflow the int32 relative offsets: rolls first
    assert [s.base_offset for s in plog.segments] == [0, 1]
    assert plog.log_end_offset == 2**31
    too_wide = encode_batch(
        [Record(0, NOW, b"k", b"v")], base_offset=0, last_offset_delta=2**31 - 1
    )
    with pytest.raises(InvalidRecordError):
        append(plog, too_wide)
