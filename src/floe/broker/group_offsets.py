"""Offset APIs of the group coordinator: OffsetCommit (8), OffsetFetch (9),
OffsetDelete (47) and TxnOffsetCommit (28).

Per-partition failures are that partition's error code; a failure of the whole
request (no coordinator, a journal write error) is given to every partition.
"""

from __future__ import annotations

import logging
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.broker.groups import ZERO, coordinator, guarded, ms
from floe.coordinator.group.api import OffsetCommit
from floe.coordinator.group.offsets import TopicPartition
from floe.errors import ErrorCode, KafkaError

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

    async def run() -> Any:
        errors = await guarded(
            "OffsetCommit",
            lambda: coordinator(broker).commit_offsets(
                req.group_id,
                generation=req.generation_id_or_member_epoch,
                member_id=req.member_id,
                instance_id=getattr(req, "group_instance_id", None),
                offsets=_commits(req),
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
    async def run() -> Any:
        errors = await guarded(
            "TxnOffsetCommit",
            lambda: coordinator(broker).stage_txn_offsets(
                req.group_id,
                producer_id=req.producer_id,
                producer_epoch=req.producer_epoch,
                generation=getattr(req, "generation_id", -1),
                member_id=getattr(req, "member_id", ""),
                instance_id=getattr(req, "group_instance_id", None),
                offsets=_commits(req),
            ),
            lambda code: {tp: code for tp in _partitions(req)},
        )
        return build(
            ctx.response_class,
            {"throttle_time": ZERO, "topics": _topics_response(req, errors)},
        )

    return run()


def _fetch_group(
    broker: Broker, group_id: str, topics: Any, require_stable: bool
) -> dict[str, Any]:
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    try:
        found = coordinator(broker).fetch_offsets(group_id, wanted, require_stable)
    except KafkaError as exc:
        return {"group_id": group_id, "error_code": exc.code, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), c in found.items():
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
        groups = [_fetch_group(broker, g.group_id, g.topics, require_stable) for g in req.groups]
        return build(ctx.response_class, {"throttle_time": ZERO, "groups": groups})
    one = _fetch_group(broker, req.group_id, req.topics, require_stable)
    return build(
        ctx.response_class,
        {"throttle_time": ZERO, "error_code": one["error_code"], "topics": one["topics"]},
    )


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    partitions = _partitions(req)

    async def run() -> Any:
        error, errors = await guarded(
            "OffsetDelete",
            lambda: coordinator(broker).delete_offsets(req.group_id, partitions),
            lambda code: (code, {}),
        )
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
