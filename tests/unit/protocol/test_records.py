"""Record codec: round trips for every compression, xerial snappy, CRC, malformed input."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from floe.errors import CorruptRecordError, InvalidRecordError
from floe.protocol.batch import read_header, scan
from floe.protocol.records import Record, decode_batch, decode_keys, encode_batch

optional_bytes = st.none() | st.binary(max_size=200)
record_fields = st.tuples(
    st.integers(0, 5),  # offset gap before this record
    st.integers(-(2**40), 2**40),  # timestamp delta
    optional_bytes,
    optional_bytes,
    st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    fields=st.lists(record_fields, min_size=1, max_size=20),
    base_offset=st.integers(0, 2**62),
    base_ts=st.integers(0, 2**41),
    compression=st.sampled_from([0, 1, 2, 3, 4]),
    transactional=st.booleans(),
)
def test_round_trip(
    fields: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    base_offset: int,
    base_ts: int,
    compression: int,
    transactional: bool,
) -> None:
    records = []
    offset = base_offset
    for gap, ts, key, value, headers in fields:
        offset += gap
        records.append(Record(offset, base_ts + ts, key, value, tuple(headers)))
        offset += 1
    data = encode_batch(
        records, base_offset=base_offset, compression=compression, producer_id=9,
        producer_epoch=1, base_sequence=4, transactional=transactional,
    )  # fmt: skip
    (header,) = scan(data)  # CRC verified
    assert header.compression == compression
    assert header.record_count == len(records)
    assert header.last_offset == records[-1].offset
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.is_transactional == transactional
    assert decode_batch(data, header) == records
    assert decode_keys(data, header) == [(r.offset, r.key, r.value is None) for r in records]


def test_last_offset_delta_and_log_append_time() -> None:
    recs = [Record(10, 5, b"k", b"v"), Record(12, 7, b"k2", None)]
    data = encode_batch(recs, base_offset=10, last_offset_delta=5, timestamp_type=1)
    h = read_header(data)
    assert h.last_offset_delta == 5 and h.log_append_time
    assert [r.timestamp for r in decode_batch(data, h)] == [7, 7]


def test_decode_at_a_position_in_a_larger_buffer() -> None:
    first = encode_batch([Record(0, 1, b"a", b"b")], base_offset=0)
    second = encode_batch([Record(1, 2, b"c", b"d")], base_offset=1, compression=2)
    buf = first + second
    assert [decode_batch(buf, h)[0].key for h in scan(buf)] == [b"a", b"c"]


def test_raw_snappy_as_librdkafka_sends() -> None:
    recs = [Record(0, 1, b"k", b"x" * 1000)]
    plain = encode_batch(recs, base_offset=0)
    body = bytes(cramjam.snappy.compress_raw(plain[61:]))
    raw = bytearray(plain[:61] + body)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, 2)
    h = read_header(raw)
    assert decode_batch(raw, h) == recs


def test_xerial_multi_block_snappy() -> None:
    recs = [Record(i, 1, b"k", bytes([i]) * 20_000) for i in range(5)]  # > 32 KiB blocks
    data = encode_batch(recs, base_offset=0, compression=2)
    assert data[61:69] == b"\x82SNAPPY\x00"
    assert decode_batch(data, read_header(data)) == recs


def test_malformed_input_raises_corrupt_record() -> None:
    data = bytearray(encode_batch([Record(0, 1, b"key", b"value")], base_offset=0))
    truncated = bytes(data[:-3])
    h = read_header(data)
    h.batch_length -= 3
    with pytest.raises(CorruptRecordError):
        decode_batch(truncated, h)
    with pytest.raises(CorruptRecordError):
        decode_keys(truncated, h)
    garbled = bytearray(encode_batch([Record(0, 1, b"k", b"v" * 50)], base_offset=0, compression=4))
    garbled[70:80] = b"\xff" * 10
    with pytest.raises(CorruptRecordError):
        decode_batch(garbled, read_header(garbled))
    with pytest.raises(InvalidRecordError):
        encode_batch([], base_offset=0)
    bad = bytearray(data)
    struct.pack_into(">h", bad, 21, 6)
    with pytest.raises(InvalidRecordError):
        decode_batch(bad, read_header(bad))
