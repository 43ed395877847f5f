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

import pytest

from floe.errors import ErrorCode
from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.chaos_proxy import ProxyHub
from helpers.cluster import consume_values, init_idempotent, produce_idempotent
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-answers"


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def test_records_appended_before_a_failed_upload_are_possibly_persisted(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, hub: ProxyHub
) -> None:
    link = hub.proxy("s3", s3.s3_endpoint.removeprefix("http://"))
    settings = s3.log_settings(BUCKET, f"a-{uuid.uuid4().hex[:8]}")
    b = broker_factory({**settings, "storage.s3.endpoint": f"http://{link.address}"})
    topic = create_topic(b.bootstrap, f"t-{uuid.uuid4().hex[:8]}", 1)
    with socket.create_connection((b.host, b.port), timeout=60) as conn:
        pid = init_idempotent(conn)
        assert produce_idempotent(conn, topic, 0, pid, 0).error_code == ErrorCode.none
        link.cut()
        failed = produce_idempotent(conn, topic, 0, pid, 1)
        link.heal()
        assert failed.error_code == ErrorCode.not_enough_replicas_after_append
        deadline = time.monotonic() + 60
        while watermarks(b.bootstrap, topic, 1)[0][1] < 2 and time.monotonic() < deadline:
            time.sleep(0.5)  # the next upload writes the queued record
        retried = produce_idempotent(conn, topic, 0, pid, 1)
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 1)
    assert sorted(consume_values(b.bootstrap, topic, 2)) == [b"v0", b"v1"]
