"""Produce-side batch validation (floe.protocol.validate): each rule, compression bombs,
and a property: whatever it accepts, Floe's record decoder and a real client's
(aiokafka's) read back without error, offsets 0..n-1."""

from __future__ import annotations

import functools
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence

import cramjam
import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.errors import CorruptRecordError, ErrorCode, InvalidRecordError, KafkaError
from floe.protocol import batch as wire
from floe.protocol.records import (
    RETAINED_SCRATCH_BYTES,
    DecompressedTooLargeError,
    Record,
    decode_batch,
    decompress_bounded,
    encode_batch,
)
from floe.protocol.validate import MAX_RECORD_ERRORS, Policy, RecordValidationError, validate

NOW = 1_700_000_000_000
HOUR = 3_600_000
LONG_MAX = 2**63 - 1
CODECS = (0, 1, 2, 3, 4)


def policy(**kw: object) -> Policy:
    base: dict[str, object] = {
        "now_ms": NOW,
        "create_time": True,
        "before_max_ms": LONG_MAX,
        "after_max_ms": HOUR,
        "max_uncompressed_bytes": 1 << 20,
    }
    return Policy(**{**base, **kw})  # type: ignore[arg-type]


def varint(n: int) -> bytes:
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
    headers: Sequence[tuple[bytes | None, bytes | None]] = (),
    ts_delta: int = 0,
    offset_delta: int | None = None,
    length_delta: int = 0,
    raw_key_length: int | None = None,
    raw_header_count: int | None = None,
) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(i if offset_delta is None else offset_delta)
    body += field(key) if raw_key_length is None else varint(raw_key_length)
    body += field(value)
    body += varint(len(headers) if raw_header_count is None else raw_header_count)
    for hkey, hvalue in headers:
        body += field(hkey) + field(hvalue)
    return varint(len(body) + length_delta) + body


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    module = {1: cramjam.gzip, 2: cramjam.snappy, 3: cramjam.lz4, 4: cramjam.zstd}[codec]
    return bytes(module.compress_raw(data) if codec == 2 else module.compress(data))


def make_batch(
    records: Sequence[bytes],
    *,
    payload: bytes | None = None,
    codec: int = 0,
    attributes: int = 0,
    count: int | None = None,
    last_delta: int | None = None,
    base_offset: int = 0,
    base_ts: int = NOW,
    max_ts: int | None = None,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytearray:
    body = payload if payload is not None else compress(codec, b"".join(records))
    count = len(records) if count is None else count
    header = struct.pack(
        ">qiiBIhiqqqhii",
        base_offset, 49 + len(body), -1, 2, 0, codec | attributes,
        count - 1 if last_delta is None else last_delta,
        base_ts, base_ts if max_ts is None else max_ts, *producer, count,
    )  # fmt: skip
    out = bytearray(header + body)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return out


def check(data: bytearray, pol: Policy | None = None) -> int:
    (h,) = wire.scan(data)
    return validate(data, h, pol or policy())


def good(n: int = 3) -> list[bytes]:
    return [record(i, b"value %d" % i, headers=[(b"h", b"x")]) for i in range(n)]


# ------------------------------------------------------------------ accepted


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_pass_and_give_the_max_timestamp(codec: int) -> None:
    recs = [record(0, ts_delta=5), record(1, ts_delta=-3), record(2, ts_delta=9000), record(3)]
    assert check(make_batch(recs, codec=codec)) == NOW + 9000


@pytest.mark.parametrize("codec", CODECS)
def test_real_encoder_output_passes(codec: int) -> None:
    records = [
        Record(i, NOW + i, None if i % 3 else b"key", b"x" * (i * 37), (("trace", b"id"),))
        for i in range(200)
    ]
    data = bytearray(encode_batch(records, base_offset=0, compression=codec))
    assert check(data) == NOW + 199


def test_long_varints_take_the_slow_path() -> None:
    """Multi-byte lengths, deltas and header counts (beyond the inline fast paths)."""
    headers = [(b"k%d" % i + b"\xc3\xa9" * 40, b"v" * 300) for i in range(70)]
    recs = [
        record(i, b"x" * 70_000, key=b"y" * 200, headers=headers, ts_delta=10**9) for i in range(3)
    ]
    assert check(make_batch(recs), policy(after_max_ms=LONG_MAX)) == NOW + 10**9


# ------------------------------------------------------------------ header rules


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (make_batch(good(), base_offset=5), "base offset 0"),
        (make_batch([], payload=b"", count=0, last_delta=0), "invalid record count 0"),
        (make_batch(good(3), last_delta=1), "does not match the offset range"),
        (make_batch(good(3), count=2, last_delta=2), "does not match the offset range"),
        (make_batch(good(), attributes=5), "unknown compression type 5"),
        (make_batch(good(), attributes=7), "unknown compression type 7"),
        (make_batch(good(), attributes=wire.ATTR_CONTROL), "control batches"),
        (make_batch(good(), producer=(77, 0, -1)), "invalid sequence number -1"),
        (make_batch(good(), attributes=wire.ATTR_TRANSACTIONAL), "needs a producer id"),
    ],
)
def test_header_rules(data: bytearray, why: str) -> None:
    with pytest.raises(InvalidRecordError, match=why):
        check(data)


