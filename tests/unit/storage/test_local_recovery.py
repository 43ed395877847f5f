"""Restart and crash recovery: clean restarts, torn and corrupt tails, lost indexes."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, batch, records

from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.local import LocalStore
from floe.types import Offset, PartitionId, TopicName


def fill(store: LocalStore, n: int = 30, **configs: str) -> list[bytes]:
    store.create_topic(T, 1, {"segment.bytes": "3000", "index.interval.bytes": "200", **configs})
    plog = store.partition(T, PartitionId(0))
    sent = []
    for i in range(n):
        b = batch(records(3, start_ts=NOW + i, size=40))
        append(plog, b)
        sent.append(b)
    return sent


def read_all(store: LocalStore) -> list[tuple[int, bytes]]:
    plog = store.partition(T, PartitionId(0))
    out = []
    pos = plog.log_start_offset
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        for h in scan(data):
            out.append((h.base_offset, bytes(data[h.position + 8 : h.position + h.size])))
            pos = Offset(h.next_offset)
    return out


def last_segment(tmp_path: Path) -> Path:
    return sorted((tmp_path / "data" / "logs" / "t-0").glob("*.log"))[-1]


def test_clean_restart_keeps_data_metadata_and_log_start(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    fill(store)
    meta = store.topic(T)
    before = read_all(store)
    plog = store.partition(T, PartitionId(0))
    assert plog.delete_records(Offset(40)) == 40
    max_ts = plog.max_timestamp()
    store.close()
    assert (tmp_path / "data" / "logs" / ".clean-shutdown").exists()
    store = open_store()
    assert not (tmp_path / "data" / "logs" / ".clean-shutdown").exists()
    assert store.topic(T) == meta
    assert store.topic_by_id(meta.topic_id) == meta if meta else False
    plog = store.partition(T, PartitionId(0))
    assert plog.log_start_offset == 40
    assert plog.log_end_offset == 90
    assert plog.max_timestamp() == max_ts
    assert read_all(store) == [b for b in before if b[0] + 3 > 40]
    append(plog, batch(records(1)))
    assert plog.log_end_offset == 91


def test_unclean_restart_without_damage_keeps_everything(open_store: StoreFactory) -> None:
    store = open_store()
    fill(store)
    before = read_all(store)
    reopened = open_store()  # no close: as after kill -9
    assert read_all(reopened) == before
    assert reopened.partition(T, PartitionId(0)).log_end_offset == 90


@pytest.mark.parametrize("damage", ["truncate", "garble", "zeros"])
def test_torn_tail_is_dropped(
    open_store: StoreFactory, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    sent = fill(store)
    before = read_all(store)
    seg = last_segment(tmp_path)
    size = seg.stat().st_size
    last_len = len(sent[-1])
    with open(seg, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 7)
        elif damage == "garble":
            f.seek(size - 20)
            f.write(b"\xff" * 5)
        else:
            f.seek(size)
            f.write(b"\0" * 500)
    with caplog.at_level(logging.WARNING):
        reopened = open_store()
    plog = reopened.partition(T, PartitionId(0))
    if damage == "zeros":
        assert read_all(reopened) == before
        dropped = 500
    else:
        assert read_all(reopened) == before[:-1]
        dropped = last_len - (7 if damage == "truncate" else 0)
    assert plog.log_end_offset == (90 if damage == "zeros" else 87)
    lines = [r.getMessage() for r in caplog.records if "log.recovery.truncated" in r.getMessage()]
    assert len(lines) == 1
    assert "topic=t partition=0" in lines[0] and f"bytes={dropped}" in lines[0]
    append(plog, batch(records(1)))
    assert read_all(reopened)[-1][0] == plog.log_end_offset - 1


def test_corrupt_middle_segment_drops_everything_after(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    fill(store)
    before = read_all(store)
    segs = sorted((tmp_path / "data" / "logs" / "t-0").glob("*.log"))
    assert len(segs) >= 3
    with open(segs[1], "r+b") as f:
        f.seek(100)
        f.write(b"garbage")
    reopened = open_store()
    plog = reopened.partition(T, PartitionId(0))
    after = read_all(reopened)
    assert after == before[: len(after)]
    assert plog.log_end_offset < 90
    assert len(plog.segments) == 2


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_missing_or_corrupt_indexes_are_rebuilt(
    open_store: StoreFactory, tmp_path: Path, damage: str
) -> None:
    store = open_store()
    fill(store)
    before = read_all(store)
    store.close()
    for index in (tmp_path / "data" / "logs" / "t-0").glob("*index"):
        if damage == "delete":
            index.unlink()
        else:
            index.write_bytes(b"\x00\x00\x00\x05" * 7)
    reopened = open_store()
    assert read_all(reopened) == before
    plog = reopened.partition(T, PartitionId(0))
    assert all(len(s.offset_index) > 0 for s in plog.segments)
    assert plog.offset_for_timestamp(NOW + 10) == (26, NOW + 10)  # batch 8, record 2


def test_empty_trailing_segment_is_fine(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    fill(store)
    plog = store.partition(T, PartitionId(0))
    plog.roll()
    before = read_all(store)
    reopened = open_store()
    assert read_all(reopened) == before
    assert reopened.partition(T, PartitionId(0)).log_end_offset == 90
    assert last_segment(tmp_path).stat().st_size == 0


def test_recovery_checkpoint_limits_rescan(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    fill(store)
    plog = store.partition(T, PartitionId(0))
    checkpoint = tmp_path / "data" / "logs" / "recovery-point-offset-checkpoint"
    store.run_maintenance(NOW)
    assert checkpoint.read_text() == "t-0 0\n"  # nothing fsynced yet
    asyncio.run(store.wait_durable([plog]))
    store.run_maintenance(NOW)
    assert checkpoint.read_text() == "t-0 90\n"
    append(plog, batch(records(3)))  # beyond the recovery point
    segs = sorted((tmp_path / "data" / "logs" / "t-0").glob("*.log"))
    with open(segs[0], "r+b") as f:  # below the recovery point: trusted, not re-scanned
        f.seek(100)
        f.write(b"garbage")
    with open(segs[-1], "r+b") as f:  # the tail beyond it is re-scanned and cut
        f.seek(-5, os.SEEK_END)
        f.write(b"XXXXX")
    with caplog.at_level(logging.WARNING):
        reopened = open_store()
    assert reopened.partition(T, PartitionId(0)).log_end_offset == 90
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("log.recovery.truncated topic=t partition=0 offset=90 bytes=")


def test_orphan_and_deleted_dirs_are_removed(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    fill(store)
    store.close()
    logs = tmp_path / "data" / "logs"
    (logs / "gone-0").mkdir()
    (logs / "t-0.deleted").mkdir()
    store = open_store()
    assert not (logs / "gone-0").exists()
    assert not (logs / "t-0.deleted").exists()
    assert store.topic(TopicName("gone")) is None
    assert os.listdir(logs / "t-0")


def test_a_reopened_partition_indexes_what_was_added_after_its_end(
    open_store: StoreFactory,
) -> None:
    """The object store restores a partition by writing the batches its cache lacks as
    segments after the cache's end (closed meanwhile), then opening that one partition
    again: the new segments
    are recovered (checked, indexed, a torn tail cut) as after a crash, the other
    partitions stay open, and appends go on after the restored records."""
    store = open_store()
    sent = fill(store)
    other = TopicName("other")
    store.create_topic(other, 1, {})
    append(store.partition(other, PartitionId(0)), batch(records(2)))
    end = store.partition(T, PartitionId(0)).log_end_offset

    def at(base: int) -> bytes:
        recs = [Record(base + r.offset, r.timestamp, r.key, r.value) for r in records(3, size=40)]
        return encode_batch(recs, base_offset=base)

    added = [at(end + 3 * i) for i in range(20)]
    torn = at(end + 60)[:-7]

    before = store.partition(other, PartitionId(0))
    directory = store.partition(T, PartitionId(0)).directory
    point = store.close_to_change(T, PartitionId(0))
    assert point == end
    (directory / f"{end:020d}.log").write_bytes(b"".join(added) + torn)
    plog = store.open_changed(T, PartitionId(0), point)
    assert store.partition(other, PartitionId(0)) is before
    assert plog.log_end_offset == end + 60
    got = read_all(store)
    assert [b for _, b in got] == [b[8:] for b in sent] + [b[8:] for b in added]
    middle = plog.read(Offset(end + 31), 1 << 20)
    assert next(iter(scan(middle))).base_offset == end + 30
    assert append(plog, batch(records(1))).base_offset == end + 60
