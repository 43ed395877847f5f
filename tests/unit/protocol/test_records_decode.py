"""decode_batch (the C record decode of floe.protocol._recwalk) against independent encoders.

Valid batches come from Floe's encoder and from kafka-python's (pure Python) and
aiokafka's (Cython) batch builders; decode_batch must return exactly the records that
went in. Malformed record sections must raise CorruptRecordError with decode_batch's
messages, never anything else (the C code must not crash or leak a SystemError).
"""

from __future__ import annotations

import gc
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from floe.errors import CorruptRecordError
from floe.protocol import _recwalk
from floe.protocol.batch import ATTR_TIMESTAMP_TYPE, HEADER_SIZE, BatchHeader, read_header
from floe.protocol.records import Headers, Record, decode_batch, encode_batch

INT64_MAX = 2**63 - 1

Fields = tuple[int, int, bytes | None, bytes | None, Headers]

optional_bytes = (
    st.none() | st.just(b"") | st.binary(max_size=40) | st.binary(min_size=300, max_size=20_000)
)
header_keys = st.text(max_size=12) | st.sampled_from(["", "é", "日本語", "🎉", "k" * 200])
record_fields = st.tuples(
    st.integers(0, 3),  # gap before this record's offset delta
    st.integers(-(2**62), 2**62) | st.sampled_from([0, 1, -1]),  # timestamp delta
    optional_bytes,
    optional_bytes,
    st.lists(st.tuples(header_keys, st.none() | st.binary(max_size=30)), max_size=12).map(tuple),
)


def _builder_batch(builder: type, fields: list[Fields], base_ts: int) -> tuple[bytes, list[int]]:
    """A batch from a client's builder (base offset 0); returns it and the offset deltas."""
    b = builder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    delta = -1
    deltas = []
    for gap, ts, key, value, headers in fields:
        delta += 1 + gap
        assert b.append(delta, timestamp=base_ts + ts, key=key, value=value, headers=list(headers))
        deltas.append(delta)
    return bytes(b.build()), deltas


def _rebase(batch: bytes, base_offset: int, log_append_time: int | None) -> bytes:
    """What a broker does to a produced batch: set its base offset and, for
    LogAppendTime, the timestamp type and max timestamp (CRC recomputed)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    if log_append_time is not None:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, attributes | ATTR_TIMESTAMP_TYPE)
        struct.pack_into(">q", out, 35, log_append_time)
        struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(
    fields=st.lists(record_fields, min_size=1, max_size=25),
    base_offset=st.integers(0, 2**62) | st.just(INT64_MAX - 200),
    base_ts=st.integers(-(2**61), 2**61),
    log_append_time=st.none() | st.integers(0, 2**50),
    how=st.tuples(
        st.sampled_from(["floe", "kafka-python", "aiokafka"]),
        st.sampled_from([bytes, bytearray, memoryview]),
    ),
)
def test_decode_matches_what_independent_encoders_wrote(
    fields: list[Fields],
    base_offset: int,
    base_ts: int,
    log_append_time: int | None,
    how: tuple[str, Callable[[bytes], bytes | bytearray | memoryview]],
) -> None:
    encoder, wrap = how  # the encoder, and the buffer type decode_batch reads
    if encoder == "floe":
        records, delta = [], -1
        for gap, ts, key, value, headers in fields:
            delta += 1 + gap
            records.append(Record(base_offset + delta, base_ts + ts, key, value, headers))
        log_append = int(log_append_time is not None)
        data = encode_batch(records, base_offset=base_offset, timestamp_type=log_append)
        if log_append_time is not None:
            log_append_time = max(r.timestamp for r in records)
    else:
        builder = KafkaPythonBuilder if encoder == "kafka-python" else AiokafkaBuilder
        raw, deltas = _builder_batch(builder, fields, base_ts)
        data = _rebase(raw, base_offset, log_append_time)
        records = [
            Record(base_offset + d, base_ts + ts, key, value, headers)
            for d, (_, ts, key, value, headers) in zip(deltas, fields, strict=True)
        ]
    if log_append_time is not None:
        records = [Record(r.offset, log_append_time, r.key, r.value, r.headers) for r in records]
    prefix = b"\x07" * 5  # the batch sits inside a larger buffer, as in a segment
    buf = wrap(prefix + data + b"\xff" * 3)
    header = read_header(buf, len(prefix))
    decoded = decode_batch(buf, header)
    assert decoded == records
    for r in decoded:
        assert all(type(x) is bytes for x in (r.key, r.value) if x is not None)
        assert all(type(k) is str and type(v) in (bytes, type(None)) for k, v in r.headers)
        assert type(r.headers) is tuple
        assert hash(r) == hash(Record(r.offset, r.timestamp, r.key, r.value, r.headers))


def _batch(*records: Record, base_offset: int = 0) -> tuple[bytes, BatchHeader]:
    data = encode_batch(list(records), base_offset=base_offset)
    return data, read_header(data)


def _with_section(section: bytes, count: int = 1, base_offset: int = 0) -> bytes:
    """A batch whose records section is ``section`` (header from Floe's encoder)."""
    out = bytearray(encode_batch([Record(base_offset, 0, None, None)], base_offset=base_offset))
    del out[HEADER_SIZE:]
    out += section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 57, count)
    return bytes(out)