# ------------------------------------------------------------------ record framing


MALFORMED = {
    "record length past the batch": [*good(2), record(2, length_delta=40)],
    "record length short of its fields": [*good(2), record(2, length_delta=-2)],
    "record length beyond its fields": [*good(2), record(2, length_delta=2) + b"\0\0"],
    "negative record length": [record(0, length_delta=-100)],
    "trailing bytes": [*good(3), b"\x00\x00"],
    "offset deltas repeat": [record(0), record(0)],
    "offset deltas start at 1": [record(1), record(2)],
    "offset delta negative": [record(0, offset_delta=-1)],
    "key length -5": [record(0, raw_key_length=-5)],
    "header count -1": [record(0, raw_header_count=-1)],
    "header count past the record": [record(0, raw_header_count=40)],
    "header count of 2**31": [record(0, raw_header_count=2**31)],
    "header key length -1": [record(0, headers=[(None, b"x")])],
    "header value length -3": [record(0, headers=[(b"k", b"x")])[:-2] + varint(-3) + b"x"],
    "record attributes not 0": [record(0)[:1] + b"\x80" + record(0)[2:]],
    "varint of 11 bytes": [record(0)[:3] + b"\xff" * 10 + b"\x01" + record(0)[4:]],
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_records(codec: int, name: str) -> None:
    recs = MALFORMED[name]
    data = make_batch(recs, codec=codec, count=len(recs), last_delta=len(recs) - 1)
    with pytest.raises(InvalidRecordError):
        check(data)


def test_fewer_records_than_counted() -> None:
    with pytest.raises(InvalidRecordError, match="records"):
        check(make_batch(good(2), count=3, last_delta=2))


def test_offset_deltas_that_skip() -> None:
    with pytest.raises(InvalidRecordError, match="offset delta 2, not 1"):
        check(make_batch([record(0), record(2)], count=2, last_delta=1))


def test_header_key_not_utf8_is_a_record_error() -> None:
    recs = [
        record(0, headers=[(b"ok", None)]),
        record(1, headers=[(b"\xff", b"v"), (b"\xc3", b"v")]),  # two bad keys, one record
        record(2, headers=[(b"caf\xc3\xa9", b"v")]),  # UTF-8, not ASCII: fine
        record(3, headers=[(b"\xed\xa0\x80", b"v")]),  # a surrogate is not UTF-8
    ]
    with pytest.raises(RecordValidationError) as info:
        check(make_batch(recs))
    assert info.value.code == ErrorCode.invalid_record
    assert [e.index for e in info.value.record_errors] == [1, 3]


# ------------------------------------------------------------------ timestamps


def test_timestamps_within_bounds() -> None:
    pol = policy(before_max_ms=1000, after_max_ms=2000)
    assert check(make_batch(good(), base_ts=NOW - 1000), pol) == NOW - 1000
    assert check(make_batch(good(), base_ts=NOW + 2000), pol) == NOW + 2000
    assert check(make_batch(good(), base_ts=-1), pol) == -1  # NO_TIMESTAMP is not checked


def test_timestamps_out_of_bounds_are_record_errors() -> None:
    pol = policy(before_max_ms=1000, after_max_ms=2000)
    recs = [record(0), record(1, ts_delta=-1001), record(2, ts_delta=2001), record(3)]
    with pytest.raises(RecordValidationError) as info:
        check(make_batch(recs), pol)
    assert info.value.code == ErrorCode.invalid_timestamp
    assert [e.index for e in info.value.record_errors] == [1, 2]
    assert "outside" in info.value.record_errors[0].message


def test_a_no_timestamp_record_among_late_ones() -> None:
    """-1 is exempt even when the walk's min/max crosses a bound (the slow path)."""
    recs = [record(0, ts_delta=-1 - NOW), record(1)]
    assert check(make_batch(recs), policy(before_max_ms=1000)) == NOW


def test_record_errors_are_capped() -> None:
    recs = [record(i, ts_delta=5 * HOUR) for i in range(MAX_RECORD_ERRORS + 50)]
    with pytest.raises(RecordValidationError) as info:
        check(make_batch(recs))
    assert len(info.value.record_errors) == MAX_RECORD_ERRORS


def test_log_append_time_topic_checks_no_timestamp() -> None:
    pol = policy(create_time=False, before_max_ms=0, after_max_ms=0)
    check(make_batch(good(), base_ts=NOW + 100 * HOUR), pol)


def test_producers_cannot_send_log_append_time_batches() -> None:
    with pytest.raises(RecordValidationError) as info:
        check(make_batch(good(2), attributes=wire.ATTR_TIMESTAMP_TYPE))
    assert info.value.code == ErrorCode.invalid_timestamp
    assert [e.index for e in info.value.record_errors] == [0, 1]


# ------------------------------------------------------------------ compression


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_does_not_decompress(codec: int) -> None:
    payload = b"\x00\x01 not compressed at all" * 10
    with pytest.raises(CorruptRecordError):
        check(make_batch(good(), codec=codec, payload=payload))


def _xerial(blocks: Sequence[bytes]) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    return out + b"".join(struct.pack(">i", len(b)) + b for b in blocks)


def test_xerial_snappy_is_read() -> None:
    recs = b"".join(good(50))
    blocks = [
        bytes(cramjam.snappy.compress_raw(recs[i : i + 1000])) for i in range(0, len(recs), 1000)
    ]
    check(make_batch(good(50), codec=2, payload=_xerial(blocks)))


@pytest.mark.parametrize(
    "payload",
    [
        _xerial([b"\x05abc"])[:-2],  # block overruns the data
        _xerial([b"\x05abc"]) + b"\x00\x00",  # truncated block length
    ],
)
def test_broken_xerial_framing(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        check(make_batch(good(), codec=2, payload=payload))


@functools.cache
def bombs() -> dict[str, tuple[int, bytes]]:
    zeros = bytes(64 << 20)
    claim = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])  # snappy header: 4 GiB
    return {
        "gzip": (1, bytes(cramjam.gzip.compress(zeros))),
        "snappy": (2, bytes(cramjam.snappy.compress_raw(zeros))),
        "snappy claiming 4 GiB": (2, claim + b"\x0cabcd"),
        "xerial claiming 4 GiB a block": (2, _xerial([claim + b"\x0cabcd"] * 3)),
        "lz4": (3, bytes(cramjam.lz4.compress(zeros))),
        "zstd": (4, bytes(cramjam.zstd.compress(zeros))),
    }


