"""The hand-written Produce and Fetch encoders write exactly kio's bytes."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from floe.protocol.codec import kio_version_range, response_class
from floe.protocol.fast import fast_encoder

HOT_RESPONSES = [
    response_class(key, version)
    for key in (0, 1)
    for version in range(kio_version_range(key)[0], kio_version_range(key)[1] + 1)
]
HEADER = b"\x00\x00\x00\x2a"


def kio_bytes(body: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


@st.composite
def hot_responses(draw: st.DrawFn) -> Any:
    return draw(st.from_type(draw(st.sampled_from(HOT_RESPONSES))))


@pytest.mark.parametrize("cls", HOT_RESPONSES, ids=lambda c: f"{c.__api_key__}v{c.__version__}")
def test_every_version_has_a_fast_encoder(cls: Any) -> None:
    assert fast_encoder(cls) is not None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hot_responses())
def test_fast_equals_kio(body: Any) -> None:
    encode = fast_encoder(type(body))
    assert encode is not None
    frame = b"".join(encode(body, HEADER))
    assert frame[4:] == HEADER + kio_bytes(body)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4


def test_fetch_records_are_passed_through_uncopied() -> None:
    cls = response_class(1, 16)
    module = __import__(cls.__module__, fromlist=["_"])
    records = [bytes([n]) * 1000 for n in range(3)]
    body = cls(
        throttle_time=cls.__dataclass_fields__["throttle_time"].type.parse(
            __import__("datetime").timedelta(0)
        ),
        error_code=ErrorCode.none,
        responses=(
            module.FetchableTopicResponse(
                topic_id=None,
                partitions=tuple(
                    module.PartitionData(
                        partition_index=n,
                        error_code=ErrorCode.none,
                        high_watermark=10,
                        aborted_transactions=None,
                        records=r,
                    )
                    for n, r in enumerate([*records, b"", None])
                ),
            ),
        ),
    )
    encode = fast_encoder(cls)
    assert encode is not None
    chunks = encode(body, HEADER)
    for r in records:
        assert any(chunk is r for chunk in chunks)
    assert b"".join(chunks)[4:] == HEADER + kio_bytes(body)


def test_other_responses_have_no_fast_encoder() -> None:
    assert fast_encoder(response_class(3, 12)) is None
    assert fast_encoder(response_class(18, 3)) is None
