"""Record (magic v2) codec: the records inside a batch, sans I/O.

:mod:`floe.protocol.batch` handles batch headers without touching records; this module
decodes and encodes the records themselves, for the places that must look inside a
batch (table-topic tasks, compaction, null-key checks on compacted topics, ListOffsets
by timestamp). :func:`decode_batch` walks the records in C (``_recwalk.decode``).

Record layout (every integer a zigzag varint)::

    length, attributes int8, timestampDelta, offsetDelta,
    keyLength, key, valueLength, value, headerCount, (keyLen, key, valueLen, value)*

A length of -1 means null. Compression applies to the records section as a whole:
gzip, snappy (raw, or the xerial framing Java clients write), lz4 (frame format), zstd.

Invariant: decoding never trusts lengths blindly; malformed input raises
:class:`~floe.errors.CorruptRecordError`, never IndexError. :func:`decompress_bounded`
never holds more than its limit of decompressed bytes, whatever the input claims.
"""

from __future__ import annotations

import mmap
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import cramjam
import crc32c

from floe.errors import CorruptRecordError, ErrorCode, InvalidRecordError, KafkaError
from floe.protocol import _recwalk
from floe.protocol.batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
)

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">qiiBIhiqqqhii")
_CRC = struct.Struct(">I")

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record; ``offset`` and ``timestamp`` are absolute.

    :func:`decode_batch` fills these five slots from C without calling ``__init__``
    (``_recwalk.c`` checks the slots): a new field or a ``__post_init__`` needs the C
    side changed too."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


def _unxerial(data: bytes) -> bytes:
    """Undo the xerial snappy framing: a 16-byte header, then (int32 length, block)*."""
    out = bytearray()
    pos = 16
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("xerial snappy block overruns the data")
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
        pos += n
    return bytes(out)


def decompress(compression: int, data: bytes) -> bytes:
    """Decompress a batch's records section.

    Raises:
        CorruptRecordError: the data does not decompress.
        InvalidRecordError: an unknown compression type.
    """
    try:
        if compression == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if compression == COMPRESSION_SNAPPY:
            if data[:8] == _XERIAL_MAGIC:
                return _unxerial(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if compression == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if compression == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"cannot decompress records: {exc}") from None
    raise InvalidRecordError(f"unknown compression type {compression}")


class DecompressedTooLargeError(KafkaError):
    """A compressed records section decompresses to more than the allowed bytes."""

    code = ErrorCode.message_too_large


_OUTPUT_FULL = "failed to write whole buffer"
"""cramjam's message when ``decompress_into`` runs out of output space (cramjam pinned;
tests/unit/protocol/test_validate.py holds it to that for every codec)."""


RETAINED_SCRATCH_BYTES = 4 * 1024 * 1024
"""Decompressed bytes whose pages :func:`decompress_bounded` keeps between calls; pages
beyond are given back to the OS after each call that used them."""


class _Scratch(threading.local):
    """The output buffer of :func:`decompress_bounded`, one per thread: an anonymous
    mapping reused from call to call, because writing fresh pages costs a page fault
    each (about 1 ms per MiB, more than zstd takes to decompress it). It grows to the
    largest limit asked for (address space only) and holds at most
    :data:`RETAINED_SCRATCH_BYTES` of memory between calls; it lives as long as its
    thread."""

    buf: mmap.mmap | None = None


_scratch = _Scratch()


