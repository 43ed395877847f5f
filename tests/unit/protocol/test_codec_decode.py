"""decode_request and peek_header: round trips, unknown tagged fields, hostile input."""

from __future__ import annotations

import contextlib
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer

from floe.protocol.codec import (
    MalformedRequestError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    kio_version_range,
    peek_header,
    request_class,
)

ALL_REQUESTS = sorted(
    (key, version) for key, name in api_key_map.items() for version in schema_name_map[name]
)


def header_bytes(cls: Any, correlation_id: int = 7, client_id: str | None = "floe-test") -> bytes:
    """Request header v1 or v2 for ``cls``, as a client writes it."""
    head = struct.pack(">hhi", cls.__api_key__, cls.__version__, correlation_id)
    if client_id is None:
        head += b"\xff\xff"
    else:
        raw = client_id.encode()
        head += struct.pack(">h", len(raw)) + raw
    return head + (b"\x00" if cls.__header_schema__.__flexible__ else b"")


def body_bytes(request: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    return buffer.getvalue()


def kio_round_trips(request: Any) -> bool:
    """False for the few extreme values kio itself cannot read back (e.g. huge timedeltas)."""
    try:
        entity_reader(type(request))(body_bytes(request), 0)
    except ValueError:
        return False
    return True


@st.composite
def requests(draw: st.DrawFn) -> Any:
    key, version = draw(st.sampled_from(ALL_REQUESTS))
    return draw(st.from_type(request_class(key, version)))


def is_nan_free(value: Any) -> bool:
    # float64 fields: NaN would make equality meaningless
    return bool(value == value)  # noqa: PLR0124


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.none() | st.text(max_size=20))
def test_round_trip_every_api(request: Any, client_id: str | None) -> None:
    assume(kio_round_trips(request))
    frame = header_bytes(type(request), client_id=client_id) + body_bytes(request)
    header, body = decode_request(frame)
    cls = type(request)
    assert header == RequestHeader(cls.__api_key__, cls.__version__, 7, client_id)
    if is_nan_free(request):
        assert body == request
    assert type(body) is cls


def test_decode_accepts_memoryview_and_trailing_bytes() -> None:
    cls = request_class(3, 12)
    request = cls(
        topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False
    )
    frame = header_bytes(cls) + body_bytes(request) + b"trailing"
    assert decode_request(memoryview(frame))[1] == request


# --- unknown tagged fields ------------------------------------------------------------


def tag(number: int, value: bytes) -> bytes:
    assert number < 128 and len(value) < 128
    return bytes((number, len(value))) + value


def test_unknown_tag_in_header_v2_is_skipped() -> None:
    cls = request_class(3, 12)
    request = cls(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )
    head = header_bytes(cls)[:-1] + b"\x02" + tag(3, b"xyz") + tag(9, b"")
    header, body = decode_request(head + body_bytes(request))
    assert header.correlation_id == 7 and header.client_id == "floe-test"
    assert body == request


def test_unknown_tags_in_body_top_level_and_nested() -> None:
    cls = request_class(3, 12)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0].__args__[0]
    request = cls(
        topics=(topic_cls(topic_id=None, name="a"), topic_cls(topic_id=None, name="b")),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    raw = body_bytes(request)
    # Layout: array len, [uuid(16) name(2) tags(1)] x2, bool, bool, tags.
    topic_a, topic_b = raw[1:20], raw[20:39]
    patched = (
        raw[:1]
        + topic_a[:-1]
        + b"\x01"
        + tag(42, b"unknown")
        + topic_b
        + raw[39:41]
        + b"\x02"
        + tag(5, b"")
        + tag(200 % 128, b"\x00" * 10)
    )
    assert decode_request(header_bytes(cls) + patched)[1] == request


def test_unknown_tag_next_to_a_known_one_keeps_the_known_one() -> None:
    cls = request_class(1, 12)  # FetchRequest v12: cluster_id is tag 0
    request = cls(
        cluster_id="kraft",
        replica_id=-1,
        max_wait=cls.__dataclass_fields__["max_wait"].type.parse(
            __import__("datetime").timedelta(0)
        ),
        min_bytes=1,
        max_bytes=100,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
    )
    raw = body_bytes(request)
    assert raw.endswith(b"\x01" + tag(0, b"\x06kraft"))
    patched = raw[: -len(tag(0, b"\x06kraft")) - 1] + b"\x02" + tag(0, b"\x06kraft") + tag(7, b"??")
    assert decode_request(header_bytes(cls) + patched)[1] == request


@settings(max_examples=200, deadline=None)
@given(requests(), st.integers(1, 127), st.binary(max_size=20))
def test_unknown_top_level_tag_on_any_flexible_request(
    request: Any, number: int, value: bytes
) -> None:
    cls = type(request)
    tagged = [f for f in cls.__dataclass_fields__.values() if "tag" in f.metadata]
    if not cls.__flexible__ or any(getattr(request, f.name) != f.default for f in tagged):
        return  # not flexible, or known top-level tags present: covered above
    if number in {f.metadata["tag"] for f in tagged}:
        return
    assume(kio_round_trips(request))
    raw = body_bytes(request)
    assert raw.endswith(b"\x00")
    frame = header_bytes(cls) + raw[:-1] + b"\x01" + tag(number, value)
    body = decode_request(frame)[1]
    if is_nan_free(request):
        assert body == request


# --- hostile input --------------------------------------------------------------------


def assert_rejected_cleanly(frame: bytes) -> None:
    with contextlib.suppress(MalformedRequestError, UnsupportedVersionError):
        decode_request(frame)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes(frame: bytes) -> None:
    assert_rejected_cleanly(frame)


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(ALL_REQUESTS), st.binary(max_size=200))
def test_random_body_behind_a_valid_header(pair: tuple[int, int], body: bytes) -> None:
    assert_rejected_cleanly(header_bytes(request_class(*pair)) + body)


