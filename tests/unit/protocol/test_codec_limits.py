"""Pathological request shapes: counts the frame cannot hold are refused before any item
is walked, and frames with many items are flagged so the server decodes them off its
event loop (``item_budget``)."""

from __future__ import annotations

import struct

import pytest
from kio.schema.metadata.v4.request import MetadataRequest as MetadataV4
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12

from floe.protocol.codec import (
    DecodeBudgetExceededError,
    MalformedRequestError,
    decode_request,
    request_min_size,
)
from floe.protocol.fast import encode_uvarint

N = 200_000


def header(key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", key, version, 1, 4) + b"test" + (b"\x00" if flexible else b"")


def metadata_v12(count: int, items: int) -> bytes:
    """Metadata v12 announcing ``count`` topics and holding ``items`` of them (each a
    zero topic id, an empty name and no tags: 18 bytes)."""
    topic = b"\x00" * 16 + b"\x01" + b"\x00"
    body = encode_uvarint(count + 1) + topic * items + b"\x00\x00\x00"
    return header(3, 12, True) + body


def metadata_v4(count: int) -> bytes:
    return header(3, 4, False) + struct.pack(">i", count) + b"\x00\x00" * count + b"\x00"


def api_versions_v3_with_tags(count: int) -> bytes:
    """ApiVersions v3 whose top-level tagged section holds ``count`` unknown fields."""
    return header(18, 3, True) + b"\x02a\x02b" + encode_uvarint(count) + b"\x7f\x00" * count


def test_min_sizes_come_from_the_schema() -> None:
    # v12 topic: uuid (16) + compact nullable name (1) + tagged section (1)
    assert request_min_size(MetadataV12) == 1 + 1 + 1 + 1  # topics, 2 bools, tags
    assert request_min_size(MetadataV4) == 4 + 1  # legacy array length, bool


def test_an_array_its_items_cannot_fit_is_refused_before_walking_them() -> None:
    """Every v12 topic needs 18 bytes: 1M topics announced in 180 kB is impossible, and
    is refused from the count alone (not after walking 10k items to the end)."""
    frame = metadata_v12(1_000_000, 10_000)
    with pytest.raises(MalformedRequestError, match="needs at least"):
        decode_request(frame)


def test_more_tagged_fields_than_the_frame_can_hold_are_refused() -> None:
    frame = header(18, 3, True) + b"\x02a\x02b" + encode_uvarint(1000) + b"\x7f\x00" * 600
    with pytest.raises(MalformedRequestError, match="needs at least"):
        decode_request(frame)


@pytest.mark.parametrize(
    "frame",
    [metadata_v12(N, N), metadata_v4(N), api_versions_v3_with_tags(N)],
    ids=["metadata-v12", "metadata-v4", "tagged-fields"],
)
def test_many_items_exceed_the_budget_and_decode_without_it(frame: bytes) -> None:
    with pytest.raises(DecodeBudgetExceededError) as raised:
        decode_request(frame, item_budget=10_000)
    assert raised.value.header.api_key == struct.unpack_from(">h", frame)[0]
    _, body = decode_request(frame)  # the same frame, where time does not matter
    topics = getattr(body, "topics", None)
    assert topics is None or len(topics) == N


def describe_producers(partitions: int) -> bytes:
    """DescribeProducers v0: one topic with ``partitions`` int32 partition indexes (a
    fixed-size array the walker skips over without visiting its items)."""
    topic = b"\x02t" + encode_uvarint(partitions + 1) + b"\x00\x00\x00\x01" * partitions
    return header(61, 0, True) + b"\x02" + topic + b"\x00" + b"\x00"


def test_fixed_size_arrays_count_against_the_budget() -> None:
    _, body = decode_request(describe_producers(20_000), item_budget=20_001)
    assert len(body.topics[0].partition_indexes) == 20_000  # type: ignore[attr-defined]
    with pytest.raises(DecodeBudgetExceededError):
        decode_request(describe_producers(20_000), item_budget=19_999)


def test_a_small_request_is_untouched_by_the_budget() -> None:
    _, body = decode_request(metadata_v12(3, 3), item_budget=4)
    assert len(body.topics) == 3  # type: ignore[attr-defined]
