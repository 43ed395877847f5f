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

Records that left the object store's local cache (``storage.s3.cache.max.bytes``) are
read from the bucket after the synchronous pass, as Kafka's tiered storage does: those
partitions are read concurrently, sharing what the response has left; the response
waits for those reads, not for ``max_wait``.

A fetch of a partition this broker is opening (claimed, and being restored after a
takeover or a move) waits for the open within its ``max_wait`` and is answered with
records, rather than NOT_LEADER_OR_FOLLOWER at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.config import broker as keys
from floe.errors import ErrorCode, KafkaError
from floe.protocol import batch
from floe.security.acl import AclOperation as Op
from floe.storage.interface import NotCachedError, NotServedYetError, PartitionLog
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.broker.fetch")

_ZERO_UUID = uuid.UUID(int=0)


def _committed(data: bytes, lso: int) -> bytes:
    """The whole batches of ``data`` that start below the last stable offset (the LSO
    is always a batch boundary: the first offset of an open transaction; so is the high
    watermark, which the same cut serves)."""
    cut = 0
    for h in batch.scan(data, verify_crc=False, partial_ok=True):
        if h.base_offset >= lso:
            break
        cut = h.position + h.size
    return data if cut == len(data) else data[:cut]


@dataclass(slots=True)
class _Remote:
    """A partition whose records are in the object store only, read after the
    synchronous pass."""

    entry: dict[str, Any]
    plog: PartitionLog
    fetch_offset: int
    lso: int
    committed: bool
    partition_max_bytes: int


def _partition(
    broker: Broker,
    name: TopicName | None,
    part: Any,
    budget: int,
    first: bool,
    *,
    committed: bool,
    opening: list[asyncio.Future[None]],
) -> tuple[dict[str, Any], int, _Remote | None]:
    """One partition's response entry, the bytes of records it carries, and what is
    left to read from the object store (or None). A partition this broker is opening
    adds its open to ``opening``."""
    entry = _blank(part.partition)
    if name is None:
        entry["error_code"] = ErrorCode.unknown_topic_id
        return entry, 0, None
    try:
        partition = PartitionId(part.partition)
        plog = broker.store.partition(name, partition)
        current = getattr(part, "current_leader_epoch", -1)  # v9+
        broker.check_leader_epoch(name, partition, current)
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
            return entry, 0, None
        if part.fetch_offset > end and part.fetch_offset <= hw:
            return entry, 0, None  # beyond the LSO but inside the log: wait for the outcome
        try:
            data = plog.read(Offset(part.fetch_offset), limit, min_one=first)
        except NotCachedError:
            remote = _Remote(
                entry, plog, part.fetch_offset, lso, committed, part.partition_max_bytes
            )
            return entry, 0, remote
        _fill(entry, plog, part.fetch_offset, data, lso, committed=committed)
    except KafkaError as exc:
        if isinstance(exc, NotServedYetError):
            opening.append(exc.opened)
        entry["error_code"] = exc.code
        return entry, 0, None
    except Exception:
        log.exception("fetch.failed topic=%s partition=%d", name, part.partition)
        entry["error_code"] = ErrorCode.unknown_server_error
        return entry, 0, None
    return entry, len(entry["records"]), None


def _fill(
    entry: dict[str, Any],
    plog: PartitionLog,
    fetch_offset: int,
    data: bytes,
    lso: int,
    *,
    committed: bool,
) -> None:
    """Put ``data`` in ``entry``: for read_committed, only the batches below the LSO,
    with the aborted transactions overlapping them; else those below the high watermark
    (below the log end only in a cluster, where it is what the bucket holds)."""
    if not committed and data and plog.high_watermark < plog.log_end_offset:
        data = _committed(data, plog.high_watermark)
    if committed and data:
        data = _committed(data, lso)
        if data:
            upper = batch.scan(data, verify_crc=False, partial_ok=True)[-1].next_offset
            entry["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in plog.aborted_transactions(Offset(fetch_offset), Offset(upper))
            ]
    entry["records"] = data


async def _read_remotes(broker: Broker, req: Any, remote: list[_Remote], total: int) -> None:
    """Read the partitions of ``remote`` from the object store into their entries, at
    once, each with an equal share of what the response has left after the cached
    partitions' ``total`` bytes (the first one at least a batch when nothing else is
    there, as KIP-74 wants)."""
    share = max(max_response_bytes(broker, req) - total, 0) // len(remote)
    await asyncio.gather(
        *(_read_remote(r, share, min_one=total == 0 and i == 0) for i, r in enumerate(remote))
    )


async def _read_remote(remote: _Remote, share: int, *, min_one: bool) -> None:
    """Read ``remote``'s records, at most ``share`` bytes, into its entry."""
    entry = remote.entry
    limit = min(remote.partition_max_bytes, share)
    try:
        offset = Offset(remote.fetch_offset)
        try:
            data = remote.plog.read(offset, limit, min_one=min_one)
        except NotCachedError as exc:
            data = await exc.load()
        _fill(entry, remote.plog, remote.fetch_offset, data, remote.lso, committed=remote.committed)
    except KafkaError as exc:
        entry["error_code"] = exc.code
    except Exception:
        log.exception(
            "fetch.failed topic=%s partition=%d", remote.plog.topic, remote.plog.partition
        )
        entry["error_code"] = ErrorCode.unknown_server_error


