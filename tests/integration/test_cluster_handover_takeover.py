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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cluster_commit_point import broker
from test_object_partition_moves import kill, produce, read_values, values

from floe.storage.object.sharing import PartitionSharing
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