def _decode_section(section: bytes, count: int = 1) -> list[Record]:
    data = _with_section(section, count)
    return decode_batch(data, read_header(data))


def _varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_offsets_and_timestamps_past_int64_stay_exact() -> None:
    """Python ints: base + delta is not wrapped at 64 bits (as the Python loop did)."""
    body = b"\x00" + _varint(2**62) + _varint(2) + _varint(-1) + _varint(-1) + _varint(0)
    raw = bytearray(_with_section(_varint(len(body)) + body))
    struct.pack_into(">q", raw, 0, INT64_MAX)  # base offset
    struct.pack_into(">q", raw, 27, INT64_MAX)  # base timestamp
    expected = Record(INT64_MAX + 2, INT64_MAX + 2**62, None, None)
    assert decode_batch(raw, read_header(raw)) == [expected]


def test_negative_lengths_other_than_minus_one_read_as_null() -> None:
    """As Kafka's DefaultRecord (and the old loop): any negative key/value length is null,
    a negative header count is no headers."""
    # attributes, ts 0, offset 0, key -2, value -3, headers -1
    body = bytes([0, 0, 0, 0x03, 0x05, 0x01])
    assert _decode_section(bytes([len(body) << 1]) + body) == [Record(0, 0, None, None, ())]


def test_records_are_untracked_by_the_garbage_collector() -> None:
    data, h = _batch(Record(0, 1, b"k", b"v", (("a", b"b"), ("c", None))))
    (r,) = decode_batch(data, h)
    assert not gc.is_tracked(r) and not gc.is_tracked(r.headers)


def test_the_c_decode_refuses_a_record_class_it_cannot_fill() -> None:
    """It writes Record's slots directly: a class with other slots is refused, not
    half-filled."""

    @dataclass(frozen=True, slots=True)
    class Wider:
        offset: int
        timestamp: int
        key: bytes | None
        value: bytes | None
        headers: Headers
        extra: int = 0

    data, h = _batch(Record(0, 1, b"k", b"v"))
    with pytest.raises(TypeError, match="6 slots"):
        _recwalk.decode(data, HEADER_SIZE, len(data), 1, 0, 1, None, Wider)
    with pytest.raises(TypeError, match="no __slots__"):
        _recwalk.decode(data, HEADER_SIZE, len(data), 1, 0, 1, None, int)
    assert decode_batch(data, h) == [Record(0, 1, b"k", b"v")]


def test_decode_from_an_mmap() -> None:
    data, _ = _batch(Record(0, 1, b"k", b"v" * 100, (("h", b"x"),)), Record(1, 2, None, b""))
    with mmap.mmap(-1, len(data)) as m:
        m[:] = data
        assert decode_batch(m, read_header(m)) == decode_batch(data, read_header(data))


