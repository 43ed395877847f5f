"""Producer ids and transactions: InitProducerId (22), AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66).

The transaction coordinator (:mod:`floe.coordinator.txn`) raises
:class:`~floe.errors.KafkaError`; this module is the one place its errors become
response codes. Older request versions predate PRODUCER_FENCED (KIP-588) and get
INVALID_PRODUCER_EPOCH instead.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, CloseConnection, Reply, RequestContext, now_ms
from floe.coordinator.group.coordinator import TOPIC as OFFSETS_TOPIC
from floe.coordinator.txn.coordinator import TransactionCoordinator
from floe.coordinator.txn.state import TxnState
from floe.errors import ErrorCode, KafkaError
from floe.protocol import batch
from floe.protocol.control import encode_marker
from floe.security.acl import AclOperation as Op
from floe.storage.interface import InvalidTopicError, NotOwnerError, PartitionLog, StorageError
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.txn")

_ZERO = timedelta(0)
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}
"""First version of each API that may return PRODUCER_FENCED."""


def _coordinator(broker: Broker) -> TransactionCoordinator:
    """The broker's transaction coordinator (each of its calls raises NOT_COORDINATOR
    for a transactional id whose partition another broker leads).

    Raises:
        KafkaError: NOT_COORDINATOR on a standby (the writer coordinates every
            transactional id) or a fenced broker, COORDINATOR_NOT_AVAILABLE before the
            coordinator started.
    """
    transactions = broker.transactions
    if transactions is None or broker.fenced:
        broker.check_coordinator()
        raise KafkaError("transaction coordinator not started", ErrorCode.coordinator_not_available)
    return transactions


def _allocates_ids(broker: Broker) -> bool:
    """Whether this broker hands out idempotent producers' ids: it coordinates some
    ``__transaction_state`` partition."""
    transactions = broker.transactions
    return transactions is not None and not broker.fenced and bool(transactions.held())


def _code(ctx: RequestContext, exc: Exception, what: str) -> ErrorCode:
    """The response code for ``exc`` (unexpected exceptions are logged)."""
    if not isinstance(exc, KafkaError):
        log.error("txn.request_failed api=%s", what, exc_info=exc)
        return ErrorCode.unknown_server_error
    code = exc.code
    if code is ErrorCode.producer_fenced and ctx.api_version < _FENCED_SINCE[ctx.api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


def handle_init_producer_id(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    if req.transactional_id is None and not _allocates_ids(broker):
        # Kafka lets any broker give an idempotent producer its id, so clients send this
        # to any broker and librdkafka asks the same one again after an error; a closed
        # connection makes them pick another: one that coordinates transactions
        return CloseConnection("this broker coordinates no transactions", None)
    return _init_producer_id(broker, ctx, req)


async def _init_producer_id(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    pid, epoch, code = -1, -1, ErrorCode.none
    try:
        tid = req.transactional_id
        if tid is not None and not authz.on_transactional_id(broker, ctx, Op.WRITE, tid):
            raise KafkaError("not authorized", ErrorCode.transactional_id_authorization_failed)
        if tid is None and not authz.may_write_idempotently(broker, ctx):
            raise KafkaError("not authorized", ErrorCode.cluster_authorization_failed)
        pid, epoch = await _coordinator(broker).init_producer_id(
            req.transactional_id,
            int(req.transaction_timeout.total_seconds() * 1000),
            getattr(req, "producer_id", -1),
            getattr(req, "producer_epoch", -1),
        )
    except Exception as exc:
        code = _code(ctx, exc, "InitProducerId")
    return build(
        ctx.response_class,
        {"throttle_time": _ZERO, "error_code": code, "producer_id": pid, "producer_epoch": epoch},
    )


async def handle_add_partitions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    wanted = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    tid = req.v3_and_below_transactional_id
    txn_allowed = authz.on_transactional_id(broker, ctx, Op.WRITE, tid)
    for topic, p in wanted:
        if not txn_allowed:
            errors[(topic, p)] = ErrorCode.transactional_id_authorization_failed
            continue
        if not authz.on_topic(broker, ctx, Op.WRITE, topic):
            errors[(topic, p)] = ErrorCode.topic_authorization_failed
            continue
        try:
            broker.store.partition(TopicName(topic), PartitionId(p))
        except NotOwnerError as exc:
            if not broker.shares_partitions:
                errors[(topic, p)] = exc.code
            # else another broker leads it: the coordinator writes its marker there
        except KafkaError as exc:
            errors[(topic, p)] = exc.code
    if errors:  # Kafka adds nothing when any partition is unknown
        for key in wanted:
            errors.setdefault(key, ErrorCode.operation_not_attempted)
    else:
        try:
            await _coordinator(broker).add_partitions(
                req.v3_and_below_transactional_id,
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
                wanted,
            )
        except Exception as exc:
            code = _code(ctx, exc, "AddPartitionsToTxn")
            errors = dict.fromkeys(wanted, code)
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, p in wanted:
        topics.setdefault(topic, []).append(
            {"partition_index": p, "partition_error_code": errors.get((topic, p), ErrorCode.none)}
        )
    return build(
        ctx.response_class,
        {
            "throttle_time": _ZERO,
            "error_code": ErrorCode.none,
            "results_by_topic_v3_and_below": [
                {"name": t, "results_by_partition": parts} for t, parts in topics.items()
            ],
        },
    )


async def handle_add_offsets(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    code = ErrorCode.none
    try:
        if not authz.on_transactional_id(broker, ctx, Op.WRITE, req.transactional_id):
            raise KafkaError("not authorized", ErrorCode.transactional_id_authorization_failed)
        if not authz.on_group(broker, ctx, Op.READ, req.group_id):
            raise KafkaError("not authorized", ErrorCode.group_authorization_failed)
        await _coordinator(broker).add_offsets(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
        )
    except Exception as exc:
        code = _code(ctx, exc, "AddOffsetsToTxn")
    return build(ctx.response_class, {"throttle_time": _ZERO, "error_code": code})


async def handle_end_txn(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    code = ErrorCode.none
    try:
        if not authz.on_transactional_id(broker, ctx, Op.WRITE, req.transactional_id):
            raise KafkaError("not authorized", ErrorCode.transactional_id_authorization_failed)
        await _coordinator(broker).end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed
        )
    except Exception as exc:
        code = _code(ctx, exc, "EndTxn")
    return build(ctx.response_class, {"throttle_time": _ZERO, "error_code": code})


async def handle_write_txn_markers(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    """Write each marker to the partitions it names, as a partition leader does for a
    transaction coordinator, and for Kafka's admin tools: ``Admin.abortTransaction``
    and ``kafka-transactions.sh abort`` end a hanging transaction on one partition this
    way. Answered once the markers are durable. A marker for a ``__consumer_offsets``
    partition completes the transaction's offsets in that partition's groups (the
    transaction coordinator's broker sends it to the groups' coordinator, as Kafka's
    does); markers of the other internal topics are their coordinators' to write, and
    are refused."""
    now = now_ms()
    results: list[dict[str, Any]] = []
    # Kafka: ALTER on the cluster (an operator's Admin.abortTransaction) or CLUSTER_ACTION
    permitted = authz.on_cluster(broker, ctx, Op.ALTER) or authz.on_cluster(
        broker, ctx, Op.CLUSTER_ACTION
    )
    for m in req.markers:
        codes: dict[tuple[str, int], ErrorCode] = {}
        written: dict[tuple[str, int], PartitionLog] = {}
        for t in m.topics:
            for p in t.partition_indexes:
                if not permitted:
                    codes[(t.name, p)] = ErrorCode.cluster_authorization_failed
                    continue
                if t.name == OFFSETS_TOPIC and broker.groups is not None:
                    codes[(t.name, p)] = await _complete_groups(broker, m, p)
                    continue
                try:
                    written[(t.name, p)] = _write_marker(broker, m, t.name, p, now)
                except KafkaError as exc:
                    codes[(t.name, p)] = exc.code
        if written:
            try:
                await broker.store.wait_durable(written.values())
            except StorageError as exc:
                codes.update(dict.fromkeys(written, exc.code))
            broker.watch.notify()
        log.info(
            "txn.markers_written producer_id=%d epoch=%d result=%s partitions=%d refused=%d",
            m.producer_id, m.producer_epoch, "commit" if m.transaction_result else "abort",
            len(written), len(codes),
        )  # fmt: skip
        topics: dict[str, list[dict[str, Any]]] = {}
        for t in m.topics:
            for p in t.partition_indexes:
                code = codes.get((t.name, p), ErrorCode.none)
                topics.setdefault(t.name, []).append({"partition_index": p, "error_code": code})
        results.append(
            {
                "producer_id": m.producer_id,
                "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
            }
        )
    return build(ctx.response_class, {"markers": results})


async def _complete_groups(broker: Broker, marker: Any, partition: int) -> ErrorCode:
    """Complete the transaction of ``marker`` in the groups of ``__consumer_offsets``
    partition ``partition``; the answer for that partition."""
    assert broker.groups is not None
    try:
        done = await broker.groups.complete_partition(
            partition, marker.producer_id, marker.producer_epoch, marker.transaction_result
        )
    except (KafkaError, StorageError) as exc:
        return exc.code
    log.info(
        "txn.group_marker partition=%d producer_id=%d epoch=%d result=%s groups=%d",
        partition, marker.producer_id, marker.producer_epoch,
        "commit" if marker.transaction_result else "abort", done,
    )  # fmt: skip
    return ErrorCode.none


def _write_marker(
    broker: Broker, marker: Any, topic: str, partition: int, now: int
) -> PartitionLog:
    """Append one marker to the partition's log (not yet durable).

    Raises:
        KafkaError: the partition is unknown or led elsewhere, an internal topic's,
            the producer's epoch is newer (INVALID_PRODUCER_EPOCH), or a newer
            coordinator wrote this producer's last marker here
            (TRANSACTION_COORDINATOR_FENCED: Floe's coordinators write their shard's
            epoch, see :mod:`floe.coordinator.txn.coordinator`).
    """
    if broker.is_internal(topic):
        raise InvalidTopicError(f"the markers of internal topic {topic} are its coordinator's")
    plog = broker.store.partition(TopicName(topic), PartitionId(partition))
    data = bytearray(
        encode_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.transaction_result,
            marker.coordinator_epoch,
            now,
        )
    )
    plog.append(data, batch.scan(data), now)
    return plog


def handle_describe_producers(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partition_indexes:
            entry: dict[str, Any] = {
                "partition_index": p,
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [],
            }
            try:
                if not authz.on_topic(broker, ctx, Op.READ, t.name):
                    raise KafkaError("not authorized", ErrorCode.topic_authorization_failed)
                plog = broker.store.partition(TopicName(t.name), PartitionId(p))
                entry["active_producers"] = [
                    {
                        "producer_id": e.producer_id,
                        "producer_epoch": e.epoch,
                        "last_sequence": e.last_seq,
                        "last_timestamp": e.last_timestamp,
                        "coordinator_epoch": e.coordinator_epoch,
                        "current_txn_start_offset": e.txn_first_offset,
                    }
                    for e in plog.producers()
                ]
            except KafkaError as exc:
                entry["error_code"] = exc.code
                entry["error_message"] = str(exc)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": _ZERO, "topics": topics})


def handle_describe_transactions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    states = []
    for tid in req.transactional_ids:
        denied = not authz.on_transactional_id(broker, ctx, Op.DESCRIBE, tid)
        md, code = None, ErrorCode.transactional_id_authorization_failed
        if not denied:
            try:
                md = _coordinator(broker).describe(tid)
                code = ErrorCode.transactional_id_not_found
            except KafkaError as exc:  # led elsewhere: the admin client asks its leader
                code = exc.code
        if md is None:
            states.append(
                {
                    "error_code": code,
                    "transactional_id": tid,
                    "transaction_state": "",
                    "transaction_timeout": _ZERO,
                    "transaction_start_time": datetime.fromtimestamp(0, UTC),
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(md.partitions):
            if authz.on_topic(broker, ctx, Op.DESCRIBE, topic):  # others left out, as Kafka
                by_topic.setdefault(topic, []).append(p)
        start = md.txn_start_ms if md.txn_start_ms >= 0 else 0
        states.append(
            {
                "error_code": ErrorCode.none,
                "transactional_id": tid,
                "transaction_state": md.state.value,
                "transaction_timeout": timedelta(milliseconds=md.timeout_ms),
                "transaction_start_time": datetime.fromtimestamp(start / 1000, UTC),
                "producer_id": md.producer_id,
                "producer_epoch": md.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return build(ctx.response_class, {"throttle_time": _ZERO, "transaction_states": states})


def handle_list_transactions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    known = {s.value for s in TxnState}
    wanted = set(req.state_filters)
    pids = set(req.producer_id_filters)
    duration = getattr(req, "duration_filter", -1)
    pattern = getattr(req, "transactional_id_pattern", None)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error:
        return build(
            ctx.response_class,
            {
                "throttle_time": _ZERO,
                "error_code": ErrorCode.invalid_regular_expression,
                "unknown_state_filters": [],
                "transaction_states": [],
            },
        )
    now = now_ms()
    txns = list(broker.transactions.transactions()) if broker.transactions else []
    matches = [
        {"transactional_id": md.transactional_id, "producer_id": md.producer_id,
         "transaction_state": md.state.value}
        for md in sorted(txns, key=lambda m: m.transactional_id)
        if (not wanted or md.state.value in wanted)
        and (not pids or md.producer_id in pids)
        and (duration < 0 or (md.txn_start_ms >= 0 and now - md.txn_start_ms >= duration))
        and (regex is None or regex.fullmatch(md.transactional_id))
        and authz.on_transactional_id(broker, ctx, Op.DESCRIBE, md.transactional_id)
    ]  # fmt: skip
    return build(
        ctx.response_class,
        {
            "throttle_time": _ZERO,
            "error_code": ErrorCode.none,
            "unknown_state_filters": sorted(wanted - known),
            "transaction_states": matches,
        },
    )
