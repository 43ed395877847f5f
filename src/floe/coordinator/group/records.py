"""The records of ``__consumer_offsets``: a compact, versioned key/value encoding.

Every key starts with ``u8 key_version`` (0) and ``u8 kind``; every value with
``u8 value_version`` (0). A ``None`` value is a tombstone. Strings are ``i16 length``
(-1 for null) followed by UTF-8 bytes; integers are big-endian.

======  =================================  ==========================================
kind    key fields                         value fields
======  =================================  ==========================================
1       group, topic, partition (i32)      offset (i64), leader epoch (i32),
        (a committed offset)               metadata (nullable str), commit time ms
                                           (i64), expire time ms (i64, -1: default)
2       group (group metadata)             protocol type (str), generation (i32),
                                           protocol name (nullable str), leader (str)
3       group, producer id (i64), topic,   producer epoch (i16), then the offset
        partition (a staged transactional  value fields of kind 1
        offset commit)
4       group, producer id (transaction    producer epoch (i16), commit (u8 0/1)
        marker)
======  =================================  ==========================================

Compaction keeps the latest record of each key, so every key names exactly the piece
of state its value replaces. Readers reject versions they do not know
(:class:`RecordFormatError`) rather than guess.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from floe.errors import FloeError

KEY_VERSION = 0
VALUE_VERSION = 0
_OFFSET, _GROUP, _TXN_OFFSET, _TXN_MARKER = 1, 2, 3, 4


class RecordFormatError(FloeError):
    """A journal record has an unknown version or kind, or is truncated."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class TxnOffsetKey:
    group: str
    producer_id: int
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnMarkerKey:
    group: str
    producer_id: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset. ``expire_ms`` -1 means "the broker's offsets.retention.ms"."""

    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int
    expire_ms: int = -1


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str


@dataclass(frozen=True, slots=True)
class TxnOffsetValue:
    producer_epoch: int
    offset: OffsetValue


@dataclass(frozen=True, slots=True)
class TxnMarkerValue:
    producer_epoch: int
    commit: bool


Key = OffsetKey | GroupKey | TxnOffsetKey | TxnMarkerKey
Value = OffsetValue | GroupValue | TxnOffsetValue | TxnMarkerValue


def _str(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def unpack(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._data):
            raise RecordFormatError("truncated record")
        out = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += size
        return out

    def int(self, fmt: str) -> int:
        return self.unpack(fmt)[0]

    def string(self) -> str | None:
        n = self.int(">h")
        if n < 0:
            return None
        if self._pos + n > len(self._data):
            raise RecordFormatError("truncated record")
        try:
            s = self._data[self._pos : self._pos + n].decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None
        self._pos += n
        return s

    def req_str(self) -> str:
        s = self.string()
        if s is None:
            raise RecordFormatError("unexpected null string")
        return s


def encode_key(key: Key) -> bytes:
    head = struct.pack(">BB", KEY_VERSION, _kind(key))
    match key:
        case OffsetKey(group, topic, partition):
            return head + _str(group) + _str(topic) + struct.pack(">i", partition)
        case GroupKey(group):
            return head + _str(group)
        case TxnOffsetKey(group, pid, topic, partition):
            return (
                head
                + _str(group)
                + struct.pack(">q", pid)
                + _str(topic)
                + (struct.pack(">i", partition))
            )
        case TxnMarkerKey(group, pid):
            return head + _str(group) + struct.pack(">q", pid)


def _kind(key: Key) -> int:
    match key:
        case OffsetKey():
            return _OFFSET
        case GroupKey():
            return _GROUP
        case TxnOffsetKey():
            return _TXN_OFFSET
        case TxnMarkerKey():
            return _TXN_MARKER


def _offset_fields(v: OffsetValue) -> bytes:
    return (
        struct.pack(">qi", v.offset, v.leader_epoch)
        + _str(v.metadata)
        + struct.pack(">qq", v.commit_ms, v.expire_ms)
    )


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    head = struct.pack(">B", VALUE_VERSION)
    match value:
        case OffsetValue():
            return head + _offset_fields(value)
        case GroupValue(ptype, generation, pname, leader):
            return head + _str(ptype) + struct.pack(">i", generation) + _str(pname) + _str(leader)
        case TxnOffsetValue(epoch, offset):
            return head + struct.pack(">h", epoch) + _offset_fields(offset)
        case TxnMarkerValue(epoch, commit):
            return head + struct.pack(">hB", epoch, int(commit))


def encode(key: Key, value: Value | None) -> tuple[bytes, bytes | None]:
    return encode_key(key), encode_value(value)


def _read_offset(r: _Reader) -> OffsetValue:
    offset, epoch = r.unpack(">qi")
    metadata = r.string()
    commit_ms, expire_ms = r.unpack(">qq")
    return OffsetValue(offset, epoch, metadata, commit_ms, expire_ms)


def decode(key: bytes | None, value: bytes | None) -> tuple[Key, Value | None]:
    """Decode one journal record.

    Raises:
        RecordFormatError: unknown version or kind, a truncated record, or a string
            that is not UTF-8.
    """
    if not key:
        raise RecordFormatError("record without key")
    r = _Reader(key)
    version, kind = r.unpack(">BB")
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown key version {version}")
    parsed: Key
    if kind == _OFFSET:
        parsed = OffsetKey(r.req_str(), r.req_str(), r.int(">i"))
    elif kind == _GROUP:
        parsed = GroupKey(r.req_str())
    elif kind == _TXN_OFFSET:
        parsed = TxnOffsetKey(r.req_str(), r.int(">q"), r.req_str(), r.int(">i"))
    elif kind == _TXN_MARKER:
        parsed = TxnMarkerKey(r.req_str(), r.int(">q"))
    else:
        raise RecordFormatError(f"unknown record kind {kind}")
    if value is None:
        return parsed, None
    v = _Reader(value)
    if (vv := v.int(">B")) != VALUE_VERSION:
        raise RecordFormatError(f"unknown value version {vv}")
    out: Value
    if kind == _OFFSET:
        out = _read_offset(v)
    elif kind == _GROUP:
        ptype = v.req_str()
        out = GroupValue(ptype, v.int(">i"), v.string(), v.req_str())
    elif kind == _TXN_OFFSET:
        out = TxnOffsetValue(v.int(">h"), _read_offset(v))
    else:
        epoch, commit = v.unpack(">hB")
        out = TxnMarkerValue(epoch, bool(commit))
    return parsed, out