@contextmanager
def decompress_bounded(
    compression: int, data: bytes | bytearray | memoryview, limit: int
) -> Iterator[tuple[mmap.mmap, int]]:
    """Decompress a records section into this thread's scratch mapping; yields the
    mapping and the decompressed length, valid inside the ``with`` block only (the
    caller neither keeps nor closes the mapping).

    Memory follows the real output and stops at ``limit``: a few KB of zstd claiming
    gigabytes cost at most ``limit`` bytes, given back on exit, and the time to
    produce them. Snappy's declared lengths (per xerial block) are checked before
    anything is decompressed.

    Raises:
        DecompressedTooLargeError: the data decompresses to more than ``limit`` bytes.
        CorruptRecordError: the data does not decompress.
        InvalidRecordError: an unknown compression type.
    """
    if compression not in (COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        raise InvalidRecordError(f"unknown compression type {compression}")
    out = _scratch.buf
    if out is None or len(out) < limit + 1:
        if out is not None:
            out.close()
        # private: MADV_DONTNEED frees private anonymous pages, not shared ones
        out = _scratch.buf = mmap.mmap(-1, limit + 1, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    n = limit + 1  # what a failure may have written
    try:
        try:
            if compression == COMPRESSION_SNAPPY:
                n = _unsnappy_into(data, out, limit)
            else:
                codec = {
                    COMPRESSION_GZIP: cramjam.gzip,
                    COMPRESSION_LZ4: cramjam.lz4,
                    COMPRESSION_ZSTD: cramjam.zstd,
                }[compression]
                with memoryview(out) as view:
                    n = codec.decompress_into(data, view[: limit + 1])
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL in str(exc):
                raise DecompressedTooLargeError(_too_large(limit)) from None
            raise CorruptRecordError(f"cannot decompress records: {exc}") from None
        if n > limit:
            raise DecompressedTooLargeError(_too_large(limit))
        yield out, n
    finally:
        if n > RETAINED_SCRATCH_BYTES:
            out.madvise(mmap.MADV_DONTNEED, RETAINED_SCRATCH_BYTES)


def _too_large(limit: int) -> str:
    return f"records decompress to more than {limit} bytes"


def _unsnappy_into(data: bytes | bytearray | memoryview, out: mmap.mmap, limit: int) -> int:
    """Raw or xerial-framed snappy into ``out``, each block's declared length checked
    against what is left of ``limit`` before it is decompressed."""
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(view) > limit:
            raise DecompressedTooLargeError(_too_large(limit))
        return int(cramjam.snappy.decompress_raw_into(view, out))
    total = 0
    pos = 16
    end = len(view)
    with memoryview(out) as dst:
        while pos < end:
            if pos + 4 > end:
                raise CorruptRecordError("truncated xerial snappy block length")
            (size,) = _I32.unpack_from(view, pos)
            pos += 4
            if size < 0 or pos + size > end:
                raise CorruptRecordError("xerial snappy block overruns the data")
            block = view[pos : pos + size]
            if total + cramjam.snappy.decompress_raw_len(block) > limit:
                raise DecompressedTooLargeError(_too_large(limit))
            total += int(cramjam.snappy.decompress_raw_into(block, dst[total:]))
            pos += size
    return total


def compress(compression: int, data: bytes) -> bytes:
    """Compress a records section; snappy uses the xerial framing every client reads.

    Raises:
        InvalidRecordError: an unknown compression type.
    """
    if compression == COMPRESSION_NONE:
        return data
    if compression == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if compression == COMPRESSION_SNAPPY:
        out = bytearray(_XERIAL_HEADER)
        for i in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if compression == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if compression == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise InvalidRecordError(f"unknown compression type {compression}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode one zigzag varint at ``pos``; returns (value, next position)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _records_section(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    data = bytes(buf[header.position + HEADER_SIZE : header.position + header.size])
    return decompress(header.compression, data) if header.compression else data


def decode_batch(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record]:
    """Decode every record of the batch described by ``header`` (positioned in ``buf``).

    For LogAppendTime batches every record gets the batch's max timestamp, as Kafka
    readers do. Control batches decode like any other (their key is the control type).
    The records are built in C (:mod:`floe.protocol._recwalk`: ~0.15 us per record,
    the Python loop it replaced ~2.1 us); keys, values and header values are ``bytes``,
    and the records are not tracked by the garbage collector (they hold no cycles).

    Raises:
        CorruptRecordError: malformed records or compressed data.
        InvalidRecordError: an unknown compression type.
    """
    start = header.position + HEADER_SIZE
    stop = header.position + header.size
    data = buf
    if header.compression:
        data = decompress(header.compression, bytes(buf[start:stop]))
        start, stop = 0, len(data)
    append_time = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
    try:
        return _recwalk.decode(
            data, start, stop, header.record_count, header.base_offset,
            header.base_timestamp, append_time, Record,
        )  # fmt: skip
    except ValueError as exc:
        raise CorruptRecordError(str(exc)) from None


def decode_keys(
    buf: bytes | bytearray | memoryview, header: BatchHeader
) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, is tombstone) of every record: what compaction and the null-key
    check need, without building values, headers or :class:`Record` objects.

    Raises:
        CorruptRecordError: malformed records or compressed data.
        InvalidRecordError: an unknown compression type.
    """
    data = _records_section(buf, header)
    base_offset = header.base_offset
    varint = _varint
    out: list[tuple[int, bytes | None, bool]] = []
    pos = 0
    try:
        for _ in range(header.record_count):
            length, pos = varint(data, pos)
            end = pos + length
            _, pos = varint(data, pos + 1)  # attributes, timestamp delta
            delta, pos = varint(data, pos)
            n, pos = varint(data, pos)
            key = None if n < 0 else data[pos : pos + n]
            value_length, _ = varint(data, pos + max(n, 0))
            out.append((base_offset + delta, key, value_length < 0))
            pos = end
    except IndexError:
        raise CorruptRecordError("truncated or malformed record") from None
    if pos != len(data):
        raise CorruptRecordError("record lengths do not match the batch")
    return out


def _put_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _put_varint(out, len(data))
        out += data


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int,
    compression: int = COMPRESSION_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = 0,
    last_offset_delta: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode ``records`` as one v2 batch with a valid CRC32C.

    Record offsets become deltas from ``base_offset`` (gaps are allowed, as after
    compaction). ``last_offset_delta`` defaults to the last record's delta; compaction
    passes the original batch's value so offsets stay monotonic across removed records.

    Raises:
        InvalidRecordError: no records, offsets below ``base_offset``, or an unknown
            compression type.
    """
    if not records:
        raise InvalidRecordError("a record batch needs at least one record")
    base_ts = records[0].timestamp
    max_ts = base_ts
    body = bytearray()
    rec = bytearray()
    for r in records:
        delta = r.offset - base_offset
        if delta < 0:
            raise InvalidRecordError("record offset below the batch base offset")
        max_ts = max(max_ts, r.timestamp)
        rec.clear()
        rec.append(0)
        _put_varint(rec, r.timestamp - base_ts)
        _put_varint(rec, delta)
        _put_bytes(rec, r.key)
        _put_bytes(rec, r.value)
        _put_varint(rec, len(r.headers))
        for hkey, hvalue in r.headers:
            _put_bytes(rec, hkey.encode())
            _put_bytes(rec, hvalue)
        _put_varint(body, len(rec))
        body += rec
    payload = compress(compression, bytes(body))
    attributes = compression
    if timestamp_type:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(
        out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), partition_leader_epoch,
        MAGIC_V2, 0, attributes, last_offset_delta, base_ts, max_ts, producer_id,
        producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    out += payload
    _CRC.pack_into(out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)
