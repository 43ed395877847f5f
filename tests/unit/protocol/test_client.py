"""The client side of Fetch and ListOffsets speaks the broker's own codec: requests it
encodes decode on the broker's side as sent, responses the broker encodes (Fetch with the
hand-written encoder) decode back to what the handler built."""

from __future__ import annotations

from datetime import timedelta

import pytest

from floe.broker.build import build
from floe.errors import ErrorCode
from floe.protocol.client import (
    EARLIEST,
    FetchedPartition,
    ListedOffset,
    ResponseError,
    decode_response,
    encode_request,
    fetch_request,
    fetched,
    list_offsets_request,
    listed_offset,
)
from floe.protocol.codec import RequestHeader, decode_request, encode_response, response_class
from floe.protocol.framing import SIZE
from floe.protocol.records import Record, encode_batch


def broker_side(frame: bytes) -> tuple[RequestHeader, object]:
    (size,) = SIZE.unpack_from(frame)
    assert size == len(frame) - SIZE.size
    return decode_request(frame[SIZE.size :])


def response_frame(header: RequestHeader, body: object) -> bytes:
    return b"".join(bytes(c) for c in encode_response(header, body))[SIZE.size :]


def test_a_fetch_round_trips_through_the_broker_codec() -> None:
    request = fetch_request("orders", 3, 1234, 4096)
    header, body = broker_side(encode_request(request, 7, "floe-test"))
    assert (header.api_key, header.api_version, header.correlation_id) == (1, 12, 7)
    assert header.client_id == "floe-test" and body == request
    part = body.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert (part.partition, part.fetch_offset, part.partition_max_bytes) == (3, 1234, 4096)
    assert body.isolation_level == 0 and body.max_wait == timedelta(0)  # type: ignore[attr-defined]

    records = encode_batch([Record(1234, 1, b"k", b"v")], base_offset=1234)
    entry = {
        "partition_index": 3,
        "error_code": ErrorCode.none,
        "high_watermark": 1300,
        "last_stable_offset": 1300,
        "log_start_offset": 10,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records,
    }
    response = build(
        response_class(1, 12),
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [{"topic": "orders", "partitions": [entry]}],
        },
    )
    correlation, decoded = decode_response(request, response_frame(header, response))
    assert correlation == 7
    assert fetched(decoded, "orders", 3) == FetchedPartition(ErrorCode.none, 1300, 10, records)
    with pytest.raises(ResponseError, match="no entry for orders-4"):
        fetched(decoded, "orders", 4)


def test_a_list_offsets_round_trips_through_the_broker_codec() -> None:
    request = list_offsets_request("orders", 0, EARLIEST)
    header, body = broker_side(encode_request(request, 8, "floe-test"))
    assert (header.api_key, header.api_version) == (2, 7) and body == request
    response = build(
        response_class(2, 7),
        {
            "throttle_time": timedelta(0),
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": ErrorCode.none,
                            "timestamp": -1,
                            "offset": 40,
                            "leader_epoch": 0,
                        }
                    ],
                }
            ],
        },
    )
    correlation, decoded = decode_response(request, response_frame(header, response))
    assert correlation == 8
    assert listed_offset(decoded, "orders", 0) == ListedOffset(ErrorCode.none, 40)


def test_a_garbage_response_is_a_response_error() -> None:
    with pytest.raises(ResponseError, match="undecodable FetchResponse v12"):
        decode_response(fetch_request("t", 0, 0, 1), b"\x00\x00\x00\x01\x00\xff\xff")
