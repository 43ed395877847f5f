"""Hostile bytes on the Kafka listener: the broker answers or drops that connection only.

Each test throws malformed input over raw sockets, then checks the process is still
alive and a real client (confluent-kafka) still produces and consumes. The broker is
private to this module so a crash here cannot take other modules' tests down with it.
"""

from __future__ import annotations

import importlib
import io
import random
import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.metadata import MetadataRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v3
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record

READ_DEADLINE_S = 10.0
UNSUPPORTED_VERSION = 35


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("robust") / "data", {"auto.create.topics.enable": "false"})
    try:
        yield b.start()
        b.stop()
    finally:
        b.close()


def assert_still_serving(b: Broker) -> None:
    b.assert_alive()
    topic = create_topic(b.bootstrap)
    acked = confluent_produce(b.bootstrap, topic, [Record(b"k", b"still here", partition=0)])
    assert acked[0].offset == 0
    assert confluent_consume(b.bootstrap, topic, {0: 1})[0].value == b"still here"


def connect(b: Broker) -> socket.socket:
    s = socket.create_connection((b.host, b.port), timeout=READ_DEADLINE_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: bytes = b"fuzz",
    flexible: bool = False,
) -> bytes:
    out = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    return out + (b"\x00" if flexible else b"")


def request(req: object, correlation_id: int) -> bytes:
    hdr = req.build_request_header(correlation_id, "fuzz")  # type: ignore[attr-defined]
    return frame(hdr.encode() + req.encode())  # type: ignore[attr-defined]


def produce_request(topic: str, correlation_id: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, int(time.time() * 1000), b"k", b"value %d" % i, [("h", b"v")])
    req = ProduceRequest_v3(
        transactional_id=None,
        required_acks=-1,
        timeout=5000,
        topics=[(topic, [(0, bytes(builder.build()))])],
    )
    return request(req, correlation_id)


