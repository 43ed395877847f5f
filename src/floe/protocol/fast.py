"""Hand-written encoders for the hot responses: Produce and Fetch.

kio's pure-Python writer costs tens of microseconds for a small response (one closure
call and one small write per field); these ``struct`` encoders write the same bytes in a
few. They take the same kio response dataclasses the handlers build, and their output is
byte-for-byte what ``kio.serial.entity_writer`` writes (the unit tests check every
version with random responses).

The per-version differences (topic names or ids, flexible encoding, fields added over
time) are read from the kio class once, when an encoder is built. An encoder is only
built for a class whose fields, their order and their tags are exactly the ones written
here; for anything else :func:`fast_encoder` returns None and the caller uses kio.

Invariant: record bytes in a Fetch response are never copied; each non-empty ``records``
value is its own chunk of the output.
"""

from __future__ import annotations

import functools
import struct
import sys
import uuid
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from kio.serial._introspect import get_field_tag

__all__ = ["FastEncoder", "fast_encoder"]

FastEncoder: TypeAlias = Callable[[Any, bytes], list[bytes | memoryview]]
"""``encode(body, response_header) -> chunks``: a whole frame, size prefix included."""

PRODUCE_KEY = 0
FETCH_KEY = 1

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HI = struct.Struct(">hi")
_IHQ = struct.Struct(">ihq")
_II = struct.Struct(">ii")
_IQ = struct.Struct(">iq")
_QI = struct.Struct(">qi")
_QQ = struct.Struct(">qq")
_UUID_ZERO = bytes(16)
_LEGACY_NULL_STRING = b"\xff\xff"
_LEGACY_NULL_BYTES = b"\xff\xff\xff\xff"
_COMPACT_NULL = b"\x00"
_NO_TAGS = b"\x00"
_SMALL_UVARINTS = tuple(bytes((n,)) for n in range(128))

# Kafka's field order per entity (names as kio spells them), then the expected tags.
_PRODUCE_LAYOUT: dict[str, tuple[tuple[str, ...], dict[int, str]]] = {
    "ProduceResponse": (("responses", "throttle_time"), {0: "node_endpoints"}),
    "TopicProduceResponse": (("name", "topic_id", "partition_responses"), {}),
    "PartitionProduceResponse": (
        (
            "index",
            "error_code",
            "base_offset",
            "log_append_time",
            "log_start_offset",
            "record_errors",
            "error_message",
        ),
        {0: "current_leader"},
    ),
    "BatchIndexAndErrorMessage": (("batch_index", "batch_index_error_message"), {}),
    "LeaderIdAndEpoch": (("leader_id", "leader_epoch"), {}),
    "NodeEndpoint": (("node_id", "host", "port", "rack"), {}),
}
_FETCH_LAYOUT: dict[str, tuple[tuple[str, ...], dict[int, str]]] = {
    "FetchResponse": (
        ("throttle_time", "error_code", "session_id", "responses"),
        {0: "node_endpoints"},
    ),
    "FetchableTopicResponse": (("topic", "topic_id", "partitions"), {}),
    "PartitionData": (
        (
            "partition_index",
            "error_code",
            "high_watermark",
            "last_stable_offset",
            "log_start_offset",
            "aborted_transactions",
            "preferred_read_replica",
            "records",
        ),
        {0: "diverging_epoch", 1: "current_leader", 2: "snapshot_id"},
    ),
    "AbortedTransaction": (("producer_id", "first_offset"), {}),
    "EpochEndOffset": (("epoch", "end_offset"), {}),
    "LeaderIdAndEpoch": (("leader_id", "leader_epoch"), {}),
    "SnapshotId": (("end_offset", "epoch"), {}),
    "NodeEndpoint": (("node_id", "host", "port", "rack"), {}),
}


