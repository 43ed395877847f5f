"""What an acks=all producer is told when the bucket fails under its records, on a real
``floe up`` with ``storage.type=s3`` whose link to SeaweedFS goes through a proxy the
test cuts (:mod:`helpers.chaos_proxy`).

Records the broker appended stay queued when a WAL upload fails, and the next upload
writes them: they were written, only late. Any error answered for them is at best
"possibly persisted", and librdkafka, after a sequence error on a later request, bumps
its epoch and sends every record it holds no acknowledgement for again under new
sequence numbers, which no broker can recognise: records written in fact are written
twice (the chaos suite found 24 records twice after KAFKA_STORAGE_ERROR, and 5 after
NOT_ENOUGH_REPLICAS_AFTER_APPEND). So the request waits, as Kafka's acks=all waits for
its replicas: acknowledged once an upload carries the records, or REQUEST_TIMED_OUT at
the request's own timeout, which clients retry with the same sequence numbers (the
idempotent check answers the retry with the first offset).
"""

from __future__ import annotations

import socket
import threading
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


def test_a_produce_waits_through_a_failed_upload_until_its_records_are_written(
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
        healer = threading.Timer(3.0, link.heal)  # uploads fail for 3 s, then succeed
        healer.start()
        try:
            waited = produce_idempotent(conn, topic, 0, pid, 1)
        finally:
            healer.join()
        assert (waited.error_code, waited.base_offset) == (ErrorCode.none, 1)
        link.cut()  # now past the request's own timeout: possibly persisted
        late = produce_idempotent(conn, topic, 0, pid, 2, timeout_s=2)
        link.heal()
        assert late.error_code == ErrorCode.request_timed_out
        deadline = time.monotonic() + 60
        while watermarks(b.bootstrap, topic, 1)[0][1] < 3 and time.monotonic() < deadline:
            time.sleep(0.5)  # the next upload writes the queued record
        retried = produce_idempotent(conn, topic, 0, pid, 2)
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
    assert sorted(consume_values(b.bootstrap, topic, 3)) == [b"v0", b"v1", b"v2"]
