"""Fetch (API key 1): reads whole batches, long-polls on max.wait / min.bytes.

A response carries at most ``min(max_bytes, fetch.max.bytes)`` record bytes, each
partition at most its ``partition_max_bytes``, except that the first batch of the
first non-empty partition always comes whole so a consumer progresses (KIP-74). The
storage reads no more than the limit it is given (plus that one batch), so memory per
fetch is bounded by the limit, never by segment size.

Incremental fetch sessions (KIP-227) are not kept: every response carries session id
0, which tells clients to send full fetch requests, as Kafka does when it has no
session slot free.

``isolation_level=1`` (read_committed) returns only batches below the last stable
offset, with the aborted transactions overlapping the returned range; consumers drop
those transactions' records and skip control batches themselves.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.config import broker as keys
from floe.errors import ErrorCode, KafkaError
from floe.protocol import batch
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.broker.fetch")

_ZERO_UUID = uuid.UUID(int=0)


def _committed(data: bytes, lso: int) -> bytes:
    """The whole batches of ``data`` that start below the last stable offset (the LSO
    is always a batch boundary: the first offset of an open transaction)."""
    cut = 0
    for h in batch.scan(data, verify_crc=False, partial_ok=True):
        if h.base_offset >= lso:
            break
        cut = h.position + h.size
    return data if cut == len(data) else data[:cut]


def _partition(
    broker: Broker,
    name: TopicName | None,
    part: Any,
    budget: int,
    first: bool,
    *,
    committed: bool,
) -> tuple[dict[str, Any], int]:
    """One partition's response entry and the bytes of records it carries."""
    entry: dict[str, Any] = {
        "partition_index": part.partition,
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }
    if name is None:
        entry["error_code"] = ErrorCode.unknown_topic_id
        return entry, 0
    try:
        plog = broker.store.partition(name, PartitionId(part.partition))
        hw = plog.high_watermark
        lso = plog.last_stable_offset
        entry["high_watermark"] = hw
        entry["last_stable_offset"] = lso
        entry["log_start_offset"] = plog.log_start_offset
        if committed:
            entry["aborted_transactions"] = []
        end = lso if committed else hw
        limit = max(min(part.partition_max_bytes, budget), 0)
        if part.fetch_offset == end or (limit <= 0 and not first):
            return entry, 0
        if part.fetch_offset > end and part.fetch_offset <= hw:
            return entry, 0  # beyond the LSO but inside the log: wait for the outcome
        data = plog.read(Offset(part.fetch_offset), limit, min_one=first)
        if committed and data:
            data = _committed(data, lso)
            if data:
                upper = batch.scan(data, verify_crc=False, partial_ok=True)[-1].next_offset
                entry["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in plog.aborted_transactions(Offset(part.fetch_offset), Offset(upper))
                ]
    except KafkaError as exc:
        entry["error_code"] = exc.code
        return entry, 0
    except Exception:
        log.exception("fetch.failed topic=%s partition=%d", name, part.partition)
        entry["error_code"] = ErrorCode.unknown_server_error
        return entry, 0
    entry["records"] = data
    return entry, len(data)


def max_response_bytes(broker: Broker, req: Any) -> int:
    """The record bytes this response may carry: the client's ``max_bytes`` (0 means 0,
    negative too), capped by the broker's ``fetch.max.bytes``, as Kafka does."""
    asked: int = req.max_bytes
    return min(max(asked, 0), broker.config[keys.FETCH_MAX_BYTES])


def _collect(broker: Broker, req: Any) -> tuple[list[dict[str, Any]], int, bool]:
    """Build the per-topic entries; returns them, total record bytes, and whether any
    partition has an error (which answers a long poll at once).

    The budget shrinks with every partition read; only the first batch of the first
    non-empty partition may go past it (KIP-74), so a response holds at most
    ``max_response_bytes`` or that one batch.
    """
    store = broker.store
    budget = max_response_bytes(broker, req)
    total = 0
    errors = False
    first = True
    committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    for topic in req.topics:
        topic_id = getattr(topic, "topic_id", None)
        name: TopicName | None
        if not hasattr(topic, "topic"):  # v13+: by id only (the zero id reads as None)
            meta = store.topic_by_id(topic_id) if topic_id not in (None, _ZERO_UUID) else None
            name = meta.name if meta is not None else None
        else:
            name = TopicName(topic.topic)
        parts = []
        for part in topic.partitions:
            entry, size = _partition(broker, name, part, budget - total, first, committed=committed)
            if size:
                first = False
                total += size
            errors = errors or entry["error_code"] is not ErrorCode.none
            parts.append(entry)
        topics.append({"topic": name or "", "topic_id": topic_id, "partitions": parts})
    return topics, total, errors


def _response(broker: Broker, ctx: RequestContext, topics: list[dict[str, Any]]) -> Any:
    """The response, counted in the per-topic bytes and messages out."""
    for topic in topics:
        for entry in topic["partitions"]:
            if data := entry["records"]:
                traffic = broker.stats.traffic(topic["topic"])
                traffic.bytes_out += len(data)
                traffic.messages_out += batch.count_records(data)
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": topics,
        },
    )


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    topics, total, errors = _collect(broker, req)
    wait_s = req.max_wait.total_seconds()
    # Kafka caps min_bytes by the response limit: a fetch asking for more than it may
    # carry is answered once the limit is reached instead of always waiting max_wait.
    min_bytes = min(req.min_bytes, max_response_bytes(broker, req))
    if total >= min_bytes or errors or wait_s <= 0 or not req.topics:
        return _response(broker, ctx, topics)
    return _long_poll(broker, ctx, req, wait_s, min_bytes)


async def _long_poll(
    broker: Broker, ctx: RequestContext, req: Any, wait_s: float, min_bytes: int
) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await broker.watch.wait(remaining)
        topics, total, errors = _collect(broker, req)
        if total >= min_bytes or errors:
            return _response(broker, ctx, topics)
    topics, _, _ = _collect(broker, req)
    return _response(broker, ctx, topics)
