"""A dead broker's takeover does not wait for a handover under way (real SeaweedFS, the
real SQLite metadata store, each broker's real membership and object store in this
process).

A handover releases its partition first: it waits for the upload pass and copies the
partition's tail into partition objects, 83 ms at the median under load but 5.5 and
16.8 s in a slow spell of the bucket. The writer's pass ran its handovers before its
takeovers, so a member that died meanwhile stayed unavailable until they ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cluster_commit_point import broker, member
from test_object_partition_moves import config, kill, produce, read_values, values

from floe.storage.object import layout
from floe.storage.object.bucket import Bucket
from floe.storage.object.sharing import PartitionSharing
from floe.storage.object.store import ObjectStore
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-moves"  # the bucket of the config() shared with those modules
T = TopicName("moving")
P0, P1 = PartitionId(0), PartitionId(1)


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def test_a_dead_members_takeover_does_not_wait_for_a_handover_under_way(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """The writer (broker 1) is handing partition 0 over to broker 2, its release held
    up by an upload pass that does not end, when broker 3 dies leading partition 1: the
    writer's pass takes partition 1 over with every committed record, and partition 0
    moves to broker 2 once the upload pass ends."""

    async def scenario() -> None:
        prefix = f"ho-{uuid.uuid4().hex[:8]}"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 2, {})
        two, second = broker(s3, tmp_path, prefix, 2)
        three, third = broker(s3, tmp_path, prefix, 3)
        await produce(first.partition(T, P1), first, values("a", 2))
        await first.release(T, P1)  # broker 3 leads partition 1, then dies
        assert await asyncio.to_thread(one.hand_over, (T, P1), 3)
        await asyncio.to_thread(three.refresh)
        assert await asyncio.to_thread(three.claim, [(T, P1)]) == [(T, P1)]
        await produce(await third.acquire(T, P1), third, values("b", 2))
        kill(third)
        three.leave()
        await asyncio.to_thread(one.plan, {(T, P0): 2})  # a balancing move
        await asyncio.to_thread(one.refresh)
        sharing = PartitionSharing(first, one, 1, 60.0)
        async with first._uploading:  # an upload pass that does not end
            await asyncio.wait_for(sharing.step(), 20)
            assert first.leads(T, P1)
            every = list(enumerate(values("a", 2) + values("b", 2)))
            assert read_values(first.partition(T, P1)) == every
            assert one.owner(T, P0) == 1
        deadline = time.monotonic() + 20
        while one.owner(T, P0) != 2:
            assert time.monotonic() < deadline, "partition 0 was never handed over"
            await asyncio.sleep(0.05)
        assert not first.leads(T, P0)
        await sharing.stop()
        for store in (first, second):
            store.close()
        for membership in (one, two):
            membership.leave()

    asyncio.run(scenario())


class RefusesPartitionObjects(Bucket):
    """The real bucket, refusing PUTs of partition objects while ``refusing``."""

    refusing = False

    def __init__(self, real: Bucket) -> None:
        super().__init__(real._store, real.description)

    def put(self, key: str, data: bytes | memoryview, *, create: bool = False) -> None:
        self._check(key)
        super().put(key, data, create=create)

    async def put_async(self, key: str, data: bytes | memoryview, *, create: bool = False) -> None:
        self._check(key)
        await super().put_async(key, data, create=create)

    def _check(self, key: str) -> None:
        if self.refusing and key.startswith(layout.DATA_PREFIX):
            raise OSError("injected: the bucket refused the PUT")


def test_a_failed_handover_is_logged_and_the_passes_stop_cleanly(
    s3: SeaweedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handover whose release fails (here the WAL writer is shut down: no upload
    goes through) is logged, the partition stays led here, and stopping the passes
    does not raise its error: a fenced member stopping so left its Kafka port open, and
    its next try to serve found the port in use (the chaos suite, etcd seed 59710)."""
    caplog.set_level(logging.INFO, logger="floe.storage.object.sharing")

    async def scenario() -> None:
        prefix = f"hf-{uuid.uuid4().hex[:8]}"
        one = member(tmp_path / "cluster.db", 1)
        settings = config(s3, tmp_path, prefix, 1)
        bucket = RefusesPartitionObjects(Bucket.from_config(settings))
        first = ObjectStore(tmp_path / "broker1", settings, bucket=bucket, guard=one)
        first.start_background_flush()
        first.create_topic(T, 1, {})
        two, second = broker(s3, tmp_path, prefix, 2)
        await produce(first.partition(T, P0), first, values("a", 2))
        await asyncio.to_thread(one.plan, {(T, P0): 2})
        await asyncio.to_thread(one.refresh)
        sharing = PartitionSharing(first, one, 1, 60.0)
        bucket.refusing = True
        await sharing.step()
        deadline = time.monotonic() + 20
        while not [r for r in caplog.records if "cluster.handover_failed" in r.getMessage()]:
            assert time.monotonic() < deadline, "the failed handover was never logged"
            await asyncio.sleep(0.05)
        await sharing.stop()
        assert first.leads(T, P0)
        assert one.owner(T, P0) == 1
        for store in (first, second):
            store.close()
        for membership in (one, two):
            membership.leave()

    asyncio.run(scenario())