VALID = bytes([0x16, 0, 0, 0, 0x02, ord("k"), 0x02, ord("v"), 0x02, 0x02, ord("h"), 0x01])
"""One record: key b"k", value b"v", header ("h", None); its length byte is 0x16 (11)."""


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (VALID[:-1], 1, "truncated or malformed record"),
        (VALID + b"\x00", 1, "trailing bytes after the last record"),
        (VALID, 2, "truncated or malformed record"),
        (VALID, 2**31 - 1, "truncated or malformed record"),
        (VALID, -1, "trailing bytes after the last record"),
        (bytes([0x18]) + VALID[1:] + b"\x00", 1, "record length does not match its contents"),
        (bytes([0x14]) + VALID[1:], 1, "record length does not match its contents"),
        (bytes([0x01]) + VALID[1:], 1, "record length does not match its contents"),
        (b"\xff" * 11, 1, "varint too long"),
        (bytes([0x16, 0]) + b"\x80" * 9 + b"\x02" + VALID[3:], 1, "varint too long"),
        (bytes([0x16, 0, 0, 0, 0x20]) + b"k", 1, "truncated or malformed record"),
        (VALID[:8] + bytes([0x02, 0x02, 0xFF, 0x01]), 1, "truncated or malformed record"),
        (VALID[:8] + bytes([0x02, 0x04, 0xC3, 0x28, 0x01]), 1, "truncated or malformed record"),
        (VALID[:8] + bytes([0x02, 0x03, 0x01]), 1, "negative header key length"),
        (VALID[:8] + bytes([0xFE, 0xFF, 0xFF, 0xFF, 0x0F]), 1, "truncated or malformed record"),
        (VALID[:11] + bytes([0x7E]), 1, "record length does not match its contents"),
    ],
    ids=[
        "truncated", "trailing", "count too high", "count int32 max", "negative count",
        "length too long", "length too short", "negative length", "eleven-byte varint",
        "varint past 64 bits", "key past the data", "header key not utf-8 (0xff)",
        "header key not utf-8 (bad continuation)", "negative header key length",
        "header count past the data", "header value past the record end",
    ],
)  # fmt: skip
def test_malformed_records_raise_the_reason(section: bytes, count: int, message: str) -> None:
    assert _decode_section(VALID) == [Record(0, 0, b"k", b"v", (("h", None),))]
    with pytest.raises(CorruptRecordError, match=f"^{message}$"):
        _decode_section(section, count)


@settings(max_examples=60, deadline=None)
@given(fields=st.lists(record_fields, min_size=1, max_size=4))
def test_truncated_at_every_byte_raises_corrupt_record(fields: list[Fields]) -> None:
    records = [Record(i, ts, k, v, hs) for i, (_, ts, k, v, hs) in enumerate(fields)]
    data = encode_batch(records, base_offset=0)
    for cut in range(HEADER_SIZE, len(data)):
        with pytest.raises(CorruptRecordError):
            decode_batch(data, _with_length(read_header(data), cut))


def _with_length(h: BatchHeader, size: int) -> BatchHeader:
    h.batch_length = size - 12
    return h


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(record_fields, min_size=1, max_size=3),
    edits=st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.sampled_from(["set", "delete", "insert"]),
            st.binary(min_size=1, max_size=11),
        ),
        min_size=1,
        max_size=4,
    ),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 2**30]),
)
def test_mutated_sections_decode_or_raise_corrupt_record(
    fields: list[Fields], edits: list[tuple[int, str, bytes]], count_change: int
) -> None:
    """Bounded here; a long random-mutation run against the Python loop it replaced was
    done once by hand (see the pull request)."""
    records = [Record(i, ts, k, v, hs) for i, (_, ts, k, v, hs) in enumerate(fields)]
    section = bytearray(encode_batch(records, base_offset=0)[HEADER_SIZE:])
    for where, op, blob in edits:
        at = where % (len(section) + 1)
        if op == "set":
            section[at : at + len(blob)] = blob
        elif op == "delete":
            del section[at : at + len(blob)]
        else:
            section[at:at] = blob
    try:
        decoded = _decode_section(bytes(section), len(records) + count_change)
    except CorruptRecordError:
        return
    assert all(isinstance(r, Record) for r in decoded)
