"""The seed corpus: one valid request per advertised (api key, version) and target topic.

Requests are built from kio's schema classes by :func:`build`, which fills every field
from its default or from a name-based guess (a topic name where a topic goes, the fuzz
group where a group goes, 0 for partition indexes, -1 for producer ids, ...), so a seed
reaches the handler's logic rather than its first validation. Seeds are rebuilt at the
start of every run from what the broker advertises; real clients' captured requests
(:mod:`fuzz.capture`) are added to the same corpus.
"""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from fuzz import batches
from fuzz.layout import LayoutError, Span, layout, request_schema
from fuzz.wire import frame, request_header

INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "_schemas")
FUZZ_GROUP = "fuzz-group"
FUZZ_TXN = "fuzz-txn"
ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class Topic:
    """A topic the fuzzer aims at; ``kind`` is plain, compact, internal or missing."""

    name: str
    kind: str
    partitions: int = 1
    topic_id: uuid.UUID = ZERO_UUID


@dataclass
class Seed:
    """One valid framed request (correlation id 0) and its field map."""

    framed: bytes
    api_key: int
    version: int
    origin: str
    target: str
    spans: list[Span] = field(default_factory=list)


_INT_GUESSES = {
    "acks": -1,
    "replica_id": -1,
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "producer_id": -1,
    "producer_epoch": -1,
    "leader_epoch": -1,
    "current_leader_epoch": -1,
    "committed_leader_epoch": -1,
    "timestamp": -1,
    "resource_type": 2,
    "resource_pattern_type": 3,
    "num_partitions": 1,
    "replication_factor": 1,
    "count": 2,
    "min_bytes": 0,
    "max_bytes": 1 << 20,
    "partition_max_bytes": 1 << 20,
    "max_num_offsets": 1,
    "key_type": 0,
    "config_operation": 0,
    "session_epoch": -1,
    "broker_id": 1,
    "coordinator_type": 0,
    "offset": 0,
    "committed_offset": 0,
    "fetch_offset": 0,
    "log_start_offset": -1,
    "duration_filter": -1,
}


def _string_for(name: str, type_name: str, topic: Topic) -> str | None:
    if type_name == "TopicName" or "topic" in name:
        return topic.name
    if type_name == "GroupId" or name in ("group_id", "key") or name.startswith("group"):
        return FUZZ_GROUP
    if type_name == "TransactionalId" or "transactional" in name:
        return FUZZ_TXN
    if name == "resource_name":
        return topic.name
    if name == "protocol_type":
        return "consumer"
    if name in ("member_id", "rack_id"):
        return ""
    if name == "name":
        return "retention.ms" if "config" in type_name.lower() else "range"
    if name == "value":
        return "604800000"
    if name in ("states_filter", "types_filter"):
        return "Stable"
    return "fuzz"


def _primitive(f: Any, owner: type[Any], topic: Topic) -> Any:
    kafka_type = get_schema_field_type(f)
    name: str = f.name
    type_name = getattr(f.type, "__name__", str(f.type))
    if kafka_type in ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint8"):
        if name in ("partition_index", "partition", "index"):
            return 0
        if name in ("partitions", "partition_indexes"):
            return 0
        return _INT_GUESSES.get(name, 0)
    if kafka_type == "bool":
        return name.startswith("include") or name == "allow_auto_topic_creation"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        if name in ("max_wait",):
            return datetime.timedelta(0)
        if "session" in name:
            return datetime.timedelta(seconds=10)
        return datetime.timedelta(milliseconds=1000)
    if kafka_type == "datetime_i64":
        return datetime.datetime.now(datetime.UTC)
    if kafka_type == "float64":
        return 0.0
    if kafka_type == "uuid":
        return topic.topic_id if "topic" in name else uuid.UUID(int=0)
    if kafka_type == "records":
        return batches.honest(2).encode()
    if kafka_type == "bytes":
        return b""
    if kafka_type == "string":
        return _string_for(name, type_name, topic)
    raise ValueError(f"no guess for {owner.__name__}.{name} ({kafka_type})")


def build(cls: type[Any], topic: Topic, depth: int = 0) -> Any:
    """An instance of the kio entity ``cls`` with every field plausibly filled."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        kind = classify_field(f)
        tagged = get_field_tag(f) is not None
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if tagged and has_default:
            continue
        if isinstance(kind, PrimitiveField):
            if has_default and f.name not in ("max_wait", "acks", "timeout"):
                continue
            values[f.name] = _primitive(f, cls, topic)
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = (_primitive(f, cls, topic),)
        elif isinstance(kind, EntityTupleField):
            values[f.name] = (build(kind.type_, topic, depth + 1),) if depth < 4 else ()
        else:
            assert isinstance(kind, EntityField)
            values[f.name] = build(kind.type_, topic, depth + 1)
    return cls(**values)


def encode(body: Any, correlation_id: int = 0, client_id: bytes = b"fuzz") -> bytes:
    cls = type(body)
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    head = request_header(
        cls.__api_key__,
        cls.__version__,
        correlation_id,
        client_id,
        cls.__header_schema__.__flexible__,
    )
    return frame(head + buf.getvalue())


def with_layout(seed: Seed) -> Seed | None:
    """The seed with its span map, or None when it does not parse with its schema."""
    try:
        seed.spans = layout(seed.framed)
    except LayoutError:
        return None
    return seed


def kio_seeds(advertised: dict[int, tuple[int, int]], topics: Iterable[Topic]) -> list[Seed]:
    """One seed per advertised (api key, version) and target topic.

    APIs without a topic field yield one seed (the duplicates are dropped).
    """
    out: list[Seed] = []
    seen: set[bytes] = set()
    targets = list(topics)
    for api_key, (low, high) in sorted(advertised.items()):
        for version in range(low, high + 1):
            try:
                cls = request_schema(api_key, version)
            except Exception:
                continue  # advertised but unknown to kio: reported by the run
            for topic in targets:
                body = build(cls, topic)
                framed = encode(body)
                if framed in seen:
                    continue
                seen.add(framed)
                seed = with_layout(Seed(framed, api_key, version, "kio", topic.kind))
                if seed is not None:
                    out.append(seed)
    return out
