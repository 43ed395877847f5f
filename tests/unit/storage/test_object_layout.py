"""The object-storage engine's object names and batch slicing (no bucket needed)."""

from __future__ import annotations

import uuid

import pytest

from floe.protocol.records import Record, encode_batch
from floe.storage.object import layout
from floe.storage.object.layout import CorruptObjectError, PartObject
from floe.storage.object.reads import covering

TOPIC_ID = uuid.UUID(int=7)


def batches(*spans: tuple[int, int, int]) -> bytes:
    """One batch per ``(base, count, max timestamp)``, the records 100 bytes each."""
    out = b""
    for base, count, ts in spans:
        recs = [Record(base + i, ts - count + 1 + i, b"k", b"v" * 100) for i in range(count)]
        out += encode_batch(recs, base_offset=base)
    return out


def sizes(runs: list[memoryview]) -> list[int]:
    return [int.from_bytes(r[:8], "big") for r in runs]


def test_object_names_carry_range_and_largest_timestamp() -> None:
    data = batches((10, 3, 5_000), (13, 2, 9_000), (15, 1, 7_000))
    obj = PartObject.of(TOPIC_ID, 2, data, 10, 16)
    assert obj.max_timestamp == 9_000 and obj.size == len(data)
    assert obj.key == f"data/{TOPIC_ID}/2/{10:020d}-{16:020d}_9000.log"
    assert layout.parse_data_key(obj.key, len(data)) == (TOPIC_ID, 2, obj)
    # an object named before timestamps were recorded reads as "none known"
    old = f"data/{TOPIC_ID}/2/{10:020d}-{16:020d}.log"
    assert layout.parse_data_key(old, 5) == (TOPIC_ID, 2, PartObject(old, 10, 16, 5, -1))
    snap = layout.snapshot_key(TOPIC_ID, 2, 42)
    assert layout.parse_data_key(snap, 24) == (TOPIC_ID, 2, 42)
    for foreign in (
        f"data/{TOPIC_ID}/2/x.snapshot",
        f"data/{TOPIC_ID}/2/{10:020d}-{16:020d}_soon.log",
        f"data/{TOPIC_ID}/2/{10:020d}.log",
    ):
        assert layout.parse_data_key(foreign, 1) is None


def test_runs_cut_at_batch_boundaries_for_segments() -> None:
    data = memoryview(batches((0, 1, 1), (1, 1, 1), (2, 1, 1), (3, 1, 1)))
    one = len(batches((0, 1, 1)))
    # the first run fills what the current segment has left, then segments of two batches
    runs = list(layout.batch_runs(data, one + 5, 2 * one))
    assert sizes(runs) == [0, 1, 3] and [len(r) for r in runs] == [one, 2 * one, one]
    # no room left in the current segment: the first run is empty and skipped
    assert sizes(list(layout.batch_runs(data, 3, 2 * one))) == [0, 2]
    # a batch larger than a segment comes alone
    assert sizes(list(layout.batch_runs(data, one // 2, one // 2))) == [0, 1, 2, 3]


def test_cut_to_keeps_whole_batches() -> None:
    data = memoryview(batches((0, 2, 1), (2, 2, 1)))
    first = len(batches((0, 2, 1)))
    assert len(layout.cut_to(data, first + 10, min_one=False)) == first
    assert len(layout.cut_to(data, 10, min_one=False)) == 0
    assert len(layout.cut_to(data, 10, min_one=True)) == first
    with pytest.raises(CorruptObjectError):
        layout.cut_to(data[:-1], len(data), min_one=True)


def test_covering_finds_the_object_of_an_offset() -> None:
    objs = [PartObject("a", 0, 10, 1), PartObject("b", 10, 25, 1), PartObject("c", 25, 26, 1)]
    assert [covering(objs, o).key for o in (0, 9, 10, 24, 25)] == ["a", "a", "b", "b", "c"]
    assert covering(objs, 26) is None and covering(objs[1:], 3) is None


def test_wal_keys_name_the_brokers_stream_and_the_writer_epoch_only_in_a_cluster() -> None:
    assert layout.wal_key("3", 12) == "wal/3/00000000000000000012.wal"
    assert layout.wal_key("3", 12, 5) == "wal/3/00000000000000000012-5.wal"
    assert layout.parse_wal_key(layout.wal_key("3", 12)) == ("3", 12, 0)
    assert layout.parse_wal_key(layout.wal_key("3", 12, 5)) == ("3", 12, 5)
    # the unnamed stream of buckets written before streams existed
    assert layout.wal_key("", 12, 5) == "wal/00000000000000000012-5.wal"
    assert layout.parse_wal_key("wal/00000000000000000012.wal") == ("", 12, 0)
    for other in (
        "wal/x.wal",
        "wal/12-.wal",
        "wal/12-a.wal",
        "wal/12.log",
        "data/12.wal",
        "wal/a/12.wal",
        "wal/1/2/12.wal",
    ):
        assert layout.parse_wal_key(other) is None, other


def test_floors_and_takeover_records_are_per_stream() -> None:
    assert layout.wal_floor_key("3") == "wal-floor/3"
    assert layout.parse_wal_floor_key("wal-floor/3") == "3"
    assert layout.wal_floor_key("") == "wal-floor"
    assert layout.parse_wal_floor_key("wal-floor") == ""
    assert layout.parse_wal_floor_key("wal-floor/x") is None
    key = layout.takeover_key("3", 4)
    assert key == "takeover/3/00000000000000000004"
    assert layout.parse_takeover_key(key) == ("3", 4)
    assert layout.takeover_key("", 4) == "takeover/00000000000000000004"
    assert layout.parse_takeover_key("takeover/00000000000000000004") == ("", 4)
    for other in ("takeover/x", "takeover/3/x", "takeover/a/4", "wal/4"):
        assert layout.parse_takeover_key(other) is None, other
    assert layout.decode_takeover(layout.encode_takeover(77)) == 77
    with pytest.raises(CorruptObjectError):
        layout.decode_takeover(b"{}")