def max_response_bytes(broker: Broker, req: Any) -> int:
    """The record bytes this response may carry: the client's ``max_bytes`` (0 means 0,
    negative too), capped by the broker's ``fetch.max.bytes``, as Kafka does."""
    asked: int = req.max_bytes
    return min(max(asked, 0), broker.config[keys.FETCH_MAX_BYTES])


def _collect(
    broker: Broker, ctx: RequestContext, req: Any, opening: list[asyncio.Future[None]]
) -> tuple[list[dict[str, Any]], int, bool, list[_Remote]]:
    """Build the per-topic entries; returns them, total record bytes, whether any
    partition has an error (which answers a long poll at once), and the partitions to
    read from the object store. The opens of the partitions this broker is opening go
    into ``opening``.

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
    remote: list[_Remote] = []
    for topic in req.topics:
        topic_id = getattr(topic, "topic_id", None)
        name: TopicName | None
        if not hasattr(topic, "topic"):  # v13+: by id only (the zero id reads as None)
            meta = store.topic_by_id(topic_id) if topic_id not in (None, _ZERO_UUID) else None
            name = meta.name if meta is not None else None
        else:
            name = TopicName(topic.topic)
        denied = name is not None and not authz.on_topic(broker, ctx, Op.READ, name)
        parts = []
        for part in topic.partitions:
            if denied:
                parts.append(_denied(part.partition))
                errors = True
                continue
            entry, size, uncached = _partition(
                broker, name, part, budget - total, first, committed=committed, opening=opening
            )
            if uncached is not None:
                remote.append(uncached)
            if size:
                first = False
                total += size
            errors = errors or entry["error_code"] is not ErrorCode.none
            parts.append(entry)
        topics.append({"topic": name or "", "topic_id": topic_id, "partitions": parts})
    return topics, total, errors, remote


def _denied(partition: int) -> dict[str, Any]:
    """The entry of a partition of a topic the principal may not read."""
    return _blank(partition) | {"error_code": ErrorCode.topic_authorization_failed}


def _blank(partition: int) -> dict[str, Any]:
    """A partition's entry before anything is read."""
    return {
        "partition_index": partition,
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


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
    return _answer(broker, ctx, req, req.max_wait.total_seconds(), hold=True)


def _answer(broker: Broker, ctx: RequestContext, req: Any, wait_s: float, *, hold: bool) -> Reply:
    """The answer, long-polling at most ``wait_s``; with ``hold``, once the partitions
    this broker is opening serve (:func:`_once_served`)."""
    opening: list[asyncio.Future[None]] = []
    topics, total, errors, remote = _collect(broker, ctx, req, opening)
    if opening and hold and wait_s > 0:
        return _once_served(broker, ctx, req, opening, wait_s)
    if remote:
        return _after_remote(broker, ctx, req, topics, total=total, remote=remote)
    # Kafka caps min_bytes by the response limit: a fetch asking for more than it may
    # carry is answered once the limit is reached instead of always waiting max_wait.
    min_bytes = min(req.min_bytes, max_response_bytes(broker, req))
    if total >= min_bytes or errors or wait_s <= 0 or not req.topics:
        return _response(broker, ctx, topics)
    return _long_poll(broker, ctx, req, wait_s, min_bytes)


async def _once_served(
    broker: Broker,
    ctx: RequestContext,
    req: Any,
    opening: list[asyncio.Future[None]],
    wait_s: float,
) -> Any:
    """Answer once the partitions this broker was opening (``opening``: claimed, and
    being restored after a takeover or a move) serve, within the fetch's max wait
    (``wait_s``), then as any fetch for what is left of it. Answered
    NOT_LEADER_OR_FOLLOWER at once, a consumer refreshed its metadata, which named this
    broker again, and fetched again only after its backoff (librdkafka's
    ``fetch.error.backoff.ms``, 500 ms)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    await asyncio.wait(set(opening), timeout=wait_s)
    reply = _answer(broker, ctx, req, max(deadline - loop.time(), 0.0), hold=False)
    return await reply if asyncio.iscoroutine(reply) else reply


async def _after_remote(
    broker: Broker,
    ctx: RequestContext,
    req: Any,
    topics: list[dict[str, Any]],
    *,
    total: int,
    remote: list[_Remote],
) -> Any:
    await _read_remotes(broker, req, remote, total)
    return _response(broker, ctx, topics)


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
        topics, total, errors, remote = _collect(broker, ctx, req, [])
        if remote:
            await _read_remotes(broker, req, remote, total)
            return _response(broker, ctx, topics)
        if total >= min_bytes or errors:
            return _response(broker, ctx, topics)
    topics, total, _, remote = _collect(broker, ctx, req, [])
    if remote:
        await _read_remotes(broker, req, remote, total)
    return _response(broker, ctx, topics)