BOMB_NAMES = ["gzip", "snappy", "snappy claiming 4 GiB", "xerial claiming 4 GiB a block"]


@pytest.mark.parametrize("name", [*BOMB_NAMES, "lz4", "zstd"])
def test_bombs_stop_at_the_limit(name: str) -> None:
    """cramjam's "output full" error is what tells a bomb from garbage: pinned here."""
    codec, payload = bombs()[name]
    start = time.perf_counter()
    with pytest.raises(DecompressedTooLargeError, match="more than 1048576 bytes"):
        check(make_batch(good(), codec=codec, payload=payload))
    assert time.perf_counter() - start < 5


def test_limit_is_inclusive() -> None:
    data = b"".join(good(100))
    for codec in (1, 2, 3, 4):
        with decompress_bounded(codec, compress(codec, data), len(data)) as (out, n):
            assert bytes(out[:n]) == data
        with pytest.raises(DecompressedTooLargeError):  # noqa: SIM117 (raised on entry)
            with decompress_bounded(codec, compress(codec, data), len(data) - 1):
                pass


def test_a_zstd_bomb_costs_no_memory() -> None:
    """A 4 GiB zstd bomb (128 KB) against a 16 MiB limit, in a fresh process so its
    peak RSS says what the decompression cost."""
    script = textwrap.dedent(
        """
        import resource, zstandard
        from floe.protocol.records import DecompressedTooLargeError, decompress_bounded
        c = zstandard.ZstdCompressor().compressobj()
        chunk = bytes(1 << 20)
        bomb = b"".join(c.compress(chunk) for _ in range(4 * 1024)) + c.flush()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            with decompress_bounded(4, bomb, 16 << 20):
                raise AssertionError("the bomb decompressed")
        except DecompressedTooLargeError:
            pass
        print(len(bomb), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    size, grown_mib = map(int, out.stdout.split())
    assert size < 1_000_000
    assert grown_mib <= 16 + 8, f"peak RSS grew by {grown_mib} MiB"


def test_scratch_pages_beyond_the_retained_size_are_given_back() -> None:
    big = b"\x01" * (RETAINED_SCRATCH_BYTES + (8 << 20))
    with decompress_bounded(4, bytes(cramjam.zstd.compress(big)), 64 << 20) as (out, n):
        assert n == len(big)
        assert out[n - 1] == 1  # all of it valid inside the block
    # after MADV_DONTNEED the tail reads back as zeros; the head is kept
    assert (out[RETAINED_SCRATCH_BYTES - 1], out[RETAINED_SCRATCH_BYTES]) == (1, 0)


# ------------------------------------------------------------------ property


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytearray, int]:
    n = draw(st.integers(1, 8))
    recs = []
    for i in range(n):
        key = draw(st.none() | st.binary(max_size=80))
        value = draw(st.none() | st.binary(max_size=300))
        headers = draw(
            st.lists(
                st.tuples(st.binary(max_size=6), st.none() | st.binary(max_size=6)), max_size=3
            )
        )
        recs.append(record(i, value, key=key, headers=headers, ts_delta=draw(st.integers(-9, 9))))
    codec = draw(st.sampled_from(CODECS))
    return make_batch(recs, codec=codec), codec


def _mutate(data: bytearray, codec: int, edits: list[tuple[int, int, int]]) -> bytearray:
    """Edit the records section (the decompressed one for compressed batches: the
    interesting lies are inside), then rebuild the batch with a fresh CRC."""
    (h,) = wire.scan(data)
    section = bytearray(data[61:])
    if codec:
        with decompress_bounded(codec, bytes(section), 1 << 20) as (out, n):
            section = bytearray(out[:n])
    for kind, where, value in edits:
        if not section:
            break
        pos = where % len(section)
        if kind == 0:
            section[pos] = value
        elif kind == 1:
            section.insert(pos, value)
        else:
            del section[pos]
    return make_batch(
        [], payload=compress(codec, bytes(section)), codec=codec, count=h.record_count,
        base_ts=h.base_timestamp,
    )  # fmt: skip


@settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    made=batches(),
    edits=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 10**6), st.integers(0, 255)), max_size=3
    ),
)
def test_what_validate_accepts_every_reader_reads(
    made: tuple[bytearray, int], edits: list[tuple[int, int, int]]
) -> None:
    """Random edits inside the records: validate raises a KafkaError or accepts, and
    what it accepts Floe's decoder and aiokafka's (Cython) reader both read, with
    offsets 0..n-1 and UTF-8 header keys. Nothing else (IndexError, ...) escapes."""
    data = _mutate(*made, edits)
    (h,) = wire.scan(data)
    try:
        validate(data, h, policy(before_max_ms=LONG_MAX, after_max_ms=LONG_MAX))
    except KafkaError:
        return
    records = decode_batch(data, h)
    assert [r.offset for r in records] == list(range(h.record_count))
    theirs = list(DefaultRecordBatch(bytes(data)))
    assert [r.offset for r in theirs] == list(range(h.record_count))
    assert [(r.key, r.value) for r in theirs] == [(r.key, r.value) for r in records]


# ------------------------------------------------------------------ batch.py helpers


def test_set_max_timestamp_recomputes_the_crc() -> None:
    data = make_batch(good(), max_ts=NOW + 10**9)
    (h,) = wire.scan(data)
    wire.set_max_timestamp(data, h, NOW)
    (again,) = wire.scan(data)  # CRC verified
    assert again.max_timestamp == NOW == h.max_timestamp


def test_any_transactional() -> None:
    plain = make_batch(good())
    txn = make_batch(good(), attributes=wire.ATTR_TRANSACTIONAL, producer=(1, 0, 0))
    assert not wire.any_transactional(plain)
    assert wire.any_transactional(plain + txn)
    assert not wire.any_transactional(plain[:-1] + txn)  # stops at broken framing
    assert not wire.any_transactional(b"")
