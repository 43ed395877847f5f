"""The records of ``__consumer_offsets``: a compact, versioned key/value encoding.

Every key starts with ``u8 key_version`` (0) and ``u8 kind``; every value with
``u8 value_version`` (0, or 1 for group metadata). A ``None`` value is a tombstone.
Strings are ``i16 length`` (-1 for null) followed by UTF-8 bytes; byte strings are
``i32 length`` followed by the bytes; integers are big-endian.

======  =================================  ==========================================
kind    key fields                         value fields
======  =================================  ==========================================
1       group, topic, partition (i32)      offset (i64), leader epoch (i32),
        (a committed offset)               metadata (nullable str), commit time ms
                                           (i64), expire time ms (i64, -1: default)
2       group (group metadata)             v1: protocol type (str), generation (i32),
                                           protocol name (nullable str), leader (str),
                                           assigned (u8 0/1), member count (i32), then
                                           per member: member id (str), group
                                           instance id (nullable str), client id
                                           (str), client host (str), rebalance
                                           timeout ms (i32), session timeout ms (i32),
                                           subscription (bytes), assignment (bytes).
                                           v0 (read only): the first four fields.
3       group, producer id (i64), topic,   producer epoch (i16), then the offset
        partition (a staged transactional  value fields of kind 1
        offset commit)
4       group, producer id (transaction    producer epoch (i16), commit (u8 0/1)
        marker)
======  =================================  ==========================================

A group metadata value is Kafka's ``GroupMetadataValue``: the generation and, for each
member, what the coordinator needs to take the group over after a restart or failover
(the subscription is the member's metadata for the selected protocol). ``assigned`` says
whether the leader's assignment of that generation is in it (written when the leader's
SyncGroup completes the generation: the group is Stable) or not (written when the join
phase completes, before the assignment: the members must rejoin); a value without
members is an Empty group. Version 0 (written before members were persisted) reads as a
group without members.

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
GROUP_VALUE_VERSION = 1
"""Group metadata values are written as version 1 (with members); 0 is still read."""
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
class MemberValue:
    """One member of a persisted generation (Kafka's ``MemberMetadata``)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    """The member's metadata for the group's selected protocol."""
    assignment: bytes
    """The leader's assignment for it (``b""`` unless the value is ``assigned``)."""


@dataclass(frozen=True, slots=True)
class GroupValue:
    """A group's generation and, from version 1, its members (see the module
    docstring): ``assigned`` when written by the leader's SyncGroup."""

    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str
    members: tuple[MemberValue, ...] = ()
    assigned: bool = False


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


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


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

    def bytes_(self) -> bytes:
        n = self.int(">i")
        if n < 0 or self._pos + n > len(self._data):
            raise RecordFormatError("bad or truncated byte string")
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out


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
        case GroupValue():
            return _group_value(value)
        case TxnOffsetValue(epoch, offset):
            return head + struct.pack(">h", epoch) + _offset_fields(offset)
        case TxnMarkerValue(epoch, commit):
            return head + struct.pack(">hB", epoch, int(commit))


def _group_value(v: GroupValue) -> bytes:
    parts = [
        struct.pack(">B", GROUP_VALUE_VERSION),
        _str(v.protocol_type),
        struct.pack(">i", v.generation),
        _str(v.protocol_name),
        _str(v.leader),
        struct.pack(">Bi", int(v.assigned), len(v.members)),
    ]
    for m in v.members:
        parts += [
            _str(m.member_id),
            _str(m.instance_id),
            _str(m.client_id),
            _str(m.client_host),
            struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def _read_group(r: _Reader, version: int) -> GroupValue:
    ptype = r.req_str()
    generation = r.int(">i")
    pname = r.string()
    leader = r.req_str()
    if version == 0:
        return GroupValue(ptype, generation, pname, leader)
    assigned, count = r.unpack(">Bi")
    if count < 0:
        raise RecordFormatError(f"negative member count {count}")
    members = []
    for _ in range(count):  # a count beyond the data ends in a truncation error
        member_id, instance_id = r.req_str(), r.string()
        client_id, client_host = r.req_str(), r.req_str()
        rebalance_ms, session_ms = r.unpack(">ii")
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_ms,
                session_ms,
                r.bytes_(),
                r.bytes_(),
            )
        )
    return GroupValue(ptype, generation, pname, leader, tuple(members), bool(assigned))


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
    vv = v.int(">B")
    if vv != VALUE_VERSION and not (kind == _GROUP and vv == GROUP_VALUE_VERSION):
        raise RecordFormatError(f"unknown value version {vv}")
    out: Value
    if kind == _OFFSET:
        out = _read_offset(v)
    elif kind == _GROUP:
        out = _read_group(v, vv)
    elif kind == _TXN_OFFSET:
        out = TxnOffsetValue(v.int(">h"), _read_offset(v))
    else:
        epoch, commit = v.unpack(">hB")
        out = TxnMarkerValue(epoch, bool(commit))
    return parsed, out
