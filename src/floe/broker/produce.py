"""Produce (API key 0): validate batches, append them, answer after durability.

A request is refused whole, as Kafka does, when its acks is not -1, 0 or 1
(INVALID_REQUIRED_ACKS) or when it carries a transactional batch without a
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Each partition's records are
then checked before anything is appended: internal topics are the broker's
(INVALID_TOPIC_EXCEPTION), one batch per partition, CRC and framing, size, codec for
the request version, and the record rules of :mod:`floe.protocol.validate`
(docs/broker.md, "Record batch validation"). A batch whose max timestamp disagrees with
its records is corrected, as Kafka does.

Batches of idempotent producers go through the partition's producer state in the log
(a retried duplicate is answered with its original offsets and appended again never);
transactional batches must target a partition of their producer's open transaction.

Appends happen synchronously, in request order, when the request is read, and so does
the start of their durability (acks=all with ``log.flush.policy=acks``: an fsync, or on
object storage a WAL object and its commit): pipelined requests on one connection share
the group commit. Only the answer waits for its turn, after the answers of the requests
before it on the connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, CloseConnection, Reply, RequestContext, now_ms
from floe.config import broker as keys
from floe.errors import ErrorCode, InvalidRecordError, KafkaError
from floe.protocol import batch
from floe.protocol.records import COMPRESSION_ZSTD
from floe.protocol.validate import Policy, RecordValidationError, validate
from floe.security.acl import AclOperation as Op
from floe.storage.interface import InvalidTopicError, NotServedYetError, PartitionLog
from floe.tasks import retrieve
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.produce")


VALID_ACKS = (-1, 0, 1)
ZSTD_MIN_VERSION = 7
"""Produce v7 is the first version a client may send zstd batches with (KIP-110)."""
PIPELINE_S = 10.0
"""How long after refusing a connection leadership of a partition its next requests'
sequence gaps there are taken for that refusal's (:func:`_after_refusal`): the requests
a producer had in flight then arrive within milliseconds; its retries come later, after
a metadata refresh, starting with the refused one."""
OPENING_HOLD_S = 5.0
"""How long at most the answer to a request refused a partition this broker is opening
(:class:`~floe.storage.interface.NotServedYetError`) waits for that open to end (and
half the request's timeout at most): see :func:`_once_served`."""
MAX_DECOMPRESSED_BYTES = 2**31 - 1
"""Whatever the configuration says, no batch decompresses to more than this (Kafka's
int32 sizes)."""


def _entry(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": None,
    }


def _append(
    broker: Broker,
    ctx: RequestContext,
    name: TopicName,
    part: Any,
    now: int,
    *,
    opening: dict[tuple[str, int], asyncio.Future[None]],
) -> tuple[dict[str, Any], PartitionLog | None]:
    """Validate and append one partition's records (``part``: the request's partition
    data); returns its response entry and the log written to (None when nothing was). A
    partition refused because this broker is opening it goes into ``opening``, with its
    open."""
    index: int = part.index
    records: bytes | None = part.records
    version = ctx.api_version
    refused = ctx.session.refused_leadership if ctx.session is not None else None
    entry = _entry(index)
    try:
        _check_not_internal(broker, name)
        plog = broker.partition_for_write(name, PartitionId(index))
        if not records:
            raise InvalidRecordError("no records in produce request")
        buf = bytearray(records)
        headers = batch.scan(buf)
        if len(headers) != 1:
            raise InvalidRecordError("a produce request carries one record batch per partition")
        h = headers[0]
        config = plog.config
        limit = config.max_message_bytes
        if h.size > limit:
            raise KafkaError(
                f"batch of {h.size} bytes exceeds max.message.bytes={limit}",
                ErrorCode.message_too_large,
            )
        if h.compression == COMPRESSION_ZSTD and version < ZSTD_MIN_VERSION:
            raise KafkaError(
                f"zstd batches need Produce v{ZSTD_MIN_VERSION}+, not v{version}",
                ErrorCode.unsupported_compression_type,
            )
        create_time = not config.log_append_time
        policy = Policy(
            now,
            create_time,
            config.timestamp_before_max_ms,
            config.timestamp_after_max_ms,
            min(limit * broker.config[keys.MESSAGE_DECOMPRESSED_MAX_RATIO], MAX_DECOMPRESSED_BYTES),
        )
        max_timestamp = validate(buf, h, policy)
        if create_time and max_timestamp != h.max_timestamp:
            batch.set_max_timestamp(buf, h, max_timestamp)
        _check_producer(broker, name, index, h)
        batch.set_partition_leader_epoch(
            buf, h.position, broker.leader_epoch(name, PartitionId(index))
        )
        result = plog.append(buf, headers, now)
    except KafkaError as exc:
        if isinstance(exc, NotServedYetError):
            opening[(name, index)] = exc.opened
        if refused is not None:
            exc = _after_refusal(refused, (name, index), exc)
        entry["error_code"] = exc.code
        entry["error_message"] = str(exc)
        if isinstance(exc, RecordValidationError):
            entry["record_errors"] = [
                {"batch_index": e.index, "batch_index_error_message": e.message}
                for e in exc.record_errors
            ]
        log.debug(
            "produce.refused topic=%s partition=%d error=%s reason=%s",
            name, index, exc.code.name, exc,
        )  # fmt: skip
        return entry, None
    except Exception as exc:
        log.exception("produce.failed topic=%s partition=%d", name, index)
        entry["error_code"] = ErrorCode.unknown_server_error
        entry["error_message"] = f"{type(exc).__name__}: {exc}"
        return entry, None
    if refused:
        refused.pop((name, index), None)
    traffic = broker.stats.traffic(name)
    traffic.bytes_in += len(buf)
    traffic.messages_in += result.last_offset - result.base_offset + 1
    entry["base_offset"] = result.base_offset
    entry["log_start_offset"] = result.log_start_offset
    if result.log_append_time >= 0:
        entry["log_append_time"] = datetime.fromtimestamp(result.log_append_time / 1000, UTC)
    return entry, plog


def _check_not_internal(broker: Broker, name: TopicName) -> None:
    """Clients never append to internal topics (:meth:`Broker.is_internal`): their
    coordinators write them through the store (:class:`floe.storage.journal.Journal`),
    not through Produce.

    Raises:
        InvalidTopicError: ``name`` is internal (INVALID_TOPIC_EXCEPTION, as Kafka).
    """
    if broker.is_internal(name):
        raise InvalidTopicError(f"Cannot append to internal topic {name}")


def _after_refusal(
    refused: dict[tuple[str, int], float], key: tuple[str, int], exc: KafkaError
) -> KafkaError:
    """The error to answer, given the partitions this connection was refused leadership
    of (``refused``, kept up to date here).

    A producer pipelines its requests: when one is refused NOT_LEADER_OR_FOLLOWER (the
    partition not served here yet, as while this broker restores it after a takeover)
    and the next, already sent, arrives once it is served, that one does not follow the
    last sequence the partition holds. Answering OUT_OF_ORDER_SEQUENCE_NUMBER for that
    gap made librdkafka bump its producer epoch, and it then sent the records it had in
    flight to other partitions again under the new epoch, where no broker can tell them
    from new ones (a record written twice in the chaos suite; confluentinc/librdkafka
    #4953, the same against Apache Kafka's leader changes). The gap's request is refused
    as its predecessor was instead: the producer sends both again, in order, and no
    epoch changes. Only within :data:`PIPELINE_S` of the refusal, so that a real gap
    later still gets its own error."""
    if exc.code is ErrorCode.not_leader_or_follower:
        refused[key] = time.monotonic()
        return exc
    since = refused.get(key)
    if exc.code is ErrorCode.out_of_order_sequence_number and since is not None:
        if time.monotonic() - since <= PIPELINE_S:
            return KafkaError(
                f"{exc} (an earlier request of this connection was refused leadership of "
                "the partition: this one is refused the same, to be sent again after it)",
                ErrorCode.not_leader_or_follower,
            )
        del refused[key]
    return exc


def _check_producer(broker: Broker, name: TopicName, index: int, h: batch.BatchHeader) -> None:
    """A transactional batch goes only to a partition added to its producer's open
    transaction (the log then checks epochs and sequences).

    Raises:
        KafkaError: INVALID_TXN_STATE or INVALID_PRODUCER_EPOCH (transactions).
    """
    if h.producer_id < 0 or not h.is_transactional:
        return
    if broker.transactions is None:
        if broker.shares_partitions:  # a member: the writer coordinates, the log checks
            return  # the producer's epoch, as Kafka's partition leaders do
        raise KafkaError("no transaction coordinator", ErrorCode.invalid_txn_state)
    broker.transactions.check_produce(h.producer_id, h.producer_epoch, name, index)


def _request_error(req: Any) -> tuple[ErrorCode, str] | None:
    """An error that refuses every partition of the request, as Kafka does before it
    looks at any partition: acks out of range, or transactional batches from a request
    without a transactional id."""
    if req.acks not in VALID_ACKS:
        return ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {req.acks}"
    if req.transactional_id is None and any(
        p.records and batch.any_transactional(p.records)
        for topic in req.topic_data
        for p in topic.partition_data
    ):
        return (
            ErrorCode.transactional_id_authorization_failed,
            "transactional records in a request without a transactional id",
        )
    return None


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    now = now_ms()
    refusal = _request_error(req)
    if (
        refusal is None
        and req.transactional_id is not None
        and not authz.on_transactional_id(broker, ctx, Op.WRITE, req.transactional_id)
    ):
        refusal = ErrorCode.transactional_id_authorization_failed, "not authorized"
    topics: list[dict[str, Any]] = []
    written: list[PartitionLog] = []
    opening: dict[tuple[str, int], asyncio.Future[None]] = {}
    for topic in req.topic_data:
        name = TopicName(topic.name)
        denied = refusal is None and not authz.on_topic(broker, ctx, Op.WRITE, name)
        parts = []
        for p in topic.partition_data:
            if refusal is not None or denied:
                entry = _entry(p.index)
                entry["error_code"], entry["error_message"] = refusal or (
                    ErrorCode.topic_authorization_failed,
                    "not authorized to write to the topic",
                )
                parts.append(entry)
                continue
            entry, plog = _append(broker, ctx, name, p, now, opening=opening)
            parts.append(entry)
            if plog is not None:
                written.append(plog)
        topics.append({"name": name, "partition_responses": parts})
    if refusal is not None:
        log.debug("produce.refused client=%s error=%s", ctx.client_id, refusal[0].name)
    if written:
        broker.watch.notify()
    if req.acks == 0:
        return _unanswered(ctx, topics)
    timeout_s = req.timeout.total_seconds()
    reply: Any
    if req.acks == -1 and written and broker.flush_on_ack:
        ends = {(lg.topic, int(lg.partition)): (lg, int(lg.log_end_offset)) for lg in written}
        durable = _durable_from_now(broker, written, timeout_s)
        reply = _after_durable(ctx, ends, topics, durable, timeout_s)
    else:
        reply = build(ctx.response_class, {"responses": topics, "throttle_time": timedelta(0)})
    if opening:
        return _once_served(ctx, opening, timeout_s, reply)
    return reply


async def _once_served(
    ctx: RequestContext,
    opening: dict[tuple[str, int], asyncio.Future[None]],
    timeout_s: float,
    reply: Any,
) -> Any:
    """Answer ``reply`` (a response, or a coroutine that makes one) once the partitions
    this broker was opening when the request came (``opening``, refused
    NOT_LEADER_OR_FOLLOWER) serve, or after :data:`OPENING_HOLD_S` (at most half the
    request's ``timeout_s``). Answered at once, the refusal sent a producer into retries
    whose backoff grew (librdkafka and the Java client up to 1 s between tries) while
    the open took a few hundred milliseconds: after a takeover it acknowledged up to
    1.7 s after the partition served. Answered once it serves, its retry is written.
    Nothing is appended for the refused partitions: their records, and those of the
    requests pipelined behind them (refused the same by :func:`_after_refusal`, whose
    :data:`PIPELINE_S` counts from this answer), are sent again in order."""
    hold = OPENING_HOLD_S if timeout_s <= 0 else min(OPENING_HOLD_S, timeout_s / 2)
    await asyncio.wait(set(opening.values()), timeout=hold)
    if ctx.session is not None:
        answered = time.monotonic()
        for key in opening:
            if key in ctx.session.refused_leadership:
                ctx.session.refused_leadership[key] = answered
    return await reply if asyncio.iscoroutine(reply) else reply


def _unanswered(ctx: RequestContext, topics: list[dict[str, Any]]) -> CloseConnection | None:
    """An acks=0 request gets no response; when a partition of it was refused, the
    connection is closed instead, the only way to tell the client (Kafka does the same)."""
    errors = sorted(
        {
            entry["error_code"].name
            for topic in topics
            for entry in topic["partition_responses"]
            if entry["error_code"] is not ErrorCode.none
        }
    )
    if not errors:
        return None
    response: Any = build(ctx.response_class, {"responses": topics, "throttle_time": timedelta(0)})
    return CloseConnection(f"acks=0 produce refused: {','.join(errors)}", response)


def _durable_from_now(
    broker: Broker, logs: list[PartitionLog], timeout_s: float
) -> asyncio.Future[None]:
    """Start making what was appended to ``logs`` durable now, as the request is read,
    for at most ``timeout_s`` (none when not positive). The connection awaits this
    request's answer only once the requests before it on the connection are answered:
    a wait started then gave every pipelined request a group-commit round of its own,
    each after the last answer. The outcome is always retrieved (a connection that
    broke never awaits it)."""
    wait = broker.store.wait_durable(logs)
    task = asyncio.ensure_future(asyncio.wait_for(wait, timeout_s if timeout_s > 0 else None))
    task.add_done_callback(retrieve)
    return task


async def _after_durable(
    ctx: RequestContext,
    ends: dict[tuple[TopicName, int], tuple[PartitionLog, int]],
    topics: list[dict[str, Any]],
    durable: asyncio.Future[None],
    timeout_s: float,
) -> Any:
    """Answer once the appended records (each partition's log with its end after the
    append: ``ends``) are durable (``durable``, started as the request was read), or
    after the request's timeout (``timeout_s``, counted from then; none when not
    positive): the partitions not durable by then get REQUEST_TIMED_OUT, as Kafka
    answers an acks=all request its replicas did not acknowledge in time (possibly
    persisted: retried with the same sequence numbers). When the wait fails, only the
    partitions whose appended records are not durable get an error, the one their log
    names (:attr:`~floe.storage.interface.PartitionLog.durability_failure`: lost with an
    offline log, not part of the log, or still queued and possibly written); the others
    of the request are acknowledged, as Kafka fails only an offline log dir's
    partitions."""
    try:
        await durable
    except Exception as exc:
        timed_out = isinstance(exc, TimeoutError)
        failed = 0
        for topic in topics:
            for entry in topic["partition_responses"]:
                where = (topic["name"], int(entry["index"]))
                if entry["error_code"] is not ErrorCode.none or where not in ends:
                    continue
                plog, end = ends[where]
                if plog.durable_offset < end:
                    failed += 1
                    entry["error_code"] = (
                        ErrorCode.request_timed_out if timed_out else plog.durability_failure
                    )
                    entry["error_message"] = (
                        f"not durable within the request's timeout of {timeout_s:g} s"
                        if timed_out
                        else f"not durable: {exc}"
                    )
                    entry["base_offset"] = -1
        log.warning(
            "produce.fsync_failed partitions=%d failed=%d error=%s",
            len(ends), failed, "timed out" if timed_out else exc,
        )  # fmt: skip
    return build(ctx.response_class, {"responses": topics, "throttle_time": timedelta(0)})
