"""load_producer_state: the newest usable snapshot plus a replay of the headers after
it gives the state the log holds, and the flags tell the log what is left to do."""

from __future__ import annotations

from collections.abc import Iterable

from localstore_helpers import NOW, StoreFactory, T, append, records

from floe.protocol.records import encode_batch
from floe.storage.local import LocalPartitionLog
from floe.storage.local.producer_recovery import load_producer_state
from floe.storage.local.snapshot import list_snapshots, snapshot_path
from floe.storage.producer_state import ProducerEntry
from floe.types import PartitionId

P = PartitionId(0)


def produce(plog: LocalPartitionLog, pid: int, seq: int) -> None:
    data = encode_batch(records(4, start_ts=NOW + seq), base_offset=0, producer_id=pid,
                        producer_epoch=0, base_sequence=seq)  # fmt: skip
    append(plog, data, now_ms=NOW + seq)


def entries(producers: Iterable[ProducerEntry]) -> dict[int, tuple[int, int]]:
    return {p.producer_id: (p.epoch, p.last_seq) for p in producers}


def test_replays_the_batches_after_the_newest_snapshot(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, P)
    produce(plog, 10, 0)
    plog.roll()  # snapshot at offset 4
    produce(plog, 10, 4)
    produce(plog, 11, 0)
    loaded = load_producer_state(T, P, plog.directory, plog.segments)
    assert (loaded.replayed, loaded.dropped) == (True, False)
    assert entries(loaded.producers.producers.values()) == entries(plog.producers())
    plog.roll()  # snapshot at the log end: nothing left to replay
    loaded = load_producer_state(T, P, plog.directory, plog.segments)
    assert (loaded.replayed, loaded.dropped) == (False, False)


def test_snapshots_beyond_the_log_end_are_deleted(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, P)
    produce(plog, 10, 0)
    plog.roll()
    stale = snapshot_path(plog.directory, 1000)
    stale.write_bytes(snapshot_path(plog.directory, 4).read_bytes())
    loaded = load_producer_state(T, P, plog.directory, plog.segments)
    assert (loaded.replayed, loaded.dropped) == (False, True)
    assert list_snapshots(plog.directory) == [4]
    assert entries(loaded.producers.producers.values()) == {10: (0, 3)}


def test_a_log_whose_head_is_gone_without_a_snapshot_may_miss_producers(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, P)
    produce(plog, 10, 0)
    plog.roll()
    produce(plog, 11, 0)
    assert load_producer_state(T, P, plog.directory, plog.segments).producers.complete
    plog.roll()
    plog.drop_oldest_segment()  # producer 10's only batch is gone
    for offset in list_snapshots(plog.directory):
        snapshot_path(plog.directory, offset).unlink()
    loaded = load_producer_state(T, P, plog.directory, plog.segments)
    assert entries(loaded.producers.producers.values()) == {11: (0, 3)}
    assert not loaded.producers.complete