def read_frame(s: socket.socket) -> bytes | None:
    """One response frame, or None if the broker closed the connection."""

    def exactly(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = s.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    size = exactly(4)
    if size is None:
        return None
    return exactly(struct.unpack(">i", size)[0])


def assert_closed_or_answered(s: socket.socket, correlation_id: int) -> bytes | None:
    """The broker must not hang: it answers this correlation id or closes (no hang)."""
    got = read_frame(s)
    if got is not None:
        assert struct.unpack(">i", got[:4])[0] == correlation_id, got[:16]
    return got


def test_raw_api_versions_round_trip(victim: Broker) -> None:
    """The raw-socket helpers speak Kafka: the baseline the other tests rely on."""
    with connect(victim) as s:
        s.sendall(request(ApiVersionRequest_v0(), 7))
        resp = read_frame(s)
    assert resp is not None
    corr, err, count = struct.unpack(">ihi", resp[:10])
    assert (corr, err) == (7, 0)
    keys = {struct.unpack(">h", resp[10 + 6 * i : 12 + 6 * i])[0] for i in range(count)}
    assert {0, 1, 2, 3, 18, 19, 20} <= keys


def test_unsupported_api_versions_version(victim: Broker) -> None:
    """Kafka answers an ApiVersions it cannot parse with v0 and UNSUPPORTED_VERSION."""
    with connect(victim) as s:
        s.sendall(frame(header(18, 127, 11, flexible=True) + b"\x00\x00\x00"))
        resp = read_frame(s)
    assert resp is not None, "connection closed instead of an UNSUPPORTED_VERSION answer"
    corr, err = struct.unpack(">ih", resp[:6])
    assert (corr, err) == (11, UNSUPPORTED_VERSION)
    assert_still_serving(victim)


@pytest.mark.parametrize(
    ("api_key", "api_version"), [(32000, 0), (-1, 0), (0, 99), (3, 32000), (1, -5)]
)
def test_unknown_api_key_or_version(victim: Broker, api_key: int, api_version: int) -> None:
    with connect(victim) as s:
        s.sendall(frame(header(api_key, api_version, 21) + b"\x00" * 16))
        assert_closed_or_answered(s, 21)
    assert_still_serving(victim)


@pytest.mark.parametrize("size", [0x7FFFFFFF, 200 * 1024 * 1024, -1, -0x80000000])
def test_oversized_or_negative_frame_size_closes_connection(victim: Broker, size: int) -> None:
    with connect(victim) as s:
        s.sendall(struct.pack(">i", size) + header(18, 0, 5))
        assert read_frame(s) is None, "broker answered a frame it must refuse"
    assert_still_serving(victim)


def test_truncated_frames(victim: Broker) -> None:
    topic = create_topic(victim.bootstrap)
    frames = [
        request(ApiVersionRequest_v0(), 1),
        request(MetadataRequest_v1(topics=[topic]), 2),
        produce_request(topic, 3),
    ]
    for full in frames:
        cuts = sorted({*range(0, 40), *range(40, len(full), max(1, len(full) // 25))})
        for cut in cuts:
            with connect(victim) as s:
                s.sendall(full[:cut])
                s.shutdown(socket.SHUT_WR)
                read_frame(s)  # whatever it does, it must not wedge
        victim.assert_alive()
    # None of the truncated produce requests wrote anything.
    assert_still_serving(victim)


def test_a_stalled_connection_does_not_block_others(victim: Broker) -> None:
    topic = create_topic(victim.bootstrap)
    full = produce_request(topic, 9)
    with connect(victim) as stalled:
        stalled.sendall(full[: len(full) // 2])
        assert_still_serving(victim)
        stalled.sendall(full[len(full) // 2 :])
        resp = read_frame(stalled)
    assert resp is not None and struct.unpack(">i", resp[:4])[0] == 9


def test_garbage_after_a_valid_request(victim: Broker) -> None:
    with connect(victim) as s:
        s.sendall(request(ApiVersionRequest_v0(), 1) + frame(b"\xff" * 64))
        first = read_frame(s)
        assert first is not None and struct.unpack(">i", first[:4])[0] == 1
        read_frame(s)  # an error answer or a closed connection: either is fine
    assert_still_serving(victim)


def throw(b: Broker, data: bytes) -> None:
    with connect(b) as s:
        s.settimeout(1.0)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass


def test_random_bytes_seeded(victim: Broker) -> None:
    rng = random.Random(4242)
    for i in range(150):
        junk = rng.randbytes(rng.randrange(0, 300))
        throw(victim, junk if i % 2 else frame(junk))
    victim.assert_alive()
    assert_still_serving(victim)


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    api_key=st.integers(0, 75),
    api_version=st.integers(0, 17),
    flexible=st.booleans(),
    body=st.binary(max_size=200),
)
def test_fuzzed_bodies_of_real_apis(
    victim: Broker, api_key: int, api_version: int, flexible: bool, body: bytes
) -> None:
    """Real API keys and versions with garbage bodies reach the request parsers."""
    throw(victim, frame(header(api_key, api_version, 1, flexible=flexible) + body))
    victim.assert_alive()


def test_still_serving_after_fuzzing(victim: Broker) -> None:
    assert_still_serving(victim)


def test_pipelined_requests_are_answered_in_order(victim: Broker) -> None:
    """Kafka answers the requests of one connection in the order they were sent."""
    topic = create_topic(victim.bootstrap)
    reqs = [ApiVersionRequest_v0(), MetadataRequest_v1(topics=[topic])]
    with connect(victim) as s:
        s.sendall(b"".join(request(reqs[i % 2], 1000 + i) for i in range(60)))
        seen = []
        for _ in range(60):
            resp = read_frame(s)
            assert resp is not None, f"closed after {len(seen)} responses"
            seen.append(struct.unpack(">i", resp[:4])[0])
    assert seen == [1000 + i for i in range(60)]


def test_many_concurrent_connections(victim: Broker) -> None:
    conns = [connect(victim) for _ in range(100)]
    try:
        for i, s in enumerate(conns):
            s.sendall(request(ApiVersionRequest_v0(), i))
        for i, s in enumerate(conns):
            resp = read_frame(s)
            assert resp is not None and struct.unpack(">ih", resp[:6]) == (i, 0)
    finally:
        for s in conns:
            s.close()
    assert_still_serving(victim)


def varint(n: int) -> bytes:
    """Unsigned varint, as flexible Kafka versions encode lengths and tags."""
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def unknown_tags(*tags: int) -> bytes:
    return varint(len(tags)) + b"".join(varint(t) + varint(3) + b"\x01\x02\x03" for t in tags)


def test_unknown_tagged_fields_are_ignored(victim: Broker) -> None:
    """Flexible versions may carry tagged fields a server does not know: it skips them."""
    hdr = struct.pack(">hhih", 18, 3, 31, 4) + b"fuzz" + unknown_tags(99)
    body = varint(5) + b"test" + varint(4) + b"1.0" + unknown_tags(77, 1000)
    with connect(victim) as s:
        s.sendall(frame(hdr + body))
        resp = read_frame(s)
    assert resp is not None, "connection closed on unknown tagged fields"
    corr, err = struct.unpack(">ih", resp[:6])  # ApiVersions answers with header v0
    assert (corr, err) == (31, 0)

    # Metadata v12 (flexible request header v2 and body), all topics.
    hdr = struct.pack(">hhih", 3, 12, 32, 4) + b"fuzz" + unknown_tags(5)
    body = varint(0) + b"\x00\x00" + unknown_tags(42)
    with connect(victim) as s:
        s.sendall(frame(hdr + body))
        resp = read_frame(s)
    assert resp is not None, "connection closed on unknown tagged fields"
    assert struct.unpack(">i", resp[:4])[0] == 32
    assert_still_serving(victim)


def produce_and_read_errors(b: Broker, data: bytes) -> list[tuple[int, int]]:
    """Send a Produce v3 frame; (partition, error code) of each partition answered."""
    from aiokafka.protocol.produce import ProduceResponse_v3

    with connect(b) as s:
        s.sendall(data)
        resp = read_frame(s)
    assert resp is not None, "connection closed instead of a Produce answer"
    decoded = ProduceResponse_v3.decode(resp[4:])
    return [(p[0], p[1]) for _, parts in decoded.topics for p in parts]


def test_corrupt_batch_is_refused_with_corrupt_message(victim: Broker) -> None:
    topic = create_topic(victim.bootstrap)
    good = produce_request(topic, 41)
    # Flip one byte inside the records of the batch: its CRC32C no longer matches.
    bad = bytearray(good)
    bad[-5] ^= 0xFF
    assert produce_and_read_errors(victim, bytes(bad)) == [(0, 2)]  # CORRUPT_MESSAGE
    assert_still_serving_on(victim, topic, expected_offset=0)


def test_produce_to_missing_partition(victim: Broker) -> None:
    topic = create_topic(victim.bootstrap)
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, int(time.time() * 1000), b"k", b"v", [])
    req = ProduceRequest_v3(
        transactional_id=None,
        required_acks=-1,
        timeout=5000,
        topics=[(topic, [(7, bytes(builder.build()))])],
    )
    assert produce_and_read_errors(victim, request(req, 51)) == [(7, 3)]  # UNKNOWN_TOPIC_OR_PART
    assert_still_serving_on(victim, topic, expected_offset=0)


def assert_still_serving_on(b: Broker, topic: str, expected_offset: int) -> None:
    """A real client appends to ``topic`` at ``expected_offset``: nothing was written before."""
    acked = confluent_produce(b.bootstrap, topic, [Record(b"k", b"after", partition=0)])
    assert acked[0].offset == expected_offset


@pytest.mark.parametrize("version", [10, 11])
def test_a_metadata_request_by_topic_id_before_v12_is_refused_cleanly(
    victim: Broker, version: int
) -> None:
    """Metadata v10 and v11 carry a nullable topic name, but their responses cannot
    carry a topic without one (topic ids in requests are v12+, as Kafka's
    INVALID_REQUEST says): the broker drops that connection, and logs no failure."""
    module = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    extra = {"include_cluster_authorized_operations": False} if version == 10 else {}
    body = module.MetadataRequest(
        topics=(module.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
        **extra,
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(
            request_api_key=i16(3),
            request_api_version=i16(version),
            correlation_id=i32(5),
            client_id="fuzz",
        ),
    )
    entity_writer(type(body))(buf, body)
    mark = len(victim.stderr_text())
    with connect(victim) as s:
        s.sendall(frame(buf.getvalue()))
        assert read_frame(s) is None
    assert_still_serving(victim)
    logged = victim.stderr_text()[mark:]
    assert "request.failed" not in logged and "Traceback" not in logged, logged[-2000:]
    assert "connection.closed_by_broker" in logged
