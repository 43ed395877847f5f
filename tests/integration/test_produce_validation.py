"""Produce validation over the wire (Kafka's LogValidator rules, issue 13).

Real clients never send these batches, so they are made by hand here, record by record,
with the CRC recomputed: each is refused with Kafka's error code and leaves the
partition as it was. Compression bombs must not cost the broker memory; produce to
internal topics is refused while the coordinators that own them keep writing.
"""

from __future__ import annotations

import functools
import socket
import struct
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka as ck
import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard
from aiokafka.protocol import produce as kp
from aiokafka.protocol.admin import ApiVersionRequest_v0
from confluent_kafka.admin import ConfigResource, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from floe.protocol import batch as wire
from helpers.admin import admin, create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_config, confluent_consume, confluent_produce
from helpers.records import Record
from helpers.registry import call

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_TIMESTAMP = 32
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87

HOUR_MS = 3600 * 1000
INTERNAL = ("__consumer_offsets", "__transaction_state", "_schemas")


# ------------------------------------------------------------------ hand-made batches


def varint(n: int) -> bytes:
    """Kafka's zigzag varint (record fields)."""
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(
    i: int,
    value: bytes | None = b"v",
    *,
    key: bytes | None = b"k",
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    ts_delta: int = 0,
    offset_delta: int | None = None,
    length_delta: int = 0,
    raw_key_length: int | None = None,
    raw_header_count: int | None = None,
) -> bytes:
    """One record with its length prefix; every field can be made to lie."""
    body = b"\x00" + varint(ts_delta) + varint(i if offset_delta is None else offset_delta)
    body += field(key) if raw_key_length is None else varint(raw_key_length)
    body += field(value)
    body += varint(len(headers) if raw_header_count is None else raw_header_count)
    for hkey, hvalue in headers:
        body += field(hkey) + field(hvalue)
    return varint(len(body) + length_delta) + body


