"""A produce request to a partition this broker is opening (real SeaweedFS, a real
ObjectStore restoring a partition from the bucket, the real Produce handler).

After a takeover the cluster names the new owner as soon as it claims a partition,
while it still restores the partition's tail from the bucket (0.3-3.4 s under the
member-kill benchmark's load). A request refused NOT_LEADER_OR_FOLLOWER meanwhile made
every client back off and ask for metadata again, and arrive up to 2.8 s after the
partition served. Kafka's own leaders do not answer before they are ready either: the
request waits for the open, bounded, and is then appended in the order it came.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_object_partition_moves import BUCKET, config
from test_produce_after_refusal import P0, T, connection, send

from floe.broker.core import Broker
from floe.errors import ErrorCode
from floe.storage.object.store import ObjectStore
from helpers.seaweed import SeaweedServer, seaweed_server


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def held_restore(store: ObjectStore, gate: asyncio.Event) -> None:
    """The store's restores start only once ``gate`` is set (a slow bucket)."""
    restore: Callable[..., Awaitable[None]] = store._takeover.restore

    async def slow(*args: Any) -> None:
        await gate.wait()
        await restore(*args)

    store._takeover.restore = slow  # type: ignore[method-assign]


async def opened_store(s3: SeaweedServer, tmp_path: Path) -> tuple[ObjectStore, Broker]:
    settings = config(s3, tmp_path, f"o-{uuid.uuid4().hex[:8]}", 1)
    store = ObjectStore(tmp_path / "one", settings)
    store.start_background_flush()
    store.create_topic(T, 1, {})
    broker = Broker(
        store=store, config=settings, cluster_id="c", advertised_host="h", advertised_port=1
    )
    return store, broker


def test_a_request_to_a_partition_being_opened_waits_for_it_and_keeps_its_order(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        store, broker = await opened_store(s3, tmp_path)
        try:
            pipeline = connection()
            assert await send(broker, pipeline, 0) is ErrorCode.none
            await store.release(T, P0)  # led elsewhere for a while, then taken back
            gate = asyncio.Event()
            held_restore(store, gate)
            opening = asyncio.create_task(store.acquire(T, P0))
            await asyncio.sleep(0)  # the open has started: restoring from the bucket
            # two pipelined requests, read while the partition is restored
            first = asyncio.create_task(send(broker, pipeline, 1))
            second = asyncio.create_task(send(broker, pipeline, 2))
            await asyncio.sleep(0.3)
            assert not first.done() and not second.done()  # waiting, not refused
            gate.set()
            await opening
            assert await first is ErrorCode.none
            assert await second is ErrorCode.none
            # a request read once it is open is appended after them
            assert await send(broker, pipeline, 3) is ErrorCode.none
            assert store.partition(T, P0).log_end_offset == 4
        finally:
            store.close()

    asyncio.run(scenario())


def test_a_request_is_refused_when_the_open_outlasts_its_timeout(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        store, broker = await opened_store(s3, tmp_path)
        try:
            pipeline = connection()
            assert await send(broker, pipeline, 0) is ErrorCode.none
            await store.release(T, P0)
            gate = asyncio.Event()
            held_restore(store, gate)
            opening = asyncio.create_task(store.acquire(T, P0))
            await asyncio.sleep(0)
            code = await send(broker, pipeline, 1, timeout_ms=300)
            assert code is ErrorCode.not_leader_or_follower  # as before: retried
            gate.set()
            await opening
            assert await send(broker, pipeline, 1) is ErrorCode.none
            assert store.partition(T, P0).log_end_offset == 2
        finally:
            store.close()

    asyncio.run(scenario())


def test_a_failed_open_answers_its_waiting_requests(s3: SeaweedServer, tmp_path: Path) -> None:
    async def scenario() -> None:
        store, broker = await opened_store(s3, tmp_path)
        try:
            pipeline = connection()
            assert await send(broker, pipeline, 0) is ErrorCode.none
            await store.release(T, P0)

            async def failing(*_args: Any) -> None:
                await asyncio.sleep(0.2)
                raise OSError("the bucket cannot be read")

            store._takeover.restore = failing  # type: ignore[method-assign]
            opening = asyncio.create_task(store.acquire(T, P0))
            await asyncio.sleep(0)
            waiting = asyncio.create_task(send(broker, pipeline, 1))
            with pytest.raises(OSError):
                await opening
            assert await asyncio.wait_for(waiting, 5) is ErrorCode.not_leader_or_follower
        finally:
            store.close()

    asyncio.run(scenario())