def encode_uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (small values come from a table)."""
    if value < 128:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return _COMPACT_NULL
    data = value.encode()
    return encode_uvarint(len(data) + 1) + data


def _legacy_string(value: str | None) -> bytes:
    if value is None:
        return _LEGACY_NULL_STRING
    data = value.encode()
    return len(data).to_bytes(2, "big", signed=True) + data


def _compact_length(count: int) -> bytes:
    return encode_uvarint(count + 1)


def _legacy_length(count: int) -> bytes:
    return _I32.pack(count)


def _millis(value: timedelta) -> int:
    return round(value.total_seconds() * 1000)  # kio's rounding, for identical bytes


def _timestamp(value: datetime | None) -> int:
    return -1 if value is None else round(value.timestamp() * 1000)


def _uuid(value: uuid.UUID | None) -> bytes:
    return _UUID_ZERO if value is None else value.bytes


def _node_endpoints(endpoints: Any) -> bytes:
    """The tagged ``node_endpoints`` field (tag 0) of a flexible response."""
    value = bytearray(_compact_length(len(endpoints)))
    for node in endpoints:
        value += _I32.pack(node.node_id)
        value += _compact_string(node.host)
        value += _I32.pack(node.port)
        value += _compact_string(node.rack)
        value += _NO_TAGS
    return b"\x01\x00" + encode_uvarint(len(value)) + value


def _entity_types(response_type: type[Any]) -> dict[str, type[Any]]:
    """Every dataclass reachable from ``response_type``, by class name."""
    found = {response_type.__name__: response_type}
    for name, value in vars(sys.modules[response_type.__module__]).items():
        if (
            isinstance(value, type)
            and hasattr(value, "__dataclass_fields__")
            and value.__module__ == response_type.__module__
        ):
            found[name] = value
    return found


def _layout_matches(
    response_type: type[Any], layout: dict[str, tuple[tuple[str, ...], dict[int, str]]]
) -> bool:
    """True if every entity of the response's module has only fields written here."""
    for name, entity in _entity_types(response_type).items():
        if name not in layout or entity.__flexible__ != response_type.__flexible__:
            return False
        order, tags = layout[name]
        plain = [f.name for f in fields(entity) if get_field_tag(f) is None]
        tagged = {int(t): f.name for f in fields(entity) if (t := get_field_tag(f)) is not None}
        if plain != [n for n in order if n in plain] or tagged != {
            t: n for t, n in tags.items() if n in tagged.values()
        }:
            return False
    return True


def _field_names(entity_type: type[Any]) -> set[str]:
    return {f.name for f in fields(entity_type)}


def _produce_encoder(response_type: type[Any]) -> FastEncoder:
    types = _entity_types(response_type)
    flexible: bool = response_type.__flexible__
    by_topic_id = "topic_id" in _field_names(types["TopicProduceResponse"])
    partition_fields = _field_names(types["PartitionProduceResponse"])
    has_append_time = "log_append_time" in partition_fields
    has_start_offset = "log_start_offset" in partition_fields
    has_record_errors = "record_errors" in partition_fields
    has_leader = "current_leader" in partition_fields
    has_endpoints = "node_endpoints" in _field_names(response_type)
    string = _compact_string if flexible else _legacy_string
    length = _compact_length if flexible else _legacy_length

    def encode(body: Any, header: bytes) -> list[bytes | memoryview]:
        out = bytearray(4)
        out += header
        out += length(len(body.responses))
        for topic in body.responses:
            out += _uuid(topic.topic_id) if by_topic_id else string(topic.name)
            out += length(len(topic.partition_responses))
            for part in topic.partition_responses:
                out += _IHQ.pack(part.index, part.error_code, part.base_offset)
                if has_append_time:
                    out += _I64.pack(_timestamp(part.log_append_time))
                if has_start_offset:
                    out += _I64.pack(part.log_start_offset)
                if has_record_errors:
                    out += length(len(part.record_errors))
                    for error in part.record_errors:
                        out += _I32.pack(error.batch_index)
                        out += string(error.batch_index_error_message)
                        if flexible:
                            out += _NO_TAGS
                    out += string(part.error_message)
                if flexible:
                    leader = part.current_leader if has_leader else None
                    if leader is None or (leader.leader_id == -1 and leader.leader_epoch == -1):
                        out += _NO_TAGS
                    else:  # one tag (0) of 9 bytes: two int32 and empty tags
                        out += b"\x01\x00\x09"
                        out += _II.pack(leader.leader_id, leader.leader_epoch)
                        out += _NO_TAGS
            if flexible:
                out += _NO_TAGS
        out += _I32.pack(_millis(body.throttle_time))
        if flexible:
            out += (
                _node_endpoints(body.node_endpoints)
                if has_endpoints and body.node_endpoints
                else _NO_TAGS
            )
        _I32.pack_into(out, 0, len(out) - 4)
        return [memoryview(out)]

    return encode


