"""Produce (API key 0): validate batches, append them, answer after durability.

Batches of idempotent producers go through the partition's producer state in the log
(a retried duplicate is answered with its original offsets and appended again never);
transactional batches must target a partition of their producer's open transaction.

Appends happen synchronously, in request order, when the request is read; only the
wait for the fsync (acks=all with ``log.flush.policy=acks``) is deferred, so pipelined
requests on one connection share the group commit and keep their order.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext, now_ms
from floe.errors import ErrorCode, InvalidRecordError, KafkaError
from floe.protocol import batch
from floe.storage.interface import PartitionLog
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.produce")

LEADER_EPOCH = 0


def _append(
    broker: Broker, name: TopicName, index: int, records: bytes | None, now: int
) -> tuple[dict[str, Any], PartitionLog | None]:
    """Append one partition's records; returns its response entry and the log."""
    entry: dict[str, Any] = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": -1,
        "log_append_time": None,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": None,
    }
    try:
        plog = broker.partition_for_write(name, PartitionId(index), create=True)
        if not records:
            raise KafkaError("no records in produce request", ErrorCode.invalid_record)
        buf = bytearray(records)
        headers = batch.scan(buf)
        _check_producer(broker, name, index, headers)
        limit = plog.config.max_message_bytes
        for h in headers:
            if h.size > limit:
                raise KafkaError(
                    f"batch of {h.size} bytes exceeds max.message.bytes={limit}",
                    ErrorCode.message_too_large,
                )
            batch.set_partition_leader_epoch(buf, h.position, LEADER_EPOCH)
        result = plog.append(buf, headers, now)
    except KafkaError as exc:
        entry["error_code"] = exc.code
        entry["error_message"] = str(exc)
        return entry, None
    except Exception as exc:
        log.exception("produce.failed topic=%s partition=%d", name, index)
        entry["error_code"] = ErrorCode.unknown_server_error
        entry["error_message"] = f"{type(exc).__name__}: {exc}"
        return entry, None
    traffic = broker.stats.traffic(name)
    traffic.bytes_in += len(buf)
    traffic.messages_in += result.last_offset - result.base_offset + 1
    entry["base_offset"] = result.base_offset
    entry["log_start_offset"] = result.log_start_offset
    if result.log_append_time >= 0:
        entry["log_append_time"] = datetime.fromtimestamp(result.log_append_time / 1000, UTC)
    return entry, plog


def _check_producer(
    broker: Broker, name: TopicName, index: int, headers: list[batch.BatchHeader]
) -> None:
    """Checks for batches with a producer id before the log's sequence checks: one
    batch per partition, no control batches from clients, and a transactional batch
    only to a partition added to its producer's open transaction.

    Raises:
        InvalidRecordError: a control batch, or several batches of one producer.
        KafkaError: INVALID_TXN_STATE or INVALID_PRODUCER_EPOCH (transactions).
    """
    for h in headers:
        if h.is_control:
            raise InvalidRecordError("clients cannot write control batches")
    first = headers[0]
    if first.producer_id < 0:
        return
    if len(headers) > 1:
        raise InvalidRecordError("an idempotent producer sends one batch per partition")
    if first.is_transactional:
        if broker.transactions is None:
            raise KafkaError("no transaction coordinator", ErrorCode.invalid_txn_state)
        broker.transactions.check_produce(first.producer_id, first.producer_epoch, name, index)


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    now = now_ms()
    topics: list[dict[str, Any]] = []
    written: list[PartitionLog] = []
    for topic in req.topic_data:
        name = TopicName(topic.name)
        parts = []
        for p in topic.partition_data:
            entry, plog = _append(broker, name, p.index, p.records, now)
            parts.append(entry)
            if plog is not None:
                written.append(plog)
        topics.append({"name": name, "partition_responses": parts})
    if written:
        broker.watch.notify()
    if req.acks == 0:
        return None
    if req.acks == -1 and written and broker.flush_on_ack:
        return _after_durable(broker, ctx, written, topics)
    return build(ctx.response_class, {"responses": topics, "throttle_time": timedelta(0)})


async def _after_durable(
    broker: Broker, ctx: RequestContext, logs: list[PartitionLog], topics: list[dict[str, Any]]
) -> Any:
    """Answer once the appended bytes are fsynced; a failed fsync fails every partition
    of the request with KAFKA_STORAGE_ERROR (the client retries; nothing is acked)."""
    try:
        await broker.store.wait_durable(logs)
    except Exception as exc:
        log.exception("produce.fsync_failed partitions=%d", len(logs))
        for topic in topics:
            for entry in topic["partition_responses"]:
                if entry["error_code"] is ErrorCode.none:
                    entry["error_code"] = ErrorCode.kafka_storage_error
                    entry["error_message"] = f"fsync failed: {exc}"
                    entry["base_offset"] = -1
    return build(ctx.response_class, {"responses": topics, "throttle_time": timedelta(0)})
