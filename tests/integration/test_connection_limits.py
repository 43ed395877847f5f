"""Connection limits and timeouts: no client holds a slot, memory or the event loop.

Raw sockets play the hostile or broken clients (too many connections, idle ones,
slowloris frames, a client that never reads, a frame with millions of items); real
clients and raw round trips check that everyone else is still served. Each test runs a
private broker with its own limits.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.fetch import FetchRequest_v4
from aiokafka.protocol.produce import ProduceRequest_v3
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from floe.server.connection import MAX_IN_FLIGHT
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record

BrokerFactory = Callable[..., Broker]
DEADLINE_S = 10.0


STALL_S = 2.5
"""Longest sentinel latency allowed: the defects stalled it 3-6 s; another test file
running beside this one under make test (2 workers on 2 cores) alone reached 1.1 s."""


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(req: object, correlation_id: int) -> bytes:
    hdr = req.build_request_header(correlation_id, "limits")  # type: ignore[attr-defined]
    return frame(hdr.encode() + req.encode())  # type: ignore[attr-defined]


def api_versions(correlation_id: int = 1) -> bytes:
    return request(ApiVersionRequest_v0(), correlation_id)


def connect(b: Broker, source_ip: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source_ip, 0))
    s.settimeout(DEADLINE_S)
    s.connect((b.host, b.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_frame(s: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""

    def exactly(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = s.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    size = exactly(4)
    return None if size is None else exactly(struct.unpack(">i", size)[0])


def answers(s: socket.socket, correlation_id: int = 1) -> bool:
    """True when an ApiVersions round trip works on ``s``, False when it is closed."""
    try:
        s.sendall(api_versions(correlation_id))
    except (BrokenPipeError, ConnectionResetError):
        return False
    got = read_frame(s)
    return got is not None and struct.unpack(">i", got[:4])[0] == correlation_id


def closed_within(s: socket.socket, seconds: float) -> float | None:
    """Seconds until the broker closed ``s`` (reading and dropping whatever arrives),
    or None if it is still open after ``seconds``."""
    started = time.monotonic()
    s.settimeout(0.05)
    while time.monotonic() - started < seconds:
        try:
            if not s.recv(1 << 16):
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def assert_still_serving(b: Broker) -> None:
    b.assert_alive()
    topic = create_topic(b.bootstrap)
    acked = confluent_produce(b.bootstrap, topic, [Record(b"k", b"still here", partition=0)])
    assert acked[0].offset == 0
    assert confluent_consume(b.bootstrap, topic, {0: 1})[0].value == b"still here"


def rss_bytes(b: Broker) -> int:
    assert b.proc is not None
    for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# --------------------------------------------------------------------------- max.connections


def served(b: Broker, source_ip: str = "127.0.0.1") -> socket.socket:
    """A connection the broker answers, retried while it still counts closed ones (the
    harness's readiness probe, a test's previous connection)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        s = connect(b, source_ip)
        if answers(s):
            return s
        s.close()
        assert time.monotonic() < deadline, "no connection slot came free"
        time.sleep(0.05)


def test_connections_beyond_max_per_ip_are_closed_at_once(broker_factory: BrokerFactory) -> None:
    b = broker_factory({"max.connections.per.ip": "3"})
    held = [served(b) for _ in range(3)]
    try:
        with connect(b) as extra:
            assert not answers(extra), "a 4th connection from one IP was served"
        with connect(b, "127.0.0.2") as other_ip:
            assert answers(other_ip)  # the limit is per IP
        held.pop().close()
        served(b).close()  # the freed slot is usable once the broker saw the close
    finally:
        for s in held:
            s.close()
    assert "connection.rejected reason=max_connections_per_ip" in b.stderr_text()


