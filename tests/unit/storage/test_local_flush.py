"""Group commit and the interval flush policy."""

from __future__ import annotations

import asyncio

from localstore_helpers import StoreFactory, T, append, batch, records

from floe.storage.local import LocalStore
from floe.types import Offset, PartitionId


def test_concurrent_waiters_share_fsync_rounds(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 2, {"segment.bytes": "2000"})
    logs = [store.partition(T, PartitionId(p)) for p in range(2)]

    async def producer(i: int) -> None:
        plog = logs[i % 2]
        append(plog, batch(records(3, size=100)))
        await store.wait_durable([plog])
        assert plog.recovery_point >= 3

    async def main() -> None:
        waiters = 50
        tasks = []
        for i in range(waiters):
            tasks.append(asyncio.create_task(producer(i)))
            if i % 10 == 0:
                await asyncio.sleep(0)  # let a round start while others keep arriving
        await asyncio.gather(*tasks)
        assert 1 <= store.fsync_rounds < waiters
        for plog in logs:
            assert plog.recovery_point == plog.log_end_offset
            assert not plog.dirty
        rounds = store.fsync_rounds
        await store.wait_durable(logs)  # nothing new: no round
        assert store.fsync_rounds == rounds

    asyncio.run(main())


def test_segment_deletion_racing_an_fsync_round(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))

    async def main() -> None:
        for _ in range(20):
            append(plog, batch(records(2, size=1000)))
            waiter = asyncio.create_task(store.wait_durable([plog]))
            await asyncio.sleep(0)
            plog.roll()
            plog.delete_records(Offset(-1))  # closes the segment being fsynced
            await waiter
        assert len(plog.segments) == 1

    asyncio.run(main())
    assert plog.log_end_offset == 40


def test_interval_policy_flushes_in_background(open_store: StoreFactory) -> None:
    store: LocalStore = open_store(log_flush_policy="interval", log_flush_interval_ms=5)
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))

    async def main() -> None:
        store.start_background_flush()
        append(plog, batch(records(3)))
        await store.wait_durable([plog])  # immediate under this policy
        assert store.fsync_rounds == 0
        for _ in range(200):
            if not plog.dirty:
                break
            await asyncio.sleep(0.01)
        assert store.fsync_rounds >= 1
        assert plog.recovery_point == 3
        store.close()

    asyncio.run(main())


def test_durable_offset_is_what_was_fsynced(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))

    async def main() -> None:
        append(plog, batch(records(3)))
        assert plog.durable_offset == 0  # written to the OS only
        await store.wait_durable([plog])
        assert plog.durable_offset == 3
        append(plog, batch(records(2)))
        assert plog.durable_offset == 3

    asyncio.run(main())
    store.close()
    assert open_store().partition(T, PartitionId(0)).durable_offset == 5


def test_sync_fsyncs_now_under_the_interval_policy(open_store: StoreFactory) -> None:
    store: LocalStore = open_store(log_flush_policy="interval", log_flush_interval_ms=60_000)
    store.create_topic(T, 2, {})
    a, b = (store.partition(T, PartitionId(p)) for p in range(2))

    async def main() -> None:
        append(a, batch(records(3)))
        append(b, batch(records(4)))
        await store.wait_durable([a])
        assert (a.durable_offset, store.fsync_rounds) == (0, 0)
        await asyncio.gather(store.sync([a]), store.sync([a, b]))  # one shared round
        assert (a.durable_offset, b.durable_offset, store.fsync_rounds) == (3, 4, 1)
        await store.sync([a, b])  # nothing new: no round
        assert store.fsync_rounds == 1

    asyncio.run(main())
