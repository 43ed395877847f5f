"""Validation of a client's record batch before it is appended (Kafka's LogValidator).

The CRC and the batch framing are :func:`floe.protocol.batch.scan`'s; this module checks
what a valid CRC does not prove, with Kafka's error codes:

- the header (:func:`check_header`): base offset 0, a positive record count equal to
  ``lastOffsetDelta + 1``, a known codec, no control batch, a producer id with a
  sequence when there is one, and no transactional batch without a producer id
  (INVALID_RECORD); a client's LogAppendTime batch (INVALID_TIMESTAMP, per record);
- the records (:func:`validate`): each record's length inside the batch and equal to
  what its fields take, offset deltas 0, 1, 2 ..., key, value and header lengths
  inside their record, no bytes after the last record (INVALID_RECORD); header keys
  that are UTF-8 (INVALID_RECORD, per record); CreateTime timestamps within the
  topic's ``message.timestamp.before.max.ms`` / ``after.max.ms`` (INVALID_TIMESTAMP,
  per record);
- compressed batches are decompressed for this with a bound
  (:func:`floe.protocol.records.decompress_bounded`): MESSAGE_TOO_LARGE past it,
  CORRUPT_MESSAGE when the data does not decompress.

Uncompressed records are walked in place in the request buffer: lengths and varints
only, nothing is copied or decoded into objects. The walk is in C
(:mod:`floe.protocol._recwalk`): in Python it cost ~1 us per record, which made
Produce of small records several times slower.

Invariant: sans I/O; malformed input raises a :class:`~floe.errors.KafkaError`
subclass, never IndexError.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass

from floe.errors import ErrorCode, InvalidRecordError, KafkaError
from floe.protocol._recwalk import walk
from floe.protocol.batch import HEADER_SIZE, NO_TIMESTAMP, BatchHeader
from floe.protocol.records import COMPRESSION_ZSTD, decompress_bounded

__all__ = [
    "MAX_RECORD_ERRORS",
    "Policy",
    "RecordError",
    "RecordValidationError",
    "check_header",
    "validate",
]

MAX_RECORD_ERRORS = 100
"""Record errors reported per batch: every record of a refused batch fails anyway, so
the list only explains; it is capped to keep the response small."""

_Data = bytes | bytearray | mmap.mmap


@dataclass(frozen=True, slots=True)
class Policy:
    """What a topic accepts, resolved once per partition of a request.

    Attributes:
        now_ms: the broker's clock for the timestamp bounds.
        create_time: the topic keeps producer timestamps (``message.timestamp.type``
            CreateTime); LogAppendTime topics do not check them.
        before_max_ms: how far a timestamp may be behind ``now_ms``.
        after_max_ms: how far a timestamp may be ahead of ``now_ms``.
        max_uncompressed_bytes: the most a compressed records section may decompress to.
    """

    now_ms: int
    create_time: bool
    before_max_ms: int
    after_max_ms: int
    max_uncompressed_bytes: int


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record: its index in the batch and why (Produce ``record_errors``)."""

    index: int
    message: str


class RecordValidationError(KafkaError):
    """Records of a well-formed batch are not acceptable (Kafka's RecordValidationException).

    Attributes:
        record_errors: the refused records, at most :data:`MAX_RECORD_ERRORS`.
    """

    def __init__(self, message: str, code: ErrorCode, record_errors: Sequence[RecordError]):
        super().__init__(message, code)
        self.record_errors = tuple(record_errors[:MAX_RECORD_ERRORS])


def check_header(h: BatchHeader) -> None:
    """The header rules Kafka applies to a client's batch (LogValidator.validateBatch).

    Raises:
        InvalidRecordError: see the module docstring.
    """
    if h.base_offset != 0:
        raise InvalidRecordError(f"a produced batch has base offset 0, not {h.base_offset}")
    if h.record_count <= 0:
        raise InvalidRecordError(f"invalid record count {h.record_count}")
    if h.record_count != h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record count {h.record_count} does not match the offset range "
            f"[0, {h.last_offset_delta}]"
        )
    if h.compression > COMPRESSION_ZSTD:
        raise InvalidRecordError(f"unknown compression type {h.compression}")
    if h.is_control:
        raise InvalidRecordError("clients cannot write control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {h.base_sequence} for producer id {h.producer_id}"
        )
    if h.is_transactional and h.producer_id < 0:
        raise InvalidRecordError("a transactional batch needs a producer id")


