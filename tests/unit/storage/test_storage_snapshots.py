"""Producer-state snapshots (Kafka's ``<offset>.snapshot`` files, written at segment roll
and clean shutdown): a clean start reads no segment, an unclean one only the tail after
the last snapshot, and a damaged or stale snapshot falls back to an older one."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import crc32c
from localstore_helpers import NOW, StoreFactory, T, append, records

from floe.protocol.control import encode_marker
from floe.protocol.records import encode_batch
from floe.storage.local import LocalPartitionLog, LocalStore
from floe.storage.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot
from floe.types import Offset, PartitionId

SEGMENT = 64 * 1024


def proc_io(field: str) -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value)
    raise KeyError(field)


def produce(plog: LocalPartitionLog, pid: int, seq: int, *, txn: bool = False) -> int:
    recs = records(8, start_ts=NOW + seq, size=200)
    data = encode_batch(recs, base_offset=0, producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=txn)  # fmt: skip
    return int(append(plog, data, now_ms=NOW + seq + 7).base_offset)


def fill(store: LocalStore, batches: int = 1200) -> LocalPartitionLog:
    """~2 MB from 20 idempotent producers, plus an aborted and an open transaction."""
    store.create_topic(T, 1, {"segment.bytes": str(SEGMENT)})
    plog = store.partition(T, PartitionId(0))
    for i in range(batches):
        produce(plog, 100 + i % 20, (i // 20) * 8)
    produce(plog, 7, 0, txn=True)
    append(plog, encode_marker(7, 0, False, 0, NOW), now_ms=NOW)
    produce(plog, 8, 0, txn=True)  # still open: holds the last stable offset back
    return plog


def state(plog: LocalPartitionLog) -> object:
    return (
        {p.producer_id: (p.epoch, list(p.batches), p.txn_first_offset) for p in plog.producers()},
        plog.last_stable_offset,
        plog.aborted_transactions(Offset(0), plog.log_end_offset),
    )


def snapshots(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "data" / "logs" / "t-0").glob("*.snapshot"))


def test_clean_start_reads_no_segment(open_store: StoreFactory) -> None:
    store = open_store()
    plog = fill(store)
    assert plog.size_bytes > 2_000_000
    before = state(plog)
    store.close()
    read = proc_io("rchar")
    plog = open_store().partition(T, PartitionId(0))
    read = proc_io("rchar") - read
    assert read < 50_000, read  # indexes and the snapshot only
    assert state(plog) == before
    assert produce(plog, 100, (1180 // 20) * 8) == 1180 * 8  # a retry is a duplicate


def test_unclean_start_reads_only_the_tail(open_store: StoreFactory) -> None:
    store = open_store()
    plog = fill(store)
    asyncio.run(store.sync([plog]))
    store.run_maintenance(NOW)  # checkpoints the recovery point
    before = state(plog)
    read = proc_io("rchar")
    plog = open_store().partition(T, PartitionId(0))  # no close: as after kill -9
    read = proc_io("rchar") - read
    assert read < 2 * SEGMENT + 50_000, read
    assert state(plog) == before


def test_damaged_and_stale_snapshots_fall_back(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    plog = fill(store)
    before = state(plog)
    store.close()
    assert len(snapshots(tmp_path)) >= 2
    newest = snapshots(tmp_path)[-1]
    newest.write_bytes(newest.read_bytes()[:-3] + b"bad")  # fails its checksum
    store = open_store()
    assert state(store.partition(T, PartitionId(0))) == before
    store.close()
    for snap in snapshots(tmp_path):
        snap.unlink()
    assert state(open_store().partition(T, PartitionId(0))) == before  # a full scan


def test_snapshots_beyond_a_truncated_log_end_are_dropped(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    fill(store)  # nothing fsynced: the whole log is beyond the recovery point
    segments = sorted((tmp_path / "data" / "logs" / "t-0").glob("*.log"))
    with open(segments[len(segments) // 2], "r+b") as f:  # corrupt a middle segment
        f.seek(5000)
        f.write(b"garbage")
    store = open_store()  # unclean: cut at the damage, later segments dropped
    plog = store.partition(T, PartitionId(0))
    end = plog.log_end_offset
    assert end < 1200 * 8
    assert all(int(s.stem) <= end for s in snapshots(tmp_path))
    recovered = state(plog)
    store.close()
    for snap in snapshots(tmp_path):
        snap.unlink()
    assert state(open_store().partition(T, PartitionId(0))) == recovered


def test_a_snapshot_of_the_first_format_reads_as_forgetful() -> None:
    """Snapshots written before completeness was kept (magic FPS1) load as state that
    may miss producers: any sequence of an unknown one is taken, as it was then."""
    state = ProducerStateManager()
    v2 = encode_snapshot(state, 7)
    assert decode_snapshot(v2) is not None and decode_snapshot(v2)[1].complete
    body = v2[8:24] + v2[25:]  # offset and counts, no flags byte
    v1 = b"FPS1" + struct.pack(">I", crc32c.crc32c(body)) + body
    decoded = decode_snapshot(v1)
    assert decoded is not None and decoded[0] == 7 and not decoded[1].complete