def _fetch_partition_tags(part: Any) -> bytes:
    """The tagged section of a flexible Fetch partition; fields at defaults are left out."""
    diverging = part.diverging_epoch
    leader = part.current_leader
    snapshot = part.snapshot_id
    if (
        diverging.epoch == diverging.end_offset == leader.leader_id == leader.leader_epoch == -1
        and snapshot.end_offset == snapshot.epoch == -1
    ):
        return _NO_TAGS
    tags = []
    if not (diverging.epoch == -1 and diverging.end_offset == -1):
        tags.append(b"\x00\x0d" + _IQ.pack(diverging.epoch, diverging.end_offset) + _NO_TAGS)
    if not (leader.leader_id == -1 and leader.leader_epoch == -1):
        tags.append(b"\x01\x09" + _II.pack(leader.leader_id, leader.leader_epoch) + _NO_TAGS)
    if not (snapshot.end_offset == -1 and snapshot.epoch == -1):
        tags.append(b"\x02\x0d" + _QI.pack(snapshot.end_offset, snapshot.epoch) + _NO_TAGS)
    return _SMALL_UVARINTS[len(tags)] + b"".join(tags)


def _fetch_encoder(response_type: type[Any]) -> FastEncoder:
    types = _entity_types(response_type)
    flexible: bool = response_type.__flexible__
    by_topic_id = "topic_id" in _field_names(types["FetchableTopicResponse"])
    top_fields = _field_names(response_type)
    has_session = "session_id" in top_fields
    has_endpoints = "node_endpoints" in top_fields
    partition_fields = _field_names(types["PartitionData"])
    has_stable_offset = "last_stable_offset" in partition_fields
    has_start_offset = "log_start_offset" in partition_fields
    has_replica = "preferred_read_replica" in partition_fields
    string = _compact_string if flexible else _legacy_string
    length = _compact_length if flexible else _legacy_length
    null_array = _COMPACT_NULL if flexible else _LEGACY_NULL_BYTES
    null_bytes = _COMPACT_NULL if flexible else _LEGACY_NULL_BYTES

    def encode(body: Any, header: bytes) -> list[bytes | memoryview]:
        out = bytearray(4)
        out += header
        first = out
        chunks: list[bytes | memoryview] = []
        out += _I32.pack(_millis(body.throttle_time))
        if has_session:
            out += _HI.pack(body.error_code, body.session_id)
        out += length(len(body.responses))
        for topic in body.responses:
            out += _uuid(topic.topic_id) if by_topic_id else string(topic.topic)
            out += length(len(topic.partitions))
            for part in topic.partitions:
                out += _IHQ.pack(part.partition_index, part.error_code, part.high_watermark)
                if has_stable_offset:
                    out += _I64.pack(part.last_stable_offset)
                if has_start_offset:
                    out += _I64.pack(part.log_start_offset)
                aborted = part.aborted_transactions
                if aborted is None:
                    out += null_array
                else:
                    out += length(len(aborted))
                    for transaction in aborted:
                        out += _QQ.pack(transaction.producer_id, transaction.first_offset)
                        if flexible:
                            out += _NO_TAGS
                if has_replica:
                    out += _I32.pack(part.preferred_read_replica)
                records = part.records
                if records is None:
                    out += null_bytes
                else:
                    size = len(records)
                    out += encode_uvarint(size + 1) if flexible else _I32.pack(size)
                    if size:
                        chunks.append(memoryview(out))
                        chunks.append(records)
                        out = bytearray()
                if flexible:
                    out += _fetch_partition_tags(part)
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += (
                _node_endpoints(body.node_endpoints)
                if has_endpoints and body.node_endpoints
                else _NO_TAGS
            )
        total = sum(len(chunk) for chunk in chunks) + len(out) - 4
        _I32.pack_into(first, 0, total)
        chunks.append(memoryview(out))
        return chunks

    return encode


@functools.cache
def fast_encoder(response_type: type[Any]) -> FastEncoder | None:
    """Return the hand-written encoder for a kio response class, or None if there is none.

    None means the caller should use kio's writer: not Produce or Fetch, or a kio
    schema with fields these encoders do not know.
    """
    api_key = getattr(response_type, "__api_key__", None)
    name = response_type.__name__
    if api_key == PRODUCE_KEY and name == "ProduceResponse":
        layout, build = _PRODUCE_LAYOUT, _produce_encoder
    elif api_key == FETCH_KEY and name == "FetchResponse":
        layout, build = _FETCH_LAYOUT, _fetch_encoder
    else:
        return None
    return build(response_type) if _layout_matches(response_type, layout) else None
