"""Fetch reads at most what its response may carry (KIP-74, broker ``fetch.max.bytes``).

Raw Fetch v12 requests (written and read with kio) check the byte limits exactly; real
consumers check that a small broker cap still lets every client read everything. The
broker is private to this module: it runs with a small ``fetch.max.bytes``.
"""

from __future__ import annotations

import io
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32, i32Timedelta, i64

from floe.errors import ErrorCode
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import (
    aiokafka_consume,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
)
from helpers.records import Record

FETCH_MAX_BYTES = 64 * 1024
VALUE_BYTES = 10_000
"""Each record is produced as its own batch of a little more than this (incompressible)."""


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(
        tmp_path_factory.mktemp("fetchcap") / "data",
        {"auto.create.topics.enable": "false", "fetch.max.bytes": str(FETCH_MAX_BYTES)},
    )
    try:
        yield b.start()
        b.stop()
    finally:
        b.close()


def produce_batches(b: Broker, topic: str, partition: int, n: int) -> list[Record]:
    """``n`` records of random bytes, one batch each."""
    records = [Record(b"k%d" % i, os.urandom(VALUE_BYTES), partition=partition) for i in range(n)]
    return confluent_produce(b.bootstrap, topic, records, **{"batch.num.messages": 1})


def fetch(
    b: Broker,
    topic: str,
    partitions: list[int],
    *,
    max_bytes: int,
    partition_max_bytes: int,
    min_bytes: int = 0,
    max_wait_ms: int = 0,
) -> dict[int, Any]:
    """One Fetch v12 from offset 0 of ``partitions``; the response per partition."""
    request = FetchRequest(
        cluster_id=None,
        replica_id=i32(-1),  # type: ignore[arg-type]
        max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=topic,  # type: ignore[arg-type]
                partitions=tuple(
                    FetchPartition(
                        partition=i32(p),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(partition_max_bytes),
                    )
                    for p in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=i32(5),
            client_id="fetch-bounds",
        ),
    )
    entity_writer(FetchRequest)(buf, request)
    payload = buf.getvalue()
    with socket.create_connection((b.host, b.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        data = memoryview(recv_exactly(s, size)).toreadonly()
    _, pos = entity_reader(ResponseHeader)(data, 0)
    body, _ = entity_reader(FetchResponse)(data, pos)
    assert body.error_code == 0
    return {p.partition_index: p for p in body.responses[0].partitions}


def recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return bytes(buf)


def batch_sizes(records: bytes) -> list[int]:
    """Sizes of the whole batches in ``records`` (offset, length, then ``length`` bytes)."""
    sizes, pos = [], 0
    while pos < len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        sizes.append(12 + length)
        pos += 12 + length
    assert pos == len(records), "a partial batch in the response"
    return sizes


def test_max_bytes_zero_returns_one_batch_of_the_first_partition_only(capped: Broker) -> None:
    """KIP-74: a zero response limit still returns the first partition's first batch,
    so the consumer progresses; nothing more (it was read as 2 GiB before)."""
    topic = create_topic(capped.bootstrap, partitions=2)
    produce_batches(capped, topic, 0, 3)
    produce_batches(capped, topic, 1, 3)
    got = fetch(capped, topic, [0, 1], max_bytes=0, partition_max_bytes=1 << 20)
    assert len(batch_sizes(bytes(got[0].records))) == 1
    assert bytes(got[1].records) == b""
    assert got[1].error_code == 0 and got[1].high_watermark == 3


def test_min_bytes_above_the_response_limit_does_not_wait(capped: Broker) -> None:
    """Kafka caps min_bytes by the response limit: with max_bytes=0 an empty partition
    is answered at once instead of after max_wait."""
    topic = create_topic(capped.bootstrap)
    started = time.monotonic()
    got = fetch(
        capped, topic, [0], max_bytes=0, partition_max_bytes=1 << 20, min_bytes=1, max_wait_ms=5000
    )
    assert time.monotonic() - started < 2.5
    assert bytes(got[0].records) == b"" and got[0].error_code == 0


def test_broker_fetch_max_bytes_caps_what_the_client_asks(capped: Broker) -> None:
    """A client asking for 2 GiB gets at most fetch.max.bytes of whole batches."""
    topic = create_topic(capped.bootstrap, partitions=2)
    produce_batches(capped, topic, 0, 12)  # ~120 kB, about twice the cap
    produce_batches(capped, topic, 1, 12)
    got = fetch(capped, topic, [0, 1], max_bytes=2**31 - 1, partition_max_bytes=2**31 - 1)
    first = batch_sizes(bytes(got[0].records))
    second = batch_sizes(bytes(got[1].records))
    assert 0 < sum(first) + sum(second) <= FETCH_MAX_BYTES
    assert sum(first) + first[0] > FETCH_MAX_BYTES  # every batch that fits (same sizes)
    assert second == []  # the budget is spent on the first partition


def test_partition_max_bytes_is_honoured_per_partition(capped: Broker) -> None:
    topic = create_topic(capped.bootstrap, partitions=2)
    produce_batches(capped, topic, 0, 5)
    produce_batches(capped, topic, 1, 5)
    limit = 3 * VALUE_BYTES + 500  # room for two whole batches (and part of a third)
    got = fetch(capped, topic, [0, 1], max_bytes=1 << 20, partition_max_bytes=limit)
    for p in (0, 1):
        sizes = batch_sizes(bytes(got[p].records))
        assert len(sizes) == 2 or (len(sizes) == 3 and sum(sizes) <= limit), sizes
        assert sum(sizes) <= limit


def test_a_batch_larger_than_every_limit_still_comes_whole(capped: Broker) -> None:
    """The first batch of the first non-empty partition ignores the limits (KIP-74);
    the next partition, whose batch does not fit the budget left, gets nothing."""
    topic = create_topic(capped.bootstrap, partitions=2)
    big = [Record(b"big", os.urandom(FETCH_MAX_BYTES * 2), partition=0)]
    confluent_produce(capped.bootstrap, topic, big)
    produce_batches(capped, topic, 1, 1)
    got = fetch(capped, topic, [0, 1], max_bytes=1024, partition_max_bytes=1024)
    assert len(batch_sizes(bytes(got[0].records))) == 1
    assert len(bytes(got[0].records)) > FETCH_MAX_BYTES
    assert bytes(got[1].records) == b""


@pytest.mark.parametrize("consume", [confluent_consume, kafka_python_consume, aiokafka_consume])
def test_real_consumers_read_everything_through_a_small_cap(capped: Broker, consume: Any) -> None:
    """Clients ask for 50 MiB, the broker answers 64 KiB at a time: they still read all."""
    topic = create_topic(capped.bootstrap, partitions=2)
    sent = produce_batches(capped, topic, 0, 20) + produce_batches(capped, topic, 1, 20)
    got = consume(capped.bootstrap, topic, {0: 20, 1: 20})
    key = lambda r: (r.partition, r.offset)  # noqa: E731
    assert [(r.key, r.value) for r in sorted(got, key=key)] == [
        (r.key, r.value) for r in sorted(sent, key=key)
    ]


@pytest.mark.parametrize("topic_id", [uuid.UUID(int=0), uuid.uuid4()])
def test_fetch_by_an_unknown_topic_id_is_answered_unknown_topic_id(
    capped: Broker, topic_id: uuid.UUID
) -> None:
    """Fetch v13+ names topics by id only: the zero id and an unknown one get
    UNKNOWN_TOPIC_ID for their partitions (the handler failed and the connection was
    closed)."""
    from kio.schema.fetch.v13.request import FetchPartition as FetchPartition13
    from kio.schema.fetch.v13.request import FetchRequest as FetchRequest13
    from kio.schema.fetch.v13.request import FetchTopic as FetchTopic13
    from kio.schema.fetch.v13.response import FetchResponse as FetchResponse13

    request = FetchRequest13(
        cluster_id=None,
        replica_id=i32(-1),  # type: ignore[arg-type]
        max_wait=i32Timedelta.parse(timedelta(milliseconds=0)),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic13(
                topic_id=topic_id,
                partitions=(
                    FetchPartition13(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(
            request_api_key=request.__api_key__,
            request_api_version=request.__version__,
            correlation_id=i32(6),
            client_id="fetch-bounds",
        ),
    )
    entity_writer(FetchRequest13)(buf, request)
    payload = buf.getvalue()
    with socket.create_connection((capped.host, capped.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        data = memoryview(recv_exactly(s, size)).toreadonly()
    _, pos = entity_reader(ResponseHeader)(data, 0)
    body, _ = entity_reader(FetchResponse13)(data, pos)
    (topic,) = body.responses
    assert (topic.topic_id or uuid.UUID(int=0)) == topic_id  # kio reads the zero id as None
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_id]
