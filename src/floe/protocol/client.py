"""The client side of the Kafka requests brokers and range readers send: Fetch and
ListOffsets (a range reader), WriteTxnMarkers (a transaction coordinator to the leader of
a partition on another broker).

Sans-I/O: requests are encoded into whole frames (size prefix, request header, body) and
response frames (the bytes after the size prefix) decoded, both with kio; a transport
(:mod:`floe.tabletopic.spark.fetch`) moves the bytes. Versions are fixed, not
negotiated: Fetch v12 (the newest addressing topics by name, flexible) and ListOffsets
v7, which every Kafka since 2.8, and Floe, serve.

A range reader's Fetches ask for ``read_committed``: the broker answers below the last
stable offset, with the aborted transactions overlapping what it returns (the reader
skips their records up to each one's ABORT marker), so a range can be read from
whichever broker leads its partition.

Invariant: nothing here does I/O or keeps state.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from floe.errors import ErrorCode, FloeError
from floe.protocol.codec import response_class
from floe.protocol.framing import SIZE

__all__ = [
    "EARLIEST",
    "LATEST",
    "FetchedPartition",
    "ListedOffset",
    "ResponseError",
    "decode_response",
    "encode_request",
    "fetch_request",
    "fetched",
    "list_offsets_request",
    "listed_offset",
    "listed_offsets",
    "marker_results",
    "write_txn_markers_request",
]

EARLIEST = -2
"""ListOffsets timestamp asking for the log start offset."""
LATEST = -1
"""ListOffsets timestamp asking for the high watermark (read_uncommitted) or the last
stable offset (read_committed)."""
_CONSUMER = BrokerId(-1)
"""Replica id of a consumer (not a follower broker)."""


class ResponseError(FloeError):
    """A response frame cannot be decoded, or does not answer the request."""


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition's part of a Fetch response.

    Attributes:
        error: the partition's error code (``none`` when ``records`` are valid).
        high_watermark / log_start_offset: the partition's offsets (-1 when unknown).
        records: whole record batches from the one holding the fetch offset, possibly
            ending with a partial batch (a broker may cut one).
        aborted: ``(producer id, first offset)`` of each aborted transaction that
            overlaps ``records`` (a read_committed Fetch).
    """

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """One partition's part of a ListOffsets response."""

    error: ErrorCode
    offset: int


@functools.cache
def _writer(entity_type: type[Any]) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(entity_type)


@functools.cache
def _reader(entity_type: type[Any]) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(entity_type)


