"""Requests to a partition its broker is opening (real SeaweedFS, a real ObjectStore
handing a partition over and back, the real Fetch handler).

From its claim the metadata names the new owner of a partition, while restoring it takes
hundreds of milliseconds more (seconds when the bucket is slow). A fetch that arrives
meanwhile waits for the open, within its own max wait, and is answered with records; a
produce is refused once the partition serves
(``test_produce_after_refusal.py::test_a_request_to_a_partition_being_opened_is_refused_once_it_serves``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol.fetch import FetchRequest_v4
from test_object_partition_moves import BUCKET, produce, values
from test_produce_after_refusal import connection, one_broker

from floe.broker import fetch
from floe.broker.core import Broker, RequestContext
from floe.errors import ErrorCode
from floe.protocol.batch import scan
from floe.protocol.codec import decode_request, response_class
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

T = TopicName("opening")
P0 = PartitionId(0)


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


async def fetch_from(broker: Broker, offset: int, max_wait_ms: int) -> tuple[ErrorCode, int]:
    """One fetch of partition 0 from ``offset``; returns its error and the number of
    batches it carries."""
    req = FetchRequest_v4(
        replica_id=-1, max_wait_time=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, topics=[(T, [(P0, offset, 1 << 20)])],
    )  # fmt: skip
    _, decoded = decode_request(req.build_request_header(1, "c").encode() + req.encode())
    ctx = RequestContext(1, 4, 1, "c", "p", response_class(1, 4), connection())
    reply: Any = fetch.handle(broker, ctx, decoded)
    response = await reply if asyncio.iscoroutine(reply) else reply
    (topic,) = response.responses
    (part,) = topic.partitions
    return ErrorCode(part.error_code), len(scan(part.records or b""))


def test_a_fetch_of_a_partition_being_opened_is_answered_with_records_once_it_serves(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """Answered at once, the consumer got NOT_LEADER_OR_FOLLOWER and refreshed its
    metadata, which named the same broker, and librdkafka fetched again only after its
    fetch.error.backoff.ms (500 ms)."""

    async def scenario() -> None:
        with one_broker(s3, tmp_path, T) as (store, broker):
            await produce(store.partition(T, P0), store, values("a", 3))
            await store.release(T, P0)
            opening = asyncio.ensure_future(store.acquire(T, P0))
            await asyncio.sleep(0)  # the open started: it reads the bucket
            assert await fetch_from(broker, 0, 10_000) == (ErrorCode.none, 3)
            await opening
            # a fetch that does not wait is answered at once, as before
            await store.release(T, P0)
            opening = asyncio.ensure_future(store.acquire(T, P0))
            await asyncio.sleep(0)
            assert await fetch_from(broker, 0, 0) == (ErrorCode.not_leader_or_follower, 0)
            await opening

    asyncio.run(scenario())
