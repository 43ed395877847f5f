"""An idempotent producer's state comes back with the log when another broker takes a
partition over from one that was killed, or a broker opens the bucket on a new disk
(real SeaweedFS; the stores driven directly).

The killed broker had put a batch in the bucket (its WAL object landed) but never
answered it; the producer retries it at the next leader, which must answer it as the
duplicate it is, with the offsets it got the first time, and append nothing. Each way
in runs with the cache unbounded (the whole log is replayed) and bounded, set or by a
cluster's default (the restore starts at the producer-state snapshot the bucket holds),
and the retried batch is in a WAL object only (the killed broker's upload pass never ran
after it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_object_partition_moves import kill

from floe.config.loader import BrokerConfig, load_config
from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.interface import AppendResult, NotCachedError
from floe.storage.object import layout
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.store import ObjectStore
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-producer-state"
T = TopicName("idempotent")
P0 = PartitionId(0)
PID, EPOCH = 4242, 3
NOW_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


CACHES = {
    "unbounded_cache": {},
    "bounded_cache": {"storage.s3.cache.max.bytes": 1 << 30},
    # a cluster's default budget (the metadata store is not reached: no guard is given)
    "cluster_default": {"cluster.metadata.url": "etcd://127.0.0.1:9"},
}
"""Each cache setting tried, by test id."""


def config(
    s3: SeaweedServer, tmp: Path, prefix: str, node: int, cache: str, *, sets: dict | None = None
) -> BrokerConfig:
    toml = tmp / f"floe-{node}.toml"
    toml.touch()
    settings = {"node.id": node, **s3.log_settings(BUCKET, prefix), **CACHES[cache], **(sets or {})}
    return load_config(toml, settings, {})


def append(plog: ObjectPartitionLog, sequence: int, size: int = 200) -> AppendResult:
    """The idempotent producer's batch ``sequence`` (one record, its value padded to
    ``size`` bytes: by default so that a few batches fill a 1 KiB segment)."""
    value = f"v{sequence}".encode().ljust(size, b".")
    buf = bytearray(
        encode_batch(
            [Record(0, NOW_MS, b"k", value)], base_offset=0,
            producer_id=PID, producer_epoch=EPOCH, base_sequence=sequence,
        )
    )  # fmt: skip
    return plog.append(buf, scan(buf), NOW_MS)


@pytest.mark.parametrize("cache", list(CACHES))
@pytest.mark.parametrize("way", ["takeover", "lost_disk"])
def test_a_retry_of_the_killed_leaders_last_batch_is_a_duplicate(
    s3: SeaweedServer, tmp_path: Path, way: str, cache: str
) -> None:
    bounded = cache != "unbounded_cache"

    async def scenario() -> None:
        prefix = f"ps-{uuid.uuid4().hex[:8]}"
        dying = ObjectStore(tmp_path / "one", config(s3, tmp_path, prefix, 1, cache))
        dying.start_background_flush()
        dying.create_topic(T, 1, {"segment.bytes": "1024"})
        plog = dying.partition(T, P0)
        for sequence in range(12):  # a few segments, in partition objects
            append(plog, sequence)
        await dying.wait_durable([plog])
        await dying.upload_partitions()
        snapshots = [
            parsed[2]
            for item in dying.bucket.list(layout.partition_prefix(plog.topic_id, P0))
            if (parsed := layout.parse_data_key(item.key, item.size)) is not None
            and isinstance(parsed[2], int)
        ]
        assert bool(snapshots) == bounded  # bounded: the restore starts at one, not at 0
        last = append(plog, 12)  # in a WAL object only, never answered
        await dying.wait_durable([plog])
        kill(dying)  # no close, no upload pass

        if way == "takeover":
            taker = ObjectStore(
                tmp_path / "two", config(s3, tmp_path, prefix, 2, cache),
                holds=lambda *_: False,
            )  # fmt: skip
            await taker.fence_stream("1", 1)
            taken = await taker.acquire(T, P0)
        else:  # the same broker on a new disk
            taker = ObjectStore(tmp_path / "new-disk", config(s3, tmp_path, prefix, 1, cache))
            taken = taker.partition(T, P0)
        try:
            assert taken.log_end_offset == last.last_offset + 1
            again = append(taken, 12)
            assert (again.base_offset, again.last_offset) == (last.base_offset, last.last_offset)
            assert taken.log_end_offset == last.last_offset + 1  # nothing appended
            following = append(taken, 13)
            assert following.base_offset == last.last_offset + 1
        finally:
            taker.close()

    asyncio.run(scenario())


def test_a_takeover_restores_the_records_since_a_recent_snapshot_not_since_the_last_roll(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """A partition whose segment never rolls (the default segment.bytes is 1 GiB) still
    gets producer-state snapshots in the bucket as its records grow: a broker taking it
    over copies into its cache about ``storage.s3.snapshot.interval.bytes`` and the last
    upload passes' records, not the partition's history since its last roll (which took
    the takeover of a long-lived partition from a fraction of a second to minutes). The
    records below the cache are still read, from the bucket, and the producer's state is
    whole: a retry of its last batch is a duplicate."""
    interval, size = 64 * 1024, 4096
    passes = 40  # of 10 batches of 4 KiB each: 1.6 MB in all, 40 KB a pass

    async def scenario() -> None:
        prefix = f"ps-{uuid.uuid4().hex[:8]}"
        sets = {"storage.s3.snapshot.interval.bytes": interval}
        dying = ObjectStore(
            tmp_path / "one", config(s3, tmp_path, prefix, 1, "bounded_cache", sets=sets)
        )
        dying.start_background_flush()
        dying.create_topic(T, 1, {})
        plog = dying.partition(T, P0)
        sequence = 0
        for _ in range(passes):
            for _ in range(10):
                last = append(plog, sequence, size)
                sequence += 1
            await dying.wait_durable([plog])
            await dying.upload_partitions()
        per_pass = plog.size_bytes // passes
        kill(dying)

        taker = ObjectStore(
            tmp_path / "two", config(s3, tmp_path, prefix, 2, "bounded_cache", sets=sets),
            holds=lambda *_: False,
        )  # fmt: skip
        try:
            await taker.fence_stream("1", 1)
            taken = await taker.acquire(T, P0)
            assert taken.log_end_offset == sequence
            cached = taken.log_end_offset - taken.local_log_start_offset
            # at most the interval and two passes' records (a snapshot is put at the
            # pass after the one that took it), not the 400 records of the partition
            assert cached * (per_pass // 10) <= interval + 2 * per_pass, cached
            assert cached < sequence // 4
            with pytest.raises(NotCachedError) as below:
                taken.read(0, 1 << 20)
            first = scan(bytearray(await below.value.load()))[0]
            assert first.base_offset == 0  # what left the cache is read from the bucket
            again = append(taken, sequence - 1, size)  # the last batch, retried
            assert (again.base_offset, again.last_offset) == (last.base_offset, last.last_offset)
            assert taken.log_end_offset == sequence
        finally:
            taker.close()

    asyncio.run(scenario())


def test_a_handed_over_partition_is_restored_from_a_snapshot_at_its_end(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """A handover (``release``: appends refused, everything put in partition objects)
    leaves a producer-state snapshot at the partition's end in the bucket, so the next
    leader copies nothing into its cache before it serves: a balancing move, and the
    takeover after the next owner's death, restore only what was written since. The
    records stay readable (from the bucket) and the producer's state is whole."""
    size = 4096

    async def scenario() -> None:
        prefix = f"ps-{uuid.uuid4().hex[:8]}"
        first = ObjectStore(tmp_path / "one", config(s3, tmp_path, prefix, 1, "bounded_cache"))
        first.start_background_flush()
        first.create_topic(T, 1, {})
        plog = first.partition(T, P0)
        for sequence in range(100):
            last = append(plog, sequence, size)
        await first.wait_durable([plog])
        await first.release(T, P0)
        first.close()

        second = ObjectStore(
            tmp_path / "two", config(s3, tmp_path, prefix, 2, "bounded_cache"),
            holds=lambda *_: False,
        )  # fmt: skip
        try:
            taken = await second.acquire(T, P0)
            assert taken.log_end_offset == 100
            assert taken.local_log_start_offset == 100  # nothing copied
            with pytest.raises(NotCachedError) as below:
                taken.read(0, 1 << 20)
            assert scan(bytearray(await below.value.load()))[0].base_offset == 0
            again = append(taken, 99, size)  # the last batch, retried
            assert (again.base_offset, again.last_offset) == (last.base_offset, last.last_offset)
            assert append(taken, 100, size).base_offset == 100
        finally:
            second.close()

    asyncio.run(scenario())