def encode_request(body: Any, correlation_id: int, client_id: str) -> bytes:
    """The whole frame of request ``body`` (a kio request entity)."""
    cls: Any = type(body)
    header_type = cls.__header_schema__
    header = header_type(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    _writer(header_type)(buffer, header)
    _writer(cls)(buffer, body)
    frame = buffer.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    return bytes(frame)


def decode_response(request: Any, frame: bytes) -> tuple[int, Any]:
    """The correlation id and kio body of ``frame`` (the bytes after the size prefix),
    a response to ``request``.

    Raises:
        ResponseError: the frame is not a response to such a request (truncated,
            garbage, an unknown tagged field).
    """
    cls: Any = response_class(type(request).__api_key__, type(request).__version__)
    try:
        header, pos = _reader(cls.__header_schema__)(frame, 0)
        body, _ = _reader(cls)(frame, pos)
    # A parse boundary: whatever kio raises on bad input (DecodeError, KeyError for an
    # unknown tagged field, ValueError for an unknown error code) means the same here.
    except Exception as exc:
        raise ResponseError(
            f"undecodable {cls.__name__} v{cls.__version__}: {type(exc).__name__}: {exc}"
        ) from None
    return int(header.correlation_id), body


def sasl_handshake_request(mechanism: str) -> Any:
    """A SaslHandshake v1 for ``mechanism`` (tokens then go in SaslAuthenticate)."""
    return SaslHandshakeRequest(mechanism=mechanism)


def sasl_authenticate_request(token: bytes) -> Any:
    """A SaslAuthenticate v2 carrying one SASL ``token``."""
    return SaslAuthenticateRequest(auth_bytes=token)


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    *,
    committed: bool = False,
    max_wait_ms: int = 0,
) -> Any:
    """A Fetch of ``partition`` from ``offset``, at most ``max_bytes`` of records (but
    always the first batch whole), read_uncommitted (``committed``: read_committed),
    answered at once, or (``max_wait_ms``) once there is a record or that time passed."""
    part = FetchPartition(
        partition=i32(partition),
        current_leader_epoch=i32(-1),
        fetch_offset=i64(offset),
        last_fetched_epoch=i32(-1),
        log_start_offset=i64(-1),
        partition_max_bytes=i32(max_bytes),
    )
    return FetchRequest(
        replica_id=_CONSUMER,
        max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        max_bytes=i32(max_bytes),
        isolation_level=i8(1 if committed else 0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(FetchTopic(topic=TopicName(topic), partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetched(response: Any, topic: str, partition: int) -> FetchedPartition:
    """The entry of ``partition`` in a Fetch response (to :func:`fetch_request`).

    Raises:
        ResponseError: the response has a top-level error or lacks the partition.
    """
    if response.error_code is not ErrorCode.none:
        raise ResponseError(f"fetch failed: {response.error_code.name}")
    for t in response.responses:
        if t.topic != topic:
            continue
        for p in t.partitions:
            if p.partition_index == partition:
                return FetchedPartition(
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    bytes(p.records or b""),
                    tuple(
                        (int(a.producer_id), int(a.first_offset))
                        for a in p.aborted_transactions or ()
                    ),
                )
    raise ResponseError(f"the fetch response has no entry for {topic}-{partition}")


def list_offsets_request(
    topic: str, partition: int | Sequence[int], timestamp: int, *, committed: bool = False
) -> Any:
    """A ListOffsets of ``partition`` (or of each of several) at ``timestamp``
    (:data:`EARLIEST`: the log start; :data:`LATEST`: the end), read_uncommitted
    (``committed``: read_committed, whose end is the last stable offset)."""
    indexes = [partition] if isinstance(partition, int) else list(partition)
    parts = tuple(
        ListOffsetsPartition(
            partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(timestamp)
        )
        for p in indexes
    )
    return ListOffsetsRequest(
        replica_id=_CONSUMER,
        isolation_level=i8(1 if committed else 0),
        topics=(ListOffsetsTopic(name=TopicName(topic), partitions=parts),),
    )


def listed_offset(response: Any, topic: str, partition: int) -> ListedOffset:
    """The entry of ``partition`` in a ListOffsets response.

    Raises:
        ResponseError: the response lacks the partition.
    """
    for t in response.topics:
        if t.name != topic:
            continue
        for p in t.partitions:
            if p.partition_index == partition:
                return ListedOffset(p.error_code, p.offset)
    raise ResponseError(f"the list offsets response has no entry for {topic}-{partition}")


def listed_offsets(response: Any, topic: str) -> dict[int, ListedOffset]:
    """Every entry of ``topic`` in a ListOffsets response, by partition."""
    return {
        int(p.partition_index): ListedOffset(p.error_code, p.offset)
        for t in response.topics
        if t.name == topic
        for p in t.partitions
    }


def write_txn_markers_request(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    partitions: list[tuple[str, int]],
    coordinator_epoch: int = 0,
) -> Any:
    """A WriteTxnMarkers (v1) of one transaction's result for ``partitions``, from the
    coordinator at ``coordinator_epoch``."""
    topics: dict[str, list[i32]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(i32(partition))
    marker = WritableTxnMarker(
        producer_id=ProducerId(producer_id),
        producer_epoch=i16(producer_epoch),
        transaction_result=commit,
        topics=tuple(
            WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(ps))
            for t, ps in topics.items()
        ),
        coordinator_epoch=i32(coordinator_epoch),
    )
    return WriteTxnMarkersRequest(markers=(marker,))


def marker_results(response: Any) -> dict[tuple[str, int], ErrorCode]:
    """Each partition's error code in a WriteTxnMarkers response (one marker)."""
    return {
        (str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }
