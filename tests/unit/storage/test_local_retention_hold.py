"""A retention hold keeps time/size retention and compaction away from offsets at or
above it (a table topic's data not yet in the table); DeleteRecords ignores it."""

from __future__ import annotations

import logging

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, batch, kv, records

from floe.storage.local import LocalPartitionLog, LocalStore
from floe.types import Offset, PartitionId, TopicName

DAY = 86_400_000
U = TopicName("u")


def setup(store: LocalStore, configs: dict[str, str], topic: TopicName = T) -> LocalPartitionLog:
    store.create_topic(topic, 1, {"segment.bytes": "500", **configs})
    return store.partition(topic, PartitionId(0))


def held_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "log.retention.held" in r.getMessage()]


def test_time_retention_stops_at_the_hold(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    plog = setup(store, {"retention.ms": str(DAY)})
    for i in range(20):
        append(plog, batch(records(2, start_ts=NOW + i * 1000, size=100)))
    plog.set_retention_hold(Offset(11))
    assert store.partition(T, PartitionId(0)).retention_hold == 11
    with caplog.at_level(logging.INFO):
        store.run_maintenance(NOW + 10 * DAY)
        store.run_maintenance(NOW + 10 * DAY + 1)
    first = plog.segments[0]
    assert first.base_offset == plog.log_start_offset <= 11 < first.next_offset
    kept = plog.segments[:-1]  # every sealed segment expired; those reaching 11 stay
    assert plog.held_bytes == sum(s.size for s in kept) > 0
    assert held_lines(caplog) == [
        f"log.retention.held topic=t partition=0 hold=11 held_bytes={plog.held_bytes}"
    ]  # once, not once per maintenance run
    plog.set_retention_hold(None)
    assert plog.retention_hold is None
    assert plog.held_bytes == 0
    store.run_maintenance(NOW + 10 * DAY + 2)
    assert plog.log_start_offset == 40
    assert len(plog.segments) == 1


def test_size_retention_stops_at_the_hold(open_store: StoreFactory) -> None:
    store = open_store()
    configs = {"retention.bytes": "1500", "retention.ms": "-1"}
    held, free = setup(store, configs), setup(store, configs, U)
    for i in range(30):
        for plog in (held, free):
            append(plog, batch(records(2, start_ts=NOW + i, size=100)))
    size = free.size_bytes
    held.set_retention_hold(Offset(0))
    store.run_maintenance(NOW)
    assert free.log_start_offset > 0
    assert (held.log_start_offset, held.size_bytes) == (0, size)
    assert held.held_bytes == size - free.size_bytes
    held.set_retention_hold(Offset(free.log_start_offset // 2))
    store.run_maintenance(NOW)
    assert held.log_start_offset <= free.log_start_offset // 2 < held.segments[0].next_offset
    assert 0 < held.held_bytes < size - free.size_bytes
    held.set_retention_hold(Offset(held.log_end_offset))  # the table caught up
    store.run_maintenance(NOW)
    assert (held.log_start_offset, held.held_bytes) == (free.log_start_offset, 0)


def test_compaction_stops_before_the_hold(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, {"cleanup.policy": "compact"})
    for i in range(40):
        append(plog, kv(b"k%d" % (i % 2), b"v%d" % i, ts=NOW + i))
    plog.roll()
    plog.set_retention_hold(Offset(20))
    before = {s.base_offset: s.size for s in plog.segments}
    store.run_maintenance(NOW + 1000)
    after = {s.base_offset: s.size for s in plog.segments}
    for seg in plog.segments:
        if seg.next_offset > 20:
            assert after[seg.base_offset] == before[seg.base_offset], "not rewritten"
    assert sum(after.values()) < sum(before.values())  # the prefix below 20 was cleaned
    plog.set_retention_hold(None)
    store.run_maintenance(NOW + 1000)
    assert plog.size_bytes < sum(after.values())


def test_delete_records_ignores_the_hold(open_store: StoreFactory) -> None:
    store = open_store()
    plog = setup(store, {})
    for _ in range(20):
        append(plog, batch(records(2, size=100)))
    plog.set_retention_hold(Offset(0))
    assert plog.delete_records(Offset(25)) == 25
    assert plog.segments[0].base_offset <= 25 < plog.segments[0].next_offset


def test_a_negative_hold_is_refused(open_store: StoreFactory) -> None:
    plog = setup(open_store(), {})
    with pytest.raises(ValueError, match="hold"):
        plog.set_retention_hold(Offset(-1))
