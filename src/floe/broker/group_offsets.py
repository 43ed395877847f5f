"""Offset APIs of the group coordinator: OffsetCommit (8), OffsetFetch (9),
OffsetDelete (47) and TxnOffsetCommit (28).

Per-partition failures are that partition's error code; a failure of the whole
request (no coordinator, a journal write error) is given to every partition.
"""

from __future__ import annotations

import logging
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.broker.groups import ZERO, coordinator, guarded, ms
from floe.coordinator.group.api import OffsetCommit
from floe.coordinator.group.offsets import TopicPartition
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op

log = logging.getLogger("floe.broker.group_offsets")


def _commits(req: Any) -> list[OffsetCommit]:
    return [
        OffsetCommit(
            t.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.committed_metadata,
        )
        for t in req.topics
        for p in t.partitions
    ]


def _partitions(req: Any) -> list[TopicPartition]:
    return [(t.name, p.partition_index) for t in req.topics for p in t.partitions]


def _refusals(
    broker: Broker, ctx: RequestContext, req: Any, group_op: Op
) -> dict[TopicPartition, ErrorCode]:
    """The partitions the principal may not commit: all of them without ``group_op`` on
    the group (GROUP_AUTHORIZATION_FAILED), else those of topics it may not read
    (TOPIC_AUTHORIZATION_FAILED), as Kafka checks them."""
    if not authz.on_group(broker, ctx, group_op, req.group_id):
        return dict.fromkeys(_partitions(req), ErrorCode.group_authorization_failed)
    return {
        (t.name, p.partition_index): ErrorCode.topic_authorization_failed
        for t in req.topics
        if not authz.on_topic(broker, ctx, Op.READ, t.name)
        for p in t.partitions
    }


def _topics_response(req: Any, errors: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": errors.get((t.name, p.partition_index), ErrorCode.none),
                }
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]


def handle_commit(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    retention = getattr(req, "retention_time", None)
    retention_ms = ms(retention) if retention is not None else -1
    refused = _refusals(broker, ctx, req, Op.READ)
    offsets = [c for c in _commits(req) if (c.topic, c.partition) not in refused]

    async def run() -> Any:
        errors = refused
        if offsets:
            errors = refused | await guarded(
                "OffsetCommit",
                lambda: coordinator(broker).commit_offsets(
                    req.group_id,
                    generation=req.generation_id_or_member_epoch,
                    member_id=req.member_id,
                    instance_id=getattr(req, "group_instance_id", None),
                    offsets=offsets,
                    retention_ms=retention_ms,
                ),
                lambda code: {tp: code for tp in _partitions(req)},
            )
        return build(
            ctx.response_class,
            {"throttle_time": ZERO, "topics": _topics_response(req, errors)},
        )

    return run()


def handle_txn_commit(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if not authz.on_transactional_id(broker, ctx, Op.WRITE, req.transactional_id):
        refused = dict.fromkeys(_partitions(req), ErrorCode.transactional_id_authorization_failed)
    else:
        refused = _refusals(broker, ctx, req, Op.READ)
    offsets = [c for c in _commits(req) if (c.topic, c.partition) not in refused]

    async def run() -> Any:
        errors = refused
        if offsets:
            errors = refused | await guarded(
                "TxnOffsetCommit",
                lambda: coordinator(broker).stage_txn_offsets(
                    req.group_id,
                    producer_id=req.producer_id,
                    producer_epoch=req.producer_epoch,
                    generation=getattr(req, "generation_id", -1),
                    member_id=getattr(req, "member_id", ""),
                    instance_id=getattr(req, "group_instance_id", None),
                    offsets=offsets,
                ),
                lambda code: {tp: code for tp in _partitions(req)},
            )
        return build(
            ctx.response_class,
            {"throttle_time": ZERO, "topics": _topics_response(req, errors)},
        )

    return run()


def _fetch_group(
    broker: Broker, ctx: RequestContext, group_id: str, topics: Any, require_stable: bool
) -> dict[str, Any]:
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    try:
        if not authz.on_group(broker, ctx, Op.DESCRIBE, group_id):
            raise KafkaError("not authorized", ErrorCode.group_authorization_failed)
        found = coordinator(broker).fetch_offsets(group_id, wanted, require_stable)
    except KafkaError as exc:
        return {"group_id": group_id, "error_code": exc.code, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    visible: dict[str, bool] = {}
    for (topic, partition), c in found.items():
        if topic not in visible:
            visible[topic] = authz.on_topic(broker, ctx, Op.DESCRIBE, topic)
        if not visible[topic]:
            if wanted is not None:  # named: say so; all offsets: left out, as Kafka
                by_topic.setdefault(topic, []).append(
                    {"partition_index": partition, "committed_offset": -1,
                     "committed_leader_epoch": -1, "metadata": None,
                     "error_code": ErrorCode.topic_authorization_failed}
                )  # fmt: skip
            continue
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": c.offset,
                "committed_leader_epoch": c.leader_epoch,
                "metadata": c.metadata,
                "error_code": c.error,
            }
        )
    return {
        "group_id": group_id,
        "error_code": ErrorCode.none,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }


def handle_fetch(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    require_stable = bool(getattr(req, "require_stable", False))
    if hasattr(req, "groups"):
        groups = [
            _fetch_group(broker, ctx, g.group_id, g.topics, require_stable) for g in req.groups
        ]
        return build(ctx.response_class, {"throttle_time": ZERO, "groups": groups})
    one = _fetch_group(broker, ctx, req.group_id, req.topics, require_stable)
    return build(
        ctx.response_class,
        {"throttle_time": ZERO, "error_code": one["error_code"], "topics": one["topics"]},
    )


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    refused = _refusals(broker, ctx, req, Op.DELETE)
    partitions = [tp for tp in _partitions(req) if tp not in refused]
    group_refused = ErrorCode.group_authorization_failed in refused.values()

    async def run() -> Any:
        if group_refused:
            error, errors = ErrorCode.group_authorization_failed, {}
        else:
            error, found = await guarded(
                "OffsetDelete",
                lambda: coordinator(broker).delete_offsets(req.group_id, partitions),
                lambda code: (code, {}),
            )
            errors = refused | found
        return build(
            ctx.response_class,
            {
                "throttle_time": ZERO,
                "error_code": error,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {
                                "partition_index": p.partition_index,
                                "error_code": errors.get((t.name, p.partition_index), error),
                            }
                            for p in t.partitions
                        ],
                    }
                    for t in req.topics
                ],
            },
        )

    return run()
