"""Record-batch (magic v2) headers: validation, scanning and in-place patching.

Layout of a v2 batch header (61 bytes, big endian)::

    0  baseOffset int64        27 baseTimestamp int64
    8  batchLength int32       35 maxTimestamp int64
    12 partitionLeaderEpoch    43 producerId int64
    16 magic int8              51 producerEpoch int16
    17 crc uint32 (CRC32C of   53 baseSequence int32
       bytes 21..end)          57 recordCount int32
    21 attributes int16        61 records...
    23 lastOffsetDelta int32

``batchLength`` counts the bytes after itself (the whole batch is 12 + batchLength).
Patching the base offset or the partition leader epoch does not touch the CRC's range;
changing the timestamp type or max timestamp does, so the CRC is recomputed then.

Invariant: every function here works on a buffer and positions; none copies records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from floe.errors import CorruptRecordError, InvalidRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_V2 = 2

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiiBIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_COUNTS = struct.Struct(">i9xh34xi")
"""batchLength, attributes and recordCount, read from a batch's byte 8 (one unpack)."""


@dataclass(slots=True)
class BatchHeader:
    """The decoded header of one batch at ``position`` in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at ``position`` without checking the CRC.

    Raises:
        CorruptRecordError: fewer than 61 bytes remain.
    """
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError("truncated record batch header")
    return BatchHeader(position, *_HEADER.unpack_from(buf, position))


def scan(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, partial_ok: bool = False
) -> list[BatchHeader]:
    """Decode every batch header in ``buf``, checking framing (and by default CRCs).

    Args:
        verify_crc: check each batch's CRC32C.
        partial_ok: stop quietly at a trailing incomplete batch instead of failing
            (a fetch response may end with a partial batch; a log tail may be torn).

    Raises:
        CorruptRecordError: bad framing, a batch length that overruns the buffer, or a
            CRC mismatch.
        InvalidRecordError: a batch whose magic is not 2, or with no records.
    """
    out: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    view = memoryview(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            if partial_ok:
                break
            raise CorruptRecordError("truncated record batch")
        header = BatchHeader(pos, *_HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC_V2:
            raise InvalidRecordError(f"unsupported record batch magic {header.magic}")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"record batch length {header.batch_length} too small")
        stop = pos + LOG_OVERHEAD + header.batch_length
        if stop > end:
            if partial_ok:
                break
            raise CorruptRecordError("record batch length overruns the data")
        if header.last_offset_delta < 0 or header.record_count < 0:
            raise CorruptRecordError("negative record count or offset delta")
        if verify_crc and crc32c.crc32c(view[pos + 21 : stop]) != header.crc:
            raise CorruptRecordError("record batch CRC32C mismatch")
        out.append(header)
        pos = stop
    return out


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Overwrite a batch's base offset in place (outside the CRC's range)."""
    _I64.pack_into(buf, position, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    _I32.pack_into(buf, position + 12, epoch)


def set_log_append_time(
    buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int
) -> None:
    """Mark a batch as LogAppendTime with ``timestamp_ms`` as its max timestamp.

    Rewrites attributes and maxTimestamp and recomputes the CRC, as Kafka does; readers
    take every record's timestamp from maxTimestamp for such batches.
    """
    pos = header.position
    header.attributes |= ATTR_TIMESTAMP_TYPE
    header.max_timestamp = timestamp_ms
    _I16.pack_into(buf, pos + 21, header.attributes)
    _I64.pack_into(buf, pos + 35, timestamp_ms)
    header.crc = crc32c.crc32c(memoryview(buf)[pos + 21 : pos + header.size])
    _U32.pack_into(buf, pos + 17, header.crc)


def set_max_timestamp(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int) -> None:
    """Overwrite a batch's max timestamp with the one its records give and recompute the
    CRC, as Kafka does on append: the time index and retention trust this field, so a
    producer's wrong value must not reach the log."""
    pos = header.position
    header.max_timestamp = timestamp_ms
    _I64.pack_into(buf, pos + 35, timestamp_ms)
    with memoryview(buf) as view:
        header.crc = crc32c.crc32c(view[pos + 21 : pos + header.size])
    _U32.pack_into(buf, pos + 17, header.crc)


def any_transactional(buf: bytes | bytearray | memoryview) -> bool:
    """Whether a whole batch of ``buf`` has the transactional flag: a walk over batch
    lengths that checks nothing else (malformed data is the full scan's to refuse)."""
    pos = 0
    end = len(buf)
    unpack = _COUNTS.unpack_from
    while end - pos >= HEADER_SIZE:
        length, attributes, _ = unpack(buf, pos + 8)
        if length <= 0 or pos + LOG_OVERHEAD + length > end:
            return False
        if attributes & ATTR_TRANSACTIONAL:
            return True
        pos += LOG_OVERHEAD + length
    return False


COUNT_EXACT_BATCHES = 64
""":func:`count_records` reads at most this many batch headers of one buffer."""


def count_records(buf: bytes | bytearray | memoryview) -> int:
    """Records in the whole data batches of ``buf`` (control batches and a trailing
    partial batch not counted): for metrics, so it reads three fields per batch in one
    unpack and checks nothing else. Exact for up to :data:`COUNT_EXACT_BATCHES`
    batches; beyond, the rest of the buffer is counted at the records-per-byte rate of
    the batches read, which bounds the cost of a fetch of many one-record batches."""
    count = 0
    pos = 0
    end = len(buf)
    unpack = _COUNTS.unpack_from
    for _ in range(COUNT_EXACT_BATCHES):
        if end - pos < HEADER_SIZE:
            return count
        length, attributes, records = unpack(buf, pos + 8)
        if length <= 0 or pos + LOG_OVERHEAD + length > end:
            return count
        pos += LOG_OVERHEAD + length
        if not attributes & ATTR_CONTROL:
            count += records
    if end - pos < HEADER_SIZE:
        return count
    return count + round(count * (end - pos) / pos)
