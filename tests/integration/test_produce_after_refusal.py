"""A producer's pipelined request after one refused leadership (real SeaweedFS, a real
ObjectStore handing a partition over and back, the real Produce handler).

While a broker is not serving a partition yet (restoring it after a takeover, the
cluster's metadata already naming it), a produce request is refused
NOT_LEADER_OR_FOLLOWER; the producer's next request, already in flight, may arrive once
the partition is served, with a sequence that does not follow what the partition holds.
Answered OUT_OF_ORDER_SEQUENCE_NUMBER, that gap made librdkafka bump its producer epoch
and send records it had in flight to other partitions again as new ones (a record
written twice in the chaos suite, seed 224621). The gap's request is refused as its
predecessor was, on that connection, so the producer sends both again in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol.produce import ProduceRequest_v7
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from test_object_partition_moves import BUCKET, config

from floe.broker import produce
from floe.broker.core import Broker, RequestContext
from floe.config.security import ListenerSpec
from floe.errors import ErrorCode
from floe.protocol.codec import decode_request, response_class
from floe.security.session import Session
from floe.storage.object.store import ObjectStore
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

T = TopicName("refused")
P0 = PartitionId(0)
PRODUCER_ID, EPOCH = 7, 0


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


@contextlib.contextmanager
def one_broker(
    s3: SeaweedServer, tmp_path: Path, topic: TopicName
) -> Iterator[tuple[ObjectStore, Broker]]:
    """A broker on a real ObjectStore, started (call from the event loop), with
    ``topic`` of one partition; the store is closed after."""
    settings = config(s3, tmp_path, f"r-{uuid.uuid4().hex[:8]}", 1)
    store = ObjectStore(tmp_path / "one", settings)
    store.start_background_flush()
    try:
        store.create_topic(topic, 1, {})
        yield (
            store,
            Broker(
                store=store, config=settings, cluster_id="c", advertised_host="h", advertised_port=1
            ),
        )
    finally:
        store.close()


def connection() -> Session:
    return Session(ListenerSpec("PLAINTEXT", "PLAINTEXT", "", 0, "", 0))


def idempotent_batch(sequence: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, PRODUCER_ID, EPOCH, sequence, 1 << 20)
    b.append(0, int(time.time() * 1000), None, f"v{sequence}".encode(), [])
    return bytes(b.build())


async def send(broker: Broker, session: Session, sequence: int) -> ErrorCode:
    """One acks=all produce of one record at ``sequence`` on the connection ``session``;
    returns the partition's error code."""
    req = ProduceRequest_v7(
        transactional_id=None, required_acks=-1, timeout=10_000,
        topics=[(T, [(P0, idempotent_batch(sequence))])],
    )  # fmt: skip
    _, decoded = decode_request(req.build_request_header(1, "c").encode() + req.encode())
    ctx = RequestContext(0, 7, 1, "c", "p", response_class(0, 7), session)
    reply: Any = produce.handle(broker, ctx, decoded)
    response = await reply if asyncio.iscoroutine(reply) else reply
    (topic,) = response.responses
    (part,) = topic.partition_responses
    return ErrorCode(part.error_code)


def test_the_request_after_a_refused_one_is_refused_the_same_not_out_of_order(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        with one_broker(s3, tmp_path, T) as (store, broker):
            pipeline, other = connection(), connection()
            assert await send(broker, pipeline, 0) is ErrorCode.none

            await store.release(T, P0)  # not served here for a while (a takeover's restore)
            assert await send(broker, pipeline, 1) is ErrorCode.not_leader_or_follower
            await store.acquire(T, P0)  # served again: the partition holds sequence 0
            # the producer's next request, sent before it learnt of the refusal
            assert await send(broker, pipeline, 2) is ErrorCode.not_leader_or_follower
            # it sends both again, in order: both are written, nothing twice
            assert await send(broker, pipeline, 1) is ErrorCode.none
            assert await send(broker, pipeline, 2) is ErrorCode.none
            # once the refused partition took a batch, a gap is a gap again; and a
            # connection that was refused nothing always gets it as one
            assert await send(broker, pipeline, 4) is ErrorCode.out_of_order_sequence_number
            assert await send(broker, other, 5) is ErrorCode.out_of_order_sequence_number
            assert store.partition(T, P0).log_end_offset == 3

    asyncio.run(scenario())


def test_a_request_to_a_partition_being_opened_is_refused_once_it_serves(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """A produce to a partition this broker is opening (restoring it after a claim) is
    refused NOT_LEADER_OR_FOLLOWER only once it serves: the producer's retry right after
    that answer is written, rather than after the backoff its retries of refusals
    answered at once had grown to (librdkafka and the Java client back off up to 1 s)."""

    async def scenario() -> None:
        with one_broker(s3, tmp_path, T) as (store, broker):
            pipeline = connection()
            assert await send(broker, pipeline, 0) is ErrorCode.none
            await store.release(T, P0)
            opening = asyncio.ensure_future(store.acquire(T, P0))
            await asyncio.sleep(0)  # the open started: it reads the bucket
            assert await send(broker, pipeline, 1) is ErrorCode.not_leader_or_follower
            assert store.leads(T, P0), "the refusal was answered before the partition served"
            await opening
            assert await send(broker, pipeline, 1) is ErrorCode.none
            assert store.partition(T, P0).log_end_offset == 2

    asyncio.run(scenario())