def test_connections_beyond_max_connections_are_closed_at_once(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory({"max.connections": "3"})
    held = [served(b, f"127.0.0.{i}") for i in (2, 3, 4)]
    try:
        with connect(b, "127.0.0.5") as extra:
            assert not answers(extra), "a connection beyond max.connections was served"
    finally:
        for s in held:
            s.close()
    assert "connection.rejected reason=max_connections" in b.stderr_text()
    assert_still_serving(b)


# --------------------------------------------------------------------------- timeouts


def test_idle_connections_are_closed_busy_ones_kept(broker_factory: BrokerFactory) -> None:
    b = broker_factory({"connections.max.idle.ms": "700"})
    with connect(b) as idle, connect(b) as busy:
        assert answers(idle) and answers(busy)
        started = time.monotonic()
        while time.monotonic() - started < 2.0:  # a request every 200 ms: never idle
            assert answers(busy), "a busy connection was closed as idle"
            time.sleep(0.2)
        assert closed_within(idle, 0.1) is not None, "the idle connection is still open"
    assert "connection.closed reason=idle" in b.stderr_text()


def test_a_frame_trickled_byte_by_byte_is_cut_off(broker_factory: BrokerFactory) -> None:
    """Slowloris: a frame whose bytes arrive one every 100 ms (its 20-odd bytes would
    take seconds) is dropped after socket.request.read.timeout.ms."""
    b = broker_factory({"socket.request.read.timeout.ms": "600"})
    data = api_versions()
    with connect(b) as slow:
        started = time.monotonic()
        closed_at = None
        for byte in data[:-1]:
            try:
                slow.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic() - started
                break
            if closed_within(slow, 0.1) is not None:
                closed_at = time.monotonic() - started
                break
        assert closed_at is not None, "the trickled frame was waited for"
        assert closed_at < 3.0
    assert "connection.closed reason=read_timeout" in b.stderr_text()


def test_a_half_sent_size_prefix_does_not_hold_a_connection(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory({"socket.request.read.timeout.ms": "500"})
    with connect(b) as slow, connect(b) as fine:
        slow.sendall(b"\x00\x00")
        assert answers(fine)
        assert closed_within(slow, 5.0) is not None
        assert answers(fine, 2)


def test_a_client_that_never_reads_is_disconnected_and_memory_stays_bounded(
    broker_factory: BrokerFactory,
) -> None:
    """Pipelined 8 MB fetches from a client that reads nothing: the broker stops reading
    its requests (instead of holding 64 responses), then drops it after
    socket.response.write.timeout.ms."""
    b = broker_factory(
        {"socket.response.write.timeout.ms": "1500", "connections.max.queued.bytes": "1048576"}
    )
    topic = create_topic(b.bootstrap)
    value = bytes(range(256)) * 3500  # ~900 kB, below librdkafka's message.max.bytes
    confluent_produce(b.bootstrap, topic, [Record(b"k", value, partition=0)] * 9)
    fetch = FetchRequest_v4(-1, 0, 0, 16 << 20, 0, [(topic, [(0, 0, 16 << 20)])])
    before = rss_bytes(b)
    peak = before
    s = connect(b, rcvbuf=4096)
    try:
        s.setblocking(False)
        pending = b"".join(request(fetch, i) for i in range(200))
        started = time.monotonic()
        while pending and time.monotonic() - started < 3.0:  # until the broker mutes us
            try:
                pending = pending[s.send(pending) :]
            except BlockingIOError:
                time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                break
            peak = max(peak, rss_bytes(b))
        while time.monotonic() - started < 3.0:
            peak = max(peak, rss_bytes(b))
            time.sleep(0.1)
        assert peak - before < 200 * 1024 * 1024, f"RSS grew by {(peak - before) >> 20} MiB"
        s.setblocking(True)
        received = 0
        s.settimeout(DEADLINE_S)
        while True:  # now read: what was buffered, then the broker's close
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += len(chunk)
        assert received < 64 * 1024 * 1024, f"read {received >> 20} MiB before the close"
    finally:
        s.close()
    assert "connection.closed reason=write_timeout" in b.stderr_text()
    assert_still_serving(b)


# --------------------------------------------------------------------------- pipelining


def test_pipelined_requests_beyond_the_bounds_are_all_answered_in_order(
    broker_factory: BrokerFactory,
) -> None:
    """Muting is not a deadlock: 300 pipelined requests (past the in-flight bound) and
    50 pipelined 100 kB fetches (past a 64 KiB queued-bytes bound) all come back."""
    b = broker_factory({"connections.max.queued.bytes": "65536"})
    with connect(b) as s:
        s.sendall(b"".join(api_versions(i) for i in range(300)))
        for i in range(300):
            got = read_frame(s)
            assert got is not None and struct.unpack(">i", got[:4])[0] == i
    topic = create_topic(b.bootstrap)
    confluent_produce(b.bootstrap, topic, [Record(b"k", b"v" * 100_000, partition=0)])
    fetch = FetchRequest_v4(-1, 0, 0, 1 << 20, 0, [(topic, [(0, 0, 1 << 20)])])
    with connect(b) as s:
        sender = threading.Thread(
            target=s.sendall, args=(b"".join(request(fetch, i) for i in range(50)),)
        )
        sender.start()
        for i in range(50):
            got = read_frame(s)
            assert got is not None and struct.unpack(">i", got[:4])[0] == i
            assert len(got) > 100_000
        sender.join(DEADLINE_S)


# --------------------------------------------------------------------------- heavy frames


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def produce_one(topic: str, correlation_id: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, int(time.time() * 1000), b"k", b"sentinel", [])
    req = ProduceRequest_v3(
        transactional_id=None,
        required_acks=1,
        timeout=5000,
        topics=[(topic, [(0, bytes(builder.build()))])],
    )
    return request(req, correlation_id)


def sentinel_while(b: Broker, topic: str, heavy_frame: bytes, correlation_id: int) -> list[float]:
    """Send ``heavy_frame`` on one connection while a sentinel produces and fetches on
    another; returns the sentinel's round trips (seconds)."""
    latencies: list[float] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def sentinel() -> None:
        try:
            with connect(b) as s:
                fetch = FetchRequest_v4(-1, 0, 0, 1 << 20, 0, [(topic, [(0, 0, 1 << 20)])])
                i = 0
                while not stop.is_set():
                    for req in (produce_one(topic, i), request(fetch, i + 1)):
                        started = time.perf_counter()
                        s.sendall(req)
                        assert read_frame(s) is not None
                        latencies.append(time.perf_counter() - started)
                    i += 2
                    time.sleep(0.005)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    thread = threading.Thread(target=sentinel)
    thread.start()
    try:
        time.sleep(0.5)
        with connect(b) as heavy:
            heavy.settimeout(120)
            heavy.sendall(frame(heavy_frame))
            got = read_frame(heavy)
            assert got is not None and struct.unpack(">i", got[:4])[0] == correlation_id
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not failures, failures
    return latencies


def names_request(api_key: int, version: int, names: list[bytes], tail: bytes = b"") -> bytes:
    """A non-flexible request whose body is one array of names (Metadata v4 adds
    allow_auto_topic_creation, DeleteTopics v1 a timeout: ``tail``)."""
    header = struct.pack(">hhih", api_key, version, 78, 4) + b"evil"
    body = struct.pack(">i", len(names)) + b"".join(struct.pack(">h", len(n)) + n for n in names)
    return header + body + tail


@pytest.mark.parametrize(
    ("api", "names", "tail"),
    [
        ("metadata-empty-names", [b""] * 500_000, b"\x00"),
        ("metadata-one-name", [b"nope"] * 500_000, b"\x00"),
        ("delete-topics-one-name", [b"nope"] * 500_000, struct.pack(">i", 1000)),
    ],
)
def test_requests_naming_a_topic_half_a_million_times_do_not_stall_others(
    broker_factory: BrokerFactory, api: str, names: list[bytes], tail: bytes
) -> None:
    """Metadata and DeleteTopics answer one entry per distinct name, as Kafka does
    (Metadata: a set of names; DeleteTopics: one INVALID_REQUEST per duplicated name), so
    a request naming the same topic 500,000 times costs what one name costs: the
    sentinel keeps its latency (it stalled 3-6 s while 500,000 entries were built)."""
    b = broker_factory()
    topic = create_topic(b.bootstrap)
    key, version = (20, 1) if api.startswith("delete") else (3, 4)
    latencies = sentinel_while(b, topic, names_request(key, version, names, tail), 78)
    assert max(latencies) < STALL_S, f"sentinel stalled {max(latencies):.2f} s"


def test_a_frame_of_millions_of_items_does_not_stall_other_clients(
    broker_factory: BrokerFactory,
) -> None:
    """An ApiVersions v3 carrying 10M unknown tagged fields (20 MB) is decoded off the
    event loop: a sentinel producing and fetching on another connection keeps its
    latency (it stalled ~3 s while the frame was walked on the loop)."""
    b = broker_factory()
    topic = create_topic(b.bootstrap)
    latencies: list[float] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def sentinel() -> None:
        try:
            with connect(b) as s:
                fetch = FetchRequest_v4(-1, 0, 0, 1 << 20, 0, [(topic, [(0, 0, 1 << 20)])])
                i = 0
                while not stop.is_set():
                    for req in (produce_one(topic, i), request(fetch, i + 1)):
                        started = time.perf_counter()
                        s.sendall(req)
                        assert read_frame(s) is not None
                        latencies.append(time.perf_counter() - started)
                    i += 2
                    time.sleep(0.005)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    thread = threading.Thread(target=sentinel)
    thread.start()
    try:
        time.sleep(0.5)
        count = 10_000_000
        header = struct.pack(">hhih", 18, 3, 77, 4) + b"evil\x00"
        body = b"\x02a\x02b" + uvarint(count) + b"\x7f\x00" * count
        with connect(b) as heavy:
            heavy.settimeout(120)
            heavy.sendall(frame(header + body))
            got = read_frame(heavy)
            assert got is not None and struct.unpack(">i", got[:4])[0] == 77
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert not failures, failures
    assert max(latencies) < STALL_S, f"sentinel stalled {max(latencies):.2f} s"
    assert "connection.heavy_request" in b.stderr_text()


def broker_sockets(b: Broker) -> int:
    """TCP sockets the broker process holds (listeners and connections)."""
    assert b.proc is not None
    fds = Path(f"/proc/{b.proc.pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            continue
    return count


def test_a_client_gone_during_a_long_poll_frees_its_connection_at_once(
    broker_factory: BrokerFactory,
) -> None:
    """A Fetch waiting up to 2^31-1 ms for 2^31-1 bytes, then the client closes: the
    broker closes its side now, not when the wait ends (24 days: an fd leak any client
    could repeat until the broker runs out of descriptors)."""
    b = broker_factory()
    topic = create_topic(b.bootstrap)
    time.sleep(0.5)
    baseline = broker_sockets(b)
    for i in range(20):
        with connect(b) as s:
            fetch = FetchRequest_v4(
                -1, 2**31 - 1, 2**31 - 1, 2**31 - 1, 0, [(topic, [(0, 0, 1 << 20)])]
            )
            s.sendall(request(fetch, i))
            time.sleep(0.05)
    deadline = time.monotonic() + DEADLINE_S
    while broker_sockets(b) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert broker_sockets(b) <= baseline, "connections of gone clients are still open"


def test_a_client_gone_with_a_full_pipeline_of_long_polls_frees_its_connection(
    broker_factory: BrokerFactory,
) -> None:
    """As above, with 64 long polls pipelined: the connection stops reading at its
    in-flight limit, so it cannot see the client close by reading; the connection must
    still be closed soon (it was held until the polls ended: the fuzzer's CLOSE_WAIT)."""
    b = broker_factory()
    topic = create_topic(b.bootstrap)
    time.sleep(0.5)
    baseline = broker_sockets(b)
    for i in range(5):
        with connect(b) as s:
            for j in range(MAX_IN_FLIGHT + 2):
                fetch = FetchRequest_v4(
                    -1, 2**31 - 1, 2**31 - 1, 2**31 - 1, 0, [(topic, [(0, 0, 1 << 20)])]
                )
                s.sendall(request(fetch, i * 100 + j))
            time.sleep(0.2)
    deadline = time.monotonic() + DEADLINE_S
    while broker_sockets(b) > baseline and time.monotonic() < deadline:
        time.sleep(0.1)
    assert broker_sockets(b) <= baseline, "connections of gone clients are still open"


def test_an_error_quoting_a_32k_name_is_still_answered(broker_factory: BrokerFactory) -> None:
    """CreatePartitions and DescribeConfigs of a topic named with 32,767 bytes: the
    error message that quotes the name is cut, so the response stays encodable and the
    client gets its error (the response failed to encode and the connection closed)."""
    from aiokafka.protocol.admin import CreatePartitionsRequest_v0, DescribeConfigsRequest_v1

    b = broker_factory()
    name = "z" * 32_767
    requests = [
        CreatePartitionsRequest_v0(
            topic_partitions=[(name, (2, None))], timeout=1000, validate_only=False
        ),
        DescribeConfigsRequest_v1(resources=[(2, name, None)], include_synonyms=False),
    ]
    with connect(b) as s:
        for i, req in enumerate(requests):
            s.sendall(request(req, 90 + i))
            got = read_frame(s)
            assert got is not None, f"{type(req).__name__}: the broker closed the connection"
            assert struct.unpack(">i", got[:4])[0] == 90 + i


def test_clients_still_sending_while_the_broker_stops_log_no_error(
    broker_factory: BrokerFactory,
) -> None:
    """A graceful stop (SIGTERM; a member turning writer, a fenced broker rejoining)
    stops reading every connection while clients still send: the broker logged
    asyncio's "Fatal error on transport ... feed_data after feed_eof" and a
    connection.failed traceback for such clients, at every failover, which the
    operations guide tells operators to alert on."""
    b = broker_factory()
    stop = threading.Event()

    def send(s: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                s.sendall(api_versions())

    def receive(s: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and read_frame(s) is not None:
                pass

    clients = [connect(b) for _ in range(8)]
    threads = [
        threading.Thread(target=work, args=(s,)) for s in clients for work in (send, receive)
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    b.stop()
    stop.set()
    for s in clients:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
    for t in threads:
        t.join()
    for s in clients:
        s.close()
    log = b.stderr_text()
    assert "feed_data after feed_eof" not in log and "connection.failed" not in log, log[-3000:]