def make_batch(
    records: Sequence[bytes],
    *,
    payload: bytes | None = None,
    codec: int = 0,
    attributes: int = 0,
    count: int | None = None,
    last_delta: int | None = None,
    base_offset: int = 0,
    base_ts: int | None = None,
    max_ts: int | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    """A v2 batch around ``records`` (or a ready ``payload``) with a correct CRC32C."""
    body = payload if payload is not None else compress(codec, b"".join(records))
    count = len(records) if count is None else count
    base_ts = now_ms() if base_ts is None else base_ts
    header = struct.pack(
        ">qiiBIhiqqqhii",
        base_offset, 49 + len(body), -1, 2, 0, codec | attributes,
        count - 1 if last_delta is None else last_delta,
        base_ts, base_ts if max_ts is None else max_ts, *producer, count,
    )  # fmt: skip
    out = bytearray(header + body)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    module = {1: cramjam.gzip, 2: cramjam.snappy, 3: cramjam.lz4, 4: cramjam.zstd}[codec]
    return bytes(module.compress_raw(data) if codec == 2 else module.compress(data))


def now_ms() -> int:
    return int(time.time() * 1000)


def good(n: int = 3) -> list[bytes]:
    return [record(i, b"value %d" % i) for i in range(n)]


# ------------------------------------------------------------------ the raw Produce call


@dataclass(frozen=True)
class Answer:
    error: int
    base_offset: int
    record_errors: list[tuple[int, str]]
    message: str | None


def produce_raw(
    b: Broker,
    topic: str,
    data: bytes | Sequence[bytes],
    *,
    version: int = 8,
    acks: int = -1,
    transactional_id: str | None = None,
) -> list[Answer]:
    """One Produce request, one partition per item of ``data`` (partitions 0, 1, ...)."""
    items = [data] if isinstance(data, bytes) else list(data)
    req = getattr(kp, f"ProduceRequest_v{version}")(
        transactional_id=transactional_id,
        required_acks=acks,
        timeout=10000,
        topics=[(topic, list(enumerate(items)))],
    )
    payload = req.build_request_header(7, "validation").encode() + req.encode()
    with socket.create_connection((b.host, b.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        resp = s.recv(size, socket.MSG_WAITALL)
    decoded = req.RESPONSE_TYPE.decode(resp[4:])
    out = []
    for part in decoded.topics[0][1]:
        record_errors = [(i, m) for i, m in part[5]] if version >= 8 else []
        out.append(Answer(part[1], part[2], record_errors, part[6] if version >= 8 else None))
    return out


def refused(b: Broker, topic: str, data: bytes, code: int, **kw: object) -> Answer:
    """Produce ``data`` expecting ``code``; the partition must still be empty."""
    (answer,) = produce_raw(b, topic, data, **kw)  # type: ignore[arg-type]
    assert answer.error == code, answer
    assert watermarks(b.bootstrap, topic, 1)[0] == (0, 0)
    return answer


# ------------------------------------------------------------------ rules


def test_hand_made_batches_are_accepted_when_valid(broker: Broker) -> None:
    """The baseline: the hand-made batches below differ from this one in one field."""
    topic = create_topic(broker.bootstrap)
    for codec in range(5):
        recs = [
            record(i, b"v%d" % i, headers=[(b"h", b"x"), (b"k\xc3\xa9", None)]) for i in range(3)
        ]
        (answer,) = produce_raw(broker, topic, make_batch(recs, codec=codec))
        assert (answer.error, answer.base_offset) == (0, 3 * codec)
    got = confluent_consume(broker.bootstrap, topic, {0: 15})
    assert [r.value for r in got] == [b"v0", b"v1", b"v2"] * 5
    assert got[0].headers == (("h", b"x"), ("ké", None))


def test_produce_never_creates_a_topic(broker_factory: Callable[..., Broker]) -> None:
    """As in Kafka, a Produce naming an unknown topic is UNKNOWN_TOPIC_OR_PARTITION
    whatever ``auto.create.topics.enable`` says: only Metadata creates topics (checking
    CREATE; before, a principal with WRITE created any topic by producing to it). A real
    producer asks Metadata first, so it still creates the topic."""
    b = broker_factory({"auto.create.topics.enable": "true"})
    topic = unique_topic("never-made")
    (answer,) = produce_raw(b, topic, make_batch(good()))
    assert answer.error == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic not in admin(b.bootstrap).list_topics(timeout=10).topics
    (acked,) = confluent_produce(b.bootstrap, topic, [Record(None, b"made")])
    assert acked.offset == 0


@pytest.mark.parametrize("acks", [2, -2, 5, 32767])
def test_acks_other_than_minus_one_zero_one(broker: Broker, acks: int) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    answers = produce_raw(broker, topic, [make_batch(good()), make_batch(good())], acks=acks)
    assert [a.error for a in answers] == [INVALID_REQUIRED_ACKS] * 2
    assert watermarks(broker.bootstrap, topic, 2) == {0: (0, 0), 1: (0, 0)}


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(make_batch(good(), base_offset=5), id="base offset 5"),
        pytest.param(make_batch([], payload=b"", count=0, last_delta=0), id="record count 0"),
        pytest.param(make_batch(good(3), last_delta=1), id="count above the offset range"),
        pytest.param(make_batch(good(3), count=2, last_delta=2), id="count below the offset range"),
        pytest.param(
            make_batch([*good(2), record(2, length_delta=40)]), id="record length past the batch"
        ),
        pytest.param(
            make_batch([*good(2), record(2, length_delta=-2)]),
            id="record length short of its fields",
        ),
        pytest.param(
            make_batch([*good(2), record(2, length_delta=2) + b"\0\0"]),
            id="record length beyond its fields",
        ),
        pytest.param(make_batch([*good(3), b"\x00\x00"]), id="trailing bytes"),
        pytest.param(make_batch(good(2), count=3, last_delta=2), id="fewer records than counted"),
        pytest.param(
            make_batch([record(0), record(2)], count=2, last_delta=1), id="offset deltas skip"
        ),
        pytest.param(make_batch([record(0), record(0)]), id="offset deltas repeat"),
        pytest.param(make_batch([record(1), record(2)]), id="offset deltas start at 1"),
        pytest.param(make_batch([record(0, raw_key_length=-5)]), id="key length -5"),
        pytest.param(
            make_batch([record(0)[:1] + b"\x80" + record(0)[2:]]), id="record attributes not 0"
        ),
        pytest.param(make_batch([record(0, raw_header_count=-1)]), id="header count -1"),
        pytest.param(make_batch([record(0, headers=[(None, b"x")])]), id="header key length -1"),  # type: ignore[list-item]
        pytest.param(
            make_batch([record(0, raw_header_count=40)]), id="header count past the record"
        ),
        pytest.param(make_batch(good(), codec=0, attributes=5), id="compression codec 5"),
        pytest.param(make_batch(good(), codec=0, attributes=7), id="compression codec 7"),
        pytest.param(make_batch(good(), attributes=wire.ATTR_CONTROL), id="control batch"),
        pytest.param(make_batch(good(), producer=(77, 0, -1)), id="sequence -1 with a producer id"),
        pytest.param(make_batch(good()) + make_batch(good()), id="two batches in one partition"),
    ],
)
def test_malformed_batch_is_invalid_record(broker: Broker, data: bytes) -> None:
    topic = create_topic(broker.bootstrap)
    answer = refused(broker, topic, data, INVALID_RECORD)
    assert answer.message


def test_transactional_batch_without_producer_id(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    data = make_batch(good(), attributes=wire.ATTR_TRANSACTIONAL)
    refused(broker, topic, data, INVALID_RECORD, transactional_id="txn")


def test_transactional_batch_without_transactional_id(broker: Broker) -> None:
    """Kafka answers the whole request with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    topic = create_topic(broker.bootstrap, partitions=2)
    txn = make_batch(good(), attributes=wire.ATTR_TRANSACTIONAL, producer=(99, 0, 0))
    answers = produce_raw(broker, topic, [make_batch(good()), txn])
    assert [a.error for a in answers] == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    assert watermarks(broker.bootstrap, topic, 2) == {0: (0, 0), 1: (0, 0)}


def test_header_key_not_utf8_is_a_record_error(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    recs = [record(0), record(1, headers=[(b"\xff\xfe", b"v")]), record(2)]
    answer = refused(broker, topic, make_batch(recs), INVALID_RECORD)
    assert [i for i, _ in answer.record_errors] == [1]
    assert "UTF-8" in answer.record_errors[0][1]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_garbage_is_corrupt_message(broker: Broker, codec: int) -> None:
    topic = create_topic(broker.bootstrap)
    payload = b"\x00\x01not compressed at all" * 10
    refused(broker, topic, make_batch(good(), codec=codec, payload=payload), CORRUPT_MESSAGE)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_records_are_walked_too(broker: Broker, codec: int) -> None:
    """The record rules hold inside compressed batches (here: a repeated offset delta)."""
    topic = create_topic(broker.bootstrap)
    refused(broker, topic, make_batch([record(0), record(0)], codec=codec), INVALID_RECORD)


@pytest.mark.parametrize("version", [3, 6])
def test_zstd_needs_produce_v7(broker: Broker, version: int) -> None:
    topic = create_topic(broker.bootstrap)
    data = make_batch(good(), codec=4)
    refused(broker, topic, data, UNSUPPORTED_COMPRESSION_TYPE, version=version)
    (answer,) = produce_raw(broker, topic, data, version=7)
    assert answer.error == 0


def test_timestamps_more_than_an_hour_ahead_are_refused(broker: Broker) -> None:
    """Kafka 4's default message.timestamp.after.max.ms is one hour; before is unbounded."""
    topic = create_topic(broker.bootstrap)
    now = now_ms()
    recs = [record(0), record(1, ts_delta=2 * HOUR_MS), record(2), record(3, ts_delta=3 * HOUR_MS)]
    answer = refused(broker, topic, make_batch(recs, base_ts=now), INVALID_TIMESTAMP)
    assert [i for i, _ in answer.record_errors] == [1, 3]
    ancient = make_batch(good(), base_ts=now - 10 * 365 * 24 * HOUR_MS)
    soon = make_batch(good(), base_ts=now + HOUR_MS // 2)
    no_timestamp = make_batch(good(), base_ts=-1)
    for data in (ancient, soon, no_timestamp):
        assert produce_raw(broker, topic, data)[0].error == 0


def test_topic_timestamp_bounds(broker: Broker) -> None:
    topic = create_topic(
        broker.bootstrap,
        config={"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "0"},
    )
    now = now_ms()
    refused(broker, topic, make_batch(good(), base_ts=now - 120_000), INVALID_TIMESTAMP)
    refused(broker, topic, make_batch(good(), base_ts=now + 60_000), INVALID_TIMESTAMP)
    assert produce_raw(broker, topic, make_batch(good(), base_ts=now - 1000))[0].error == 0


def test_timestamp_bounds_are_described_with_kafka_defaults(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin(broker.bootstrap).describe_configs([resource])[resource].result(30)
    assert configs["message.timestamp.before.max.ms"].value == str(2**63 - 1)
    assert configs["message.timestamp.after.max.ms"].value == str(HOUR_MS)


def test_log_append_time_topics_take_any_timestamp(broker: Broker) -> None:
    topic = create_topic(
        broker.bootstrap,
        config={"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "0"},
    )
    data = make_batch(good(), base_ts=now_ms() + 100 * HOUR_MS)
    assert produce_raw(broker, topic, data)[0].error == 0


def test_producer_cannot_set_log_append_time(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    data = make_batch(good(2), attributes=wire.ATTR_TIMESTAMP_TYPE)
    answer = refused(broker, topic, data, INVALID_TIMESTAMP)
    assert [i for i, _ in answer.record_errors] == [0, 1]


def test_a_wrong_max_timestamp_is_corrected(broker: Broker) -> None:
    """The time index and retention read the batch's max timestamp: Kafka recomputes it
    from the records (and the CRC with it), so must Floe."""
    topic = create_topic(broker.bootstrap)
    now = now_ms()
    recs = [record(0), record(1, ts_delta=500), record(2, ts_delta=20)]
    data = make_batch(recs, base_ts=now, max_ts=now + 10 * 365 * 24 * HOUR_MS)
    assert produce_raw(broker, topic, data)[0].error == 0
    (stored,) = stored_batches(broker.data_dir, topic)
    assert stored.max_timestamp == now + 500
    assert [r.timestamp for r in confluent_consume(broker.bootstrap, topic, {0: 3})] == [
        now,
        now + 500,
        now + 20,
    ]


def stored_batches(data_dir: Path, topic: str) -> list[wire.BatchHeader]:
    out: list[wire.BatchHeader] = []
    for segment in sorted((data_dir / "logs" / f"{topic}-0").glob("*.log")):
        out += wire.scan(segment.read_bytes(), partial_ok=True)  # CRCs checked
    return out


def test_confluent_producer_gets_invalid_timestamp(broker: Broker) -> None:
    """A real client sees the refusal as INVALID_TIMESTAMP and its valid records land."""
    topic = create_topic(broker.bootstrap)
    producer = ck.Producer(confluent_config(broker.bootstrap, **{"acks": "all", "linger.ms": 0}))
    errors: list[ck.KafkaError | None] = []
    producer.produce(
        topic, b"future", partition=0, timestamp=now_ms() + 5 * HOUR_MS,
        on_delivery=lambda err, _msg: errors.append(err),
    )  # fmt: skip
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == ck.KafkaError.INVALID_TIMESTAMP
    acked = confluent_produce(broker.bootstrap, topic, [Record(b"k", b"now", partition=0)])
    assert acked[0].offset == 0


# ------------------------------------------------------------------ internal topics


@pytest.mark.parametrize("topic", INTERNAL)
def test_internal_topics_refuse_client_produce(broker: Broker, topic: str) -> None:
    before = watermarks(broker.bootstrap, topic, 1)[0]
    (answer,) = produce_raw(broker, topic, make_batch(good()))
    assert answer.error == INVALID_TOPIC_EXCEPTION
    assert answer.message == f"Cannot append to internal topic {topic}"
    assert watermarks(broker.bootstrap, topic, 1)[0] == before


def acks0_between_two_api_versions(b: Broker, topic: str, data: bytes) -> list[int | None]:
    """ApiVersions (correlation 1), Produce acks=0 of ``data`` (2), ApiVersions (3), all
    pipelined on one connection: the correlation ids answered, then None when the broker
    closed the connection."""
    produce = kp.ProduceRequest_v8(
        transactional_id=None, required_acks=0, timeout=10000, topics=[(topic, [(0, data)])]
    )
    frames = b""
    for corr, req in ((1, ApiVersionRequest_v0()), (2, produce), (3, ApiVersionRequest_v0())):
        payload = req.build_request_header(corr, "validation").encode() + req.encode()
        frames += struct.pack(">i", len(payload)) + payload
    answered: list[int | None] = []
    with socket.create_connection((b.host, b.port), timeout=30) as s:
        s.sendall(frames)
        s.settimeout(5)
        while len(answered) < 2:
            try:
                prefix = s.recv(4, socket.MSG_WAITALL)
            except TimeoutError:
                break
            if len(prefix) < 4:
                answered.append(None)
                break
            body = s.recv(struct.unpack(">i", prefix)[0], socket.MSG_WAITALL)
            answered.append(struct.unpack(">i", body[:4])[0])
    return answered


def test_acks0_produce_gets_no_answer_and_keeps_the_connection(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    assert acks0_between_two_api_versions(broker, topic, make_batch(good())) == [1, 3]
    assert watermarks(broker.bootstrap, topic, 1)[0] == (0, len(good()))


@pytest.mark.parametrize("case", ["internal", "missing", "corrupt"])
def test_a_refused_acks0_produce_closes_the_connection(broker: Broker, case: str) -> None:
    """The client expects no answer, so the broker closes the connection to tell it, as
    Kafka does, after answering the requests before it."""
    topic = {"internal": "_schemas", "missing": "no-such-topic"}.get(case) or create_topic(
        broker.bootstrap
    )
    before = watermarks(broker.bootstrap, topic, 1)[0] if case != "missing" else None
    data = make_batch(good())
    if case == "corrupt":
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    errors = produce_errors(broker)
    assert acks0_between_two_api_versions(broker, topic, data) == [1, None]
    if before is not None:
        assert watermarks(broker.bootstrap, topic, 1)[0] == before
    assert produce_errors(broker) == errors + 1  # counted like an answered error


def produce_errors(b: Broker) -> float:
    """All Produce errors counted in the broker's /metrics."""
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kafka_network_requestmetrics_errors_total"
        and s.labels.get("request") == "Produce"
    )


def test_real_client_cannot_write_consumer_offsets(broker: Broker) -> None:
    producer = ck.Producer(confluent_config(broker.bootstrap, acks="all", retries=0))
    errors: list[ck.KafkaError | None] = []
    producer.produce(
        "__consumer_offsets", b"x", partition=0, on_delivery=lambda e, _m: errors.append(e)
    )
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == ck.KafkaError.TOPIC_EXCEPTION


def test_coordinators_still_write_their_internal_topics(broker: Broker) -> None:
    """Group offsets and registry schemas go through the store, not through Produce."""
    topic = create_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, [Record(b"k", b"v", partition=0)])
    consumer = ck.Consumer(confluent_config(broker.bootstrap, **{"group.id": f"g-{topic}"}))
    try:
        tp = ck.TopicPartition(topic, 0, 1)
        consumer.commit(offsets=[tp], asynchronous=False)
        assert consumer.committed([ck.TopicPartition(topic, 0)], timeout=30)[0].offset == 1
    finally:
        consumer.close()
    status, body = call(
        broker.registry_url, "POST", f"/subjects/{topic}-value/versions",
        {"schema": '{"type": "string"}'},
    )  # fmt: skip
    assert status == 200, body


# ------------------------------------------------------------------ compression bombs


@pytest.fixture(scope="module")
def bomb_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A private broker, so its peak RSS says what the bombs cost and nothing else."""
    b = Broker(tmp_path_factory.mktemp("bombs") / "data", {"auto.create.topics.enable": "false"})
    try:
        yield b.start()
        b.stop()
    finally:
        b.close()


def _stream(
    make: Callable[[], tuple[Callable[[bytes], bytes], Callable[[], bytes]]], mib: int
) -> bytes:
    feed, finish = make()
    chunk = bytes(1 << 20)
    return b"".join(feed(chunk) for _ in range(mib)) + finish()


def _gzip() -> tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress, c.flush


def _zstd() -> tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    c = zstandard.ZstdCompressor().compressobj()
    return c.compress, c.flush


def _lz4() -> tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    c = lz4.frame.LZ4FrameCompressor()
    head = c.begin()
    first = [True]

    def feed(data: bytes) -> bytes:
        out = (head if first[0] else b"") + c.compress(data)
        first[0] = False
        return out

    return feed, c.flush


def _snappy_claiming(claimed: int) -> bytes:
    """Raw snappy whose header claims ``claimed`` bytes, followed by a few literals."""
    n, out = claimed, bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + b"\x0cabcd"


def _xerial_claiming(claimed: int, blocks: int) -> bytes:
    block = _snappy_claiming(claimed)
    return (
        b"\x82SNAPPY\x00"
        + struct.pack(">ii", 1, 1)
        + (struct.pack(">i", len(block)) + block) * blocks
    )


@functools.cache
def bomb(name: str, make: Callable[[], bytes]) -> bytes:
    return make()


def peak_rss_mib(b: Broker) -> float:
    assert b.proc is not None
    for line in Path(f"/proc/{b.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


BOMBS: dict[str, tuple[int, Callable[[], bytes]]] = {
    "zstd 1 GiB": (4, lambda: _stream(_zstd, 1024)),
    "gzip 512 MiB": (1, lambda: _stream(_gzip, 512)),
    "lz4 192 MiB": (3, lambda: _stream(_lz4, 192)),
    "snappy claiming 4 GiB": (2, lambda: _snappy_claiming(2**32 - 1)),
    "xerial snappy, 64 blocks claiming 1 GiB each": (2, lambda: _xerial_claiming(2**30, 64)),
}


@pytest.mark.parametrize("compacted", [False, True], ids=["delete", "compact"])
def test_compression_bombs_cost_no_memory(bomb_target: Broker, compacted: bool) -> None:
    """A few hundred KB that decompress to gigabytes: refused with MESSAGE_TOO_LARGE once
    past max.message.bytes x message.decompressed.max.ratio (16 MiB by default), and
    the broker's peak RSS does not move by more than that bound and some slack."""
    config = {"cleanup.policy": "compact"} if compacted else {}
    topic = create_topic(bomb_target.bootstrap, config=config)
    base = peak_rss_mib(bomb_target)
    for name, (codec, make) in BOMBS.items():
        payload = bomb(name, make)
        assert len(payload) < 1_000_000, (name, len(payload))
        answer = refused(
            bomb_target, topic, make_batch(good(), codec=codec, payload=payload), MESSAGE_TOO_LARGE
        )
        assert "decompress" in (answer.message or ""), (name, answer)
    grown = peak_rss_mib(bomb_target) - base
    assert grown < 96, f"peak RSS grew by {grown:.0f} MiB"
    acked = confluent_produce(bomb_target.bootstrap, topic, [Record(b"k", b"after", partition=0)])
    assert acked[0].offset == 0


def test_ratio_limit_is_a_broker_setting(broker_factory: Callable[..., Broker]) -> None:
    """At ratio 1 a compressed batch may decompress to max.message.bytes at most."""
    b = broker_factory({"message.decompressed.max.ratio": "1"})
    topic = create_topic(b.bootstrap)
    zeros = [record(0, bytes(600_000)), record(1, bytes(600_000))]
    refused(b, topic, make_batch(zeros, codec=4), MESSAGE_TOO_LARGE)
    (answer,) = produce_raw(b, topic, make_batch(zeros[:1], codec=4))
    assert answer.error == 0