def validate(buf: bytes | bytearray, h: BatchHeader, policy: Policy) -> int:
    """Check one batch of ``buf`` (header and records) and return its max timestamp as
    Kafka computes it: the largest record timestamp, at least NO_TIMESTAMP (-1).

    Raises:
        InvalidRecordError: a header rule or the record framing (INVALID_RECORD).
        RecordValidationError: refused records (INVALID_TIMESTAMP or INVALID_RECORD,
            with record errors).
        DecompressedTooLargeError: past ``policy.max_uncompressed_bytes``.
        CorruptRecordError: compressed data that does not decompress.
    """
    check_header(h)
    start = h.position + HEADER_SIZE
    end = h.position + h.size
    if not h.compression:
        return _check_records(buf, start, end, h, policy)
    limit = policy.max_uncompressed_bytes
    with (
        memoryview(buf) as view,
        decompress_bounded(h.compression, view[start:end], limit) as (
            out,
            n,
        ),
    ):
        return _check_records(out, 0, n, h, policy)


def _check_records(data: _Data, start: int, end: int, h: BatchHeader, policy: Policy) -> int:
    try:
        low, high, bad_keys = walk(data, start, end, h.record_count)
    except IndexError:
        raise InvalidRecordError(
            f"{h.record_count} records announced, they run past the batch"
        ) from None
    except ValueError as exc:
        raise InvalidRecordError(str(exc)) from None
    errors: list[RecordError] = []
    if h.log_append_time:
        errors = [
            RecordError(i, "producers cannot set the LogAppendTime timestamp type")
            for i in range(min(h.record_count, MAX_RECORD_ERRORS))
        ]
    elif policy.create_time:
        now = policy.now_ms
        lowest = now - policy.before_max_ms - h.base_timestamp
        highest = now + policy.after_max_ms - h.base_timestamp
        if low < lowest or high > highest:
            errors = _timestamp_errors(data, start, h, now, policy)
    if errors:
        raise RecordValidationError(
            f"{len(errors)} record(s) with an invalid timestamp", ErrorCode.invalid_timestamp,
            errors,
        )  # fmt: skip
    if bad_keys:
        raise RecordValidationError(
            f"{len(bad_keys)} record(s) with a header key that is not UTF-8",
            ErrorCode.invalid_record,
            [RecordError(i, "header key is not valid UTF-8") for i in bad_keys],
        )
    return max(h.base_timestamp + high, NO_TIMESTAMP)


def _uvarint(data: _Data, pos: int) -> tuple[int, int]:
    """An unsigned varint of up to 10 bytes at ``pos``: (raw value, next position)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint longer than 10 bytes")


def _timestamp_errors(
    data: _Data, pos: int, h: BatchHeader, now: int, policy: Policy
) -> list[RecordError]:
    """The records whose timestamp is out of bounds (the batch's framing is valid: this
    runs after :func:`_walk`, only when a bound is crossed)."""
    lowest = now - policy.before_max_ms
    highest = now + policy.after_max_ms
    errors: list[RecordError] = []
    for i in range(h.record_count):
        length, pos = _uvarint(data, pos)
        raw, _ = _uvarint(data, pos + 1)
        ts = h.base_timestamp + ((raw >> 1) ^ -(raw & 1))
        pos += length >> 1
        if ts != NO_TIMESTAMP and not lowest <= ts <= highest:
            errors.append(
                RecordError(i, f"timestamp {ts} is outside [{lowest}, {highest}] (now {now})")
            )
            if len(errors) == MAX_RECORD_ERRORS:
                break
    return errors
