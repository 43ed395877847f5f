"""Transaction markers: control batches (sans I/O).

A control batch (attributes: transactional + control) holds one record whose key is
``version int16 (0), type int16`` (0 = ABORT, 1 = COMMIT) and whose value is
``version int16 (0), coordinator epoch int32``. Consumers skip control batches; brokers
read the type to end a producer's transaction.
"""

from __future__ import annotations

import struct

from floe.errors import CorruptRecordError
from floe.protocol.batch import BatchHeader
from floe.protocol.records import Record, decode_batch, encode_batch

ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def encode_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    """One control batch ending ``producer_id``'s transaction (base offset 0)."""
    record = Record(
        0,
        now_ms,
        _KEY.pack(0, COMMIT if commit else ABORT),
        _VALUE.pack(0, coordinator_epoch),
    )
    return encode_batch(
        [record],
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def control_type(buf: bytes | bytearray | memoryview, header: BatchHeader) -> tuple[int, int]:
    """The marker type (ABORT or COMMIT) of the control batch at ``header``, and the
    coordinator epoch its value carries (-1: none).

    Raises:
        CorruptRecordError: the batch has no record or its key is not a control key.
    """
    records = decode_batch(buf, header)
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptRecordError("control batch without a control record key")
    value = records[0].value
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size else -1
    return int(_KEY.unpack_from(records[0].key)[1]), int(epoch)
