"""encode_response / encode_error_response: framing, response header versions."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersion
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32Timedelta

from floe.protocol.codec import (
    RequestHeader,
    encode_error_response,
    encode_response,
    response_class,
)

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def kio_bytes(body: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


def frame_of(chunks: list[bytes | memoryview]) -> bytes:
    frame = b"".join(chunks)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame[4:]


def metadata_response(version: int) -> Any:
    cls = response_class(3, version)
    return cls(brokers=(), topics=(), throttle_time=NO_THROTTLE)


def test_header_v0_for_non_flexible_versions() -> None:
    body = metadata_response(8)
    frame = frame_of(encode_response(RequestHeader(3, 8, 77, "c"), body))
    assert frame == struct.pack(">i", 77) + kio_bytes(body)


def test_header_v1_for_flexible_versions() -> None:
    body = metadata_response(12)
    frame = frame_of(encode_response(RequestHeader(3, 12, -3, None), body))
    assert frame == struct.pack(">i", -3) + b"\x00" + kio_bytes(body)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_always_uses_header_v0(version: int) -> None:
    cls = response_class(18, version)
    extra = {"throttle_time": NO_THROTTLE} if version else {}
    body = cls(error_code=ErrorCode.none, api_keys=(), **extra)
    frame = frame_of(encode_response(RequestHeader(18, version, 5, None), body))
    assert frame == struct.pack(">i", 5) + kio_bytes(body)


def test_fast_path_is_used_for_produce() -> None:
    cls = response_class(0, 9)
    body = cls(responses=(), throttle_time=NO_THROTTLE)
    frame = frame_of(encode_response(RequestHeader(0, 9, 1, None), body))
    assert frame == struct.pack(">i", 1) + b"\x00" + kio_bytes(body)


def test_mismatched_body_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="does not answer"):
        encode_response(RequestHeader(3, 9, 1, None), metadata_response(12))
    with pytest.raises(ValueError, match="does not answer"):
        encode_response(RequestHeader(0, 12, 1, None), metadata_response(12))


def test_error_response_for_api_versions_is_v0() -> None:
    header = RequestHeader(18, 99, 12, "x")
    chunks = encode_error_response(header, ErrorCode.unsupported_version)
    assert chunks is not None
    assert frame_of(chunks) == struct.pack(">ihi", 12, 35, 0)


def test_error_response_for_api_versions_with_supported_keys() -> None:
    body = ApiVersionsV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersion(api_key=0, min_version=3, max_version=11),),
    )
    chunks = encode_error_response(
        RequestHeader(18, 7, 1, None), ErrorCode.unsupported_version, body
    )
    assert chunks is not None
    assert frame_of(chunks) == struct.pack(">ihihhh", 1, 35, 1, 0, 3, 11)


def test_error_response_for_other_apis_is_none() -> None:
    assert (
        encode_error_response(RequestHeader(0, 99, 1, None), ErrorCode.unsupported_version) is None
    )
