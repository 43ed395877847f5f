"""Retention (time and size) and compaction, observed through real clients.

The broker runs its cleaner every 200 ms here, so each test polls (with a deadline) for
the log start offset to move or the log to shrink, then checks what a consumer reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record, recent_ts

CLEANER = {"log.retention.check.interval.ms": "200"}
DEADLINE_S = 30.0


@pytest.fixture
def cleaner_broker(engine_broker_factory: Callable[..., Broker]) -> Broker:
    return engine_broker_factory(CLEANER)


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {DEADLINE_S} s"
        time.sleep(0.1)


def produce_in_batches(b: Broker, topic: str, records: list[Record]) -> list[Record]:
    return confluent_produce(b.bootstrap, topic, records, **{"batch.num.messages": 10})


def test_time_retention_drops_old_segments(cleaner_broker: Broker) -> None:
    b = cleaner_broker
    topic = create_topic(b.bootstrap, config={"retention.ms": "60000", "segment.bytes": "4096"})
    old = recent_ts()  # an hour ago: beyond retention.ms
    records = [Record(b"k", b"old %d " % i * 20, (), old + i, 0) for i in range(200)]
    produce_in_batches(b, topic, records)
    # A fresh record in the active segment, which retention never deletes.
    fresh = confluent_produce(b.bootstrap, topic, [Record(b"k", b"fresh", partition=0)])[0]

    wait_for(lambda: watermarks(b.bootstrap, topic, 1)[0][0] > 0, "time retention")
    low, high = watermarks(b.bootstrap, topic, 1)[0]
    assert high == 201
    got = confluent_consume(b.bootstrap, topic, {0: high}, {0: low})
    assert [r.offset for r in got] == list(range(low, high))
    assert got[-1].value == fresh.value
    assert [r.value for r in got[:-1]] == [r.value for r in records[low:]]


def test_size_retention_caps_the_partition(cleaner_broker: Broker) -> None:
    b = cleaner_broker
    topic = create_topic(b.bootstrap, config={"retention.bytes": "8192", "segment.bytes": "4096"})
    records = [Record(b"k", b"v %d " % i * 20, partition=0) for i in range(400)]
    produce_in_batches(b, topic, records)

    # ~24 KiB of records under an 8 KiB cap (plus the active segment) must shrink; on
    # object storage retention goes in steps (a first pass saw the log start at 90)
    wait_for(lambda: watermarks(b.bootstrap, topic, 1)[0][0] > 100, "size retention")
    low, high = watermarks(b.bootstrap, topic, 1)[0]
    assert high == 400
    got = confluent_consume(b.bootstrap, topic, {0: high}, {0: low})
    assert [r.value for r in got] == [r.value for r in records[low:]]


def test_compaction_keeps_the_latest_value_per_key(cleaner_broker: Broker) -> None:
    b = cleaner_broker
    topic = create_topic(
        b.bootstrap,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "3600000",
        },
    )
    keys = [b"key-%d" % k for k in range(10)]
    records = [Record(keys[i % 10], b"v%d " % i * 10, partition=0) for i in range(500)]
    records.append(Record(keys[3], None, partition=0))  # a tombstone for key-3
    acked = produce_in_batches(b, topic, records)
    # More records so the ones above sit in closed (compactable) segments.
    acked += produce_in_batches(
        b, topic, [Record(b"filler-%d" % i, b"x" * 100, partition=0) for i in range(60)]
    )
    high = watermarks(b.bootstrap, topic, 1)[0][1]
    assert high == len(acked)

    def compacted() -> bool:
        return len(confluent_consume(b.bootstrap, topic, {0: high})) < high

    wait_for(compacted, "compaction")
    got = confluent_consume(b.bootstrap, topic, {0: high})
    by_offset = {r.offset: r for r in acked}
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), "offsets must stay increasing and unique"
    for r in got:  # compaction removes records; it never alters or renumbers them
        want = by_offset[r.offset]
        assert (r.key, r.value) == (want.key, want.value), r
    latest = {}
    for r in got:
        latest[r.key] = r.value
    for k in keys:
        want = [r.value for r in acked if r.key == k][-1]
        assert latest.get(k, "absent") == want, f"{k!r}: latest value lost"
