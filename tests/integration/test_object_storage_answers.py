"""What an acks=all producer is told when the bucket fails under its records, on a real
``floe up`` with ``storage.type=s3`` whose link to SeaweedFS goes through a proxy the
test cuts (:mod:`helpers.chaos_proxy`).

Records the broker appended stay queued when a WAL upload fails, and the next upload
writes them: they were written, only late. librdkafka takes KAFKA_STORAGE_ERROR (and
NOT_LEADER_OR_FOLLOWER) as "not persisted": after it, a sequence error on a later
request makes it bump its epoch and send those records again under new sequence numbers,
which no broker can recognise, so they are written twice (a chaos run found 24 records
twice). Kafka's answer for records in the log whose durability the broker could not
wait for is NOT_ENOUGH_REPLICAS_AFTER_APPEND, which every client takes as "possibly
persisted" and retries with the same sequence, which the idempotent check answers with
their first offset.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import ProducerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from floe.errors import ErrorCode
from floe.protocol.records import Record, encode_batch
from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.chaos_proxy import ProxyHub
from helpers.cluster import ask, consume_values
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-answers"


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


@pytest.fixture
def hub() -> Iterator[ProxyHub]:
    made = ProxyHub()
    try:
        yield made
    finally:
        made.close()


def _produce(conn: socket.socket, topic: str, pid: int, seq: int) -> Any:
    """One acks=all batch of one record (value ``v<seq>``) to partition 0 by idempotent
    producer ``pid`` (epoch 0) at sequence ``seq``: the partition's answer."""
    records = encode_batch(
        [Record(0, int(time.time() * 1000), b"k", f"v{seq}".encode())],
        base_offset=0, producer_id=pid, producer_epoch=0, base_sequence=seq,
    )  # fmt: skip
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )
    return ask(conn, request, seq + 10).responses[0].partition_responses[0]


def test_records_appended_before_a_failed_upload_are_possibly_persisted(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, hub: ProxyHub
) -> None:
    link = hub.proxy("s3", s3.s3_endpoint.removeprefix("http://"))
    settings = s3.log_settings(BUCKET, f"a-{uuid.uuid4().hex[:8]}")
    b = broker_factory({**settings, "storage.s3.endpoint": f"http://{link.address}"})
    topic = create_topic(b.bootstrap, f"t-{uuid.uuid4().hex[:8]}", 1)
    with socket.create_connection((b.host, b.port), timeout=60) as conn:
        init = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(timedelta(seconds=10)),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        )
        pid = ask(conn, init, 1).producer_id
        assert _produce(conn, topic, pid, 0).error_code == ErrorCode.none
        link.cut()
        failed = _produce(conn, topic, pid, 1)
        link.heal()
        assert failed.error_code == ErrorCode.not_enough_replicas_after_append
        deadline = time.monotonic() + 60
        while watermarks(b.bootstrap, topic, 1)[0][1] < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the next upload writes the queued record
        retried = _produce(conn, topic, pid, 1)
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 1)
    assert sorted(consume_values(b.bootstrap, topic, 2)) == [b"v0", b"v1"]
