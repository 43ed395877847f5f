"""The ``__consumer_offsets`` record encoding round-trips and rejects what it does not
know."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe.coordinator.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    TxnMarkerKey,
    TxnMarkerValue,
    TxnOffsetKey,
    TxnOffsetValue,
    decode,
    encode,
)

names = st.text(max_size=30)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
offsets = st.builds(OffsetValue, i64, i32, st.none() | names, i64, i64)
members = st.builds(
    MemberValue, names, st.none() | names, names, names, i32, i32, st.binary(), st.binary()
)
groups = st.builds(
    GroupValue,
    names,
    i32,
    st.none() | names,
    names,
    st.lists(members, max_size=3).map(tuple),
    st.booleans(),
)
records = st.one_of(
    st.tuples(st.builds(OffsetKey, names, names, i32), st.none() | offsets),
    st.tuples(
        st.builds(GroupKey, names),
        st.none() | groups,
    ),
    st.tuples(
        st.builds(TxnOffsetKey, names, i64, names, i32),
        st.none() | st.builds(TxnOffsetValue, st.integers(-(2**15), 2**15 - 1), offsets),
    ),
    st.tuples(
        st.builds(TxnMarkerKey, names, i64),
        st.none() | st.builds(TxnMarkerValue, st.integers(-(2**15), 2**15 - 1), st.booleans()),
    ),
)


@given(records)
def test_round_trip(record: tuple[object, object]) -> None:
    key, value = encode(*record)  # type: ignore[arg-type]
    assert decode(key, value) == record


def test_unknown_versions_and_kinds_are_rejected() -> None:
    key, value = encode(GroupKey("g"), GroupValue("consumer", 1, "range", "m"))
    with pytest.raises(RecordFormatError):
        decode(b"\x01" + key[1:], value)
    with pytest.raises(RecordFormatError):
        decode(key[:1] + b"\x09" + key[2:], value)
    with pytest.raises(RecordFormatError):
        decode(key, b"\x07" + (value or b"")[1:])
    with pytest.raises(RecordFormatError):
        decode(key[:-1], value)
    with pytest.raises(RecordFormatError):
        decode(None, value)


def test_version_0_group_values_still_decode() -> None:
    """Before members were persisted a group value was version 0: protocol type,
    generation, protocol name, leader. It reads as a group without members."""
    key, _ = encode(GroupKey("g"), None)
    v0 = b"\x00" + b"\x00\x08consumer" + b"\x00\x00\x00\x07" + b"\x00\x05range" + b"\x00\x01m"
    assert decode(key, v0) == (GroupKey("g"), GroupValue("consumer", 7, "range", "m"))
    assert GroupValue("consumer", 7, "range", "m").members == ()


def test_group_values_are_written_as_version_1() -> None:
    member = MemberValue("m", "i", "c", "/h", 300_000, 45_000, b"sub", b"assign")
    key, value = encode(GroupKey("g"), GroupValue("consumer", 3, "range", "m", (member,), True))
    assert value is not None and value[0] == 1
    assert decode(key, value)[1] == GroupValue("consumer", 3, "range", "m", (member,), True)
    with pytest.raises(RecordFormatError):
        decode(key, value[:-1])  # a truncated assignment
    with pytest.raises(RecordFormatError):
        decode(key, value[:-17] + b"\xff\xff\xff\xfe" + value[-13:])  # negative length