@settings(max_examples=200, deadline=None)
@given(requests(), st.data())
def test_truncated_and_corrupted_frames(request: Any, data: st.DataObject) -> None:
    frame = header_bytes(type(request)) + body_bytes(request)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises((MalformedRequestError, UnsupportedVersionError)):
        decode_request(frame[:cut])
    position = data.draw(st.integers(0, len(frame) - 1))
    flipped = bytearray(frame)
    flipped[position] ^= data.draw(st.integers(1, 255))
    assert_rejected_cleanly(bytes(flipped))


@pytest.mark.parametrize(
    "count", [b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"]
)
def test_huge_compact_array_length_is_rejected_before_kio(count: bytes) -> None:
    # kio's native reader would preallocate this many items and abort the process.
    cls = request_class(3, 12)
    with pytest.raises(MalformedRequestError) as info:
        decode_request(header_bytes(cls) + count + b"\x00" * 40)
    assert info.value.header is not None and info.value.header.api_key == 3


def test_huge_legacy_array_length_is_rejected_before_kio() -> None:
    cls = request_class(3, 4)
    with pytest.raises(MalformedRequestError):
        decode_request(header_bytes(cls) + b"\x7f\xff\xff\xff" + b"\x00" * 40)


def test_unsupported_version_and_key_carry_the_header() -> None:
    low, high = kio_version_range(0)
    for key, version in [(0, high + 1), (0, low - 1), (999, 0), (-1, 0)]:
        frame = struct.pack(">hhih", key, version, 99, -1)
        with pytest.raises(UnsupportedVersionError) as info:
            decode_request(frame)
        assert info.value.header == RequestHeader(key, version, 99, None)


def test_kio_version_range() -> None:
    assert kio_version_range(0) == (3, 13)
    assert kio_version_range(18)[0] == 0
    with pytest.raises(UnsupportedVersionError):
        kio_version_range(12345)


# --- peek_header ----------------------------------------------------------------------


def test_peek_header() -> None:
    frame = struct.pack(">hhih", 1, 12, -5, 3) + b"abc" + b"body..."
    assert peek_header(frame) == RequestHeader(1, 12, -5, "abc")
    assert peek_header(struct.pack(">hhih", 18, 99, 1, -1)) == RequestHeader(18, 99, 1, None)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00" * 7,
        struct.pack(">hhi", 0, 9, 1),  # client id length missing
        struct.pack(">hhih", 0, 9, 1, 5) + b"abc",  # client id truncated
        struct.pack(">hhih", 0, 9, 1, -2),
        struct.pack(">hhih", 0, 9, 1, 2) + b"\xff\xfe",
    ],
)
def test_peek_header_rejects(frame: bytes) -> None:
    with pytest.raises(MalformedRequestError) as info:
        peek_header(frame)
    assert info.value.header is None


@pytest.mark.parametrize(
    ("key", "version", "body", "field"),
    [
        (2, 1, struct.pack(">ii", -1, -1), "topics"),  # ListOffsets v1: topics null
        (21, 1, struct.pack(">i", -1), "topics"),  # DeleteRecords v1
        (15, 3, struct.pack(">i", -1), "groups"),  # DescribeGroups v3
        (8, 2, struct.pack(">hii", -1, -1, -1) + b"\x00\x00\x00\x00\x00\x00\x00\x00", "group_id"),
        (3, 9, b"\x01\x00\x00\x00\x00\x00", None),  # Metadata v9: one topic, null name: nullable
    ],
)
def test_null_where_the_schema_says_non_nullable_is_malformed(
    key: int, version: int, body: bytes, field: str | None
) -> None:
    """Kafka refuses a request whose non-nullable field was serialized as null; kio
    would hand the handler a None where it expects a tuple or a string."""
    frame = header_bytes(request_class(key, version)) + body
    if field is None:
        decode_request(frame)
        return
    with pytest.raises(MalformedRequestError, match=f"non-nullable field {field} "):
        decode_request(frame)
