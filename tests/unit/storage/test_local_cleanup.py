"""Retention by time and bytes, DeleteRecords, and compaction."""

from __future__ import annotations

import os

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, batch, kv, records

from floe.protocol.batch import scan
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.storage.interface import OffsetOutOfRangeError
from floe.storage.local import LocalPartitionLog, LocalStore
from floe.types import Offset, PartitionId

DAY = 86_400_000


def read_records(plog: LocalPartitionLog) -> list[Record]:
    out: list[Record] = []
    pos = plog.log_start_offset
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        headers = scan(data)
        for h in headers:
            out += [r for r in decode_batch(data, h) if r.offset >= pos]
        pos = Offset(headers[-1].next_offset)
    return out


def setup(store: LocalStore, **configs: str) -> LocalPartitionLog:
    store.create_topic(T, 1, {"segment.bytes": "500", **configs})
    return store.partition(T, PartitionId(0))


def test_retention_by_time(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, **{"retention.ms": str(DAY)})
    for i in range(20):
        append(plog, batch(records(2, start_ts=NOW + i * 1000, size=100)))
    segs = len(plog.segments)
    assert segs >= 10
    store.run_maintenance(NOW + DAY - 1)
    assert len(plog.segments) == segs
    store.run_maintenance(NOW + DAY + 5500)  # batches 0..5 expired, by whole segment
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    assert plog.segments[0].max_timestamp >= NOW + 5500 - 0
    assert read_records(plog)[0].offset == plog.log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(Offset(0), 100)
    store.run_maintenance(NOW + 10 * DAY)  # the active segment always stays
    assert plog.log_end_offset == 40
    assert plog.segments[-1].size == 0
    assert plog.log_start_offset >= 38


def test_retention_by_bytes(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, **{"retention.bytes": "1500", "retention.ms": "-1"})
    for i in range(30):
        append(plog, batch(records(2, start_ts=NOW + i, size=100)))
    store.run_maintenance(NOW)
    assert plog.size_bytes >= 1500
    assert plog.size_bytes - plog.segments[0].size < 1500
    assert plog.size_bytes == sum(s.size for s in plog.segments)
    assert plog.log_end_offset == 60


def test_delete_records_persists(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store)
    for _ in range(20):
        append(plog, batch(records(2, size=100)))
    assert plog.delete_records(Offset(3)) == 3
    assert plog.delete_records(Offset(1)) == 3  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records(Offset(41))
    assert plog.delete_records(Offset(25)) == 25
    assert plog.segments[0].base_offset <= 25 < plog.segments[0].next_offset
    assert read_records(plog)[0].offset == 25
    store.close()
    plog = open_store().partition(T, PartitionId(0))
    assert plog.log_start_offset == 25
    assert plog.delete_records(Offset(-1)) == 40
    assert len(plog.segments) == 1
    assert plog.read(Offset(40), 100) == b""


def compacted_values(plog: LocalPartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in read_records(plog)]


def test_compaction_keeps_latest_per_key(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, **{"cleanup.policy": "compact"})
    for i in range(60):
        append(plog, kv(b"k%d" % (i % 5), b"v%d" % i, ts=NOW + i))
    # a multi-record compressed batch whose middle record survives
    append(plog, encode_batch(
        [Record(0, NOW, b"k1", b"x"), Record(1, NOW, b"solo", b"s"), Record(2, NOW, b"k2", b"y")],
        base_offset=0, compression=4,
    ))  # fmt: skip
    plog.roll()
    append(plog, kv(b"k0", b"active", ts=NOW + 100))
    before_size = plog.size_bytes
    store.run_maintenance(NOW + 1000)
    got = compacted_values(plog)
    assert got == [
        (55, b"k0", b"v55"), (58, b"k3", b"v58"), (59, b"k4", b"v59"), (60, b"k1", b"x"),
        (61, b"solo", b"s"), (62, b"k2", b"y"), (63, b"k0", b"active"),
    ]  # fmt: skip
    assert plog.size_bytes < before_size
    assert plog.log_end_offset == 64
    # offsets stay monotonic and a read inside a gap lands on the next survivor
    assert scan(plog.read(Offset(1), 1 << 20))[0].base_offset == 55
    store.close()
    plog = open_store().partition(T, PartitionId(0))
    assert compacted_values(plog)[0] == (55, b"k0", b"v55")


def test_compaction_tombstones_expire_and_lag_is_honoured(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    plog = setup(
        store,
        **{"cleanup.policy": "compact", "delete.retention.ms": str(DAY),
           "min.compaction.lag.ms": "500", "segment.bytes": "100000"},
    )  # fmt: skip
    append(plog, kv(b"a", b"1", ts=NOW), kv(b"b", b"1", ts=NOW))
    append(plog, kv(b"a", None, ts=NOW + 1))
    plog.roll()
    append(plog, kv(b"c", b"1", ts=NOW + 2))
    plog.roll()
    store.run_maintenance(NOW + 400)  # within the lag: untouched
    assert len(compacted_values(plog)) == 4
    store.run_maintenance(NOW + 501)
    assert compacted_values(plog) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    mtime = os.stat(plog.segments[0].path).st_mtime_ns // 1_000_000
    store.run_maintenance(mtime + DAY + 1)
    assert compacted_values(plog) == [(1, b"b", b"1"), (3, b"c", b"1")]


def test_compaction_keeps_transactional_and_control_batches(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, **{"cleanup.policy": "compact", "segment.bytes": "100000"})
    txn = encode_batch(
        [Record(0, NOW, b"a", b"t")], base_offset=0, producer_id=7, producer_epoch=0,
        base_sequence=0, transactional=True,
    )  # fmt: skip
    marker = encode_batch(
        [Record(0, NOW, b"\0\0\0\1", b"\0\0\0\0\0\0")], base_offset=0, producer_id=7,
        producer_epoch=0, transactional=True, control=True,
    )  # fmt: skip
    append(plog, txn, marker, kv(b"a", b"x"), kv(b"a", b"y"))
    plog.roll()
    store.run_maintenance(NOW + 1000)
    assert [(o, v) for o, _, v in compacted_values(plog)] == [
        (0, b"t"), (1, b"\0\0\0\0\0\0"), (3, b"y"),
    ]  # fmt: skip
