"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): Kafka's API for
moving partitions between brokers (``Admin.alterPartitionReassignments``,
``kafka-reassign-partitions.sh``), answered by the controller, the writer.

What a request decides is :mod:`floe.cluster.reassignment`'s; this module checks the
principal (ALTER, or DESCRIBE, on the cluster, as Kafka does), records the moves in the
metadata store before it answers, and holds the partitions an operator placed so that
the balancing leaves them there (``cluster.reassignment.hold.ms``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.cluster.reassignment import Key, Placement, decide, ongoing
from floe.errors import ErrorCode
from floe.security.acl import AclOperation as Op
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.reassignments")

ZERO = timedelta(0)


def _refusal(broker: Broker, ctx: RequestContext, operation: Op) -> tuple[ErrorCode, str] | None:
    """Why the whole request is refused (None: it is not): the principal may not do
    ``operation`` on the cluster, or this broker is not the controller."""
    if not authz.on_cluster(broker, ctx, operation):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    if broker.passive:
        return ErrorCode.not_controller, f"broker {broker.node_id} is not the controller"
    return None


def placement(broker: Broker) -> Placement:
    """The writer's view of where partitions are and are going."""
    me = broker.node_id
    topics = dict(broker.store.topics())
    membership = broker.membership
    if membership is None:
        return Placement(topics, {}, {}, frozenset({me}), me, sharing=False)
    view = membership.view
    owners = {k: o.owner for k, o in view.owners.items()}
    owners.update({k: o.owner for k, o in membership.owned.items()})
    return Placement(
        topics,
        owners,
        dict(view.assignments),
        frozenset(membership.live()) - membership.refusing(),
        me,
        sharing=membership.share,
        writer_only=membership.writer_only,
    )


def handle_alter(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    refused = _refusal(broker, ctx, Op.ALTER)
    if refused is not None:
        code, message = refused
        return _alter_response(ctx, req, lambda _key: (code, message), code, message)
    return _alter(broker, ctx, req)


async def _alter(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    where = placement(broker)
    allow_rf_change = bool(getattr(req, "allow_replication_factor_change", True))
    answers: dict[Key, tuple[ErrorCode, str | None]] = {}
    moves: dict[Key, int] = {}
    for t in req.topics:
        for p in t.partitions:
            key = (TopicName(t.name), PartitionId(p.partition_index))
            replicas = None if p.replicas is None else [int(r) for r in p.replicas]
            decision = decide(where, key, replicas, allow_replication_factor_change=allow_rf_change)
            answers[key] = (decision.error, decision.message)
            if decision.error is not ErrorCode.none:
                continue
            if decision.move_to is not None:
                moves[key] = decision.move_to
            if broker.moves is not None:
                if replicas is None:
                    broker.moves.release(key)
                else:
                    broker.moves.hold(key)
    if moves:
        assert broker.membership is not None  # decide() moves nothing outside a cluster
        try:
            await asyncio.wrap_future(broker.membership.plan(moves))
        except Exception as exc:
            log.warning("cluster.reassignment_failed partitions=%d error=%s", len(moves), exc)
            failed = (ErrorCode.request_timed_out, f"the metadata store did not answer: {exc}")
            answers.update(dict.fromkeys(moves, failed))
        else:
            log.info(
                "cluster.reassignment broker=%d principal=%s moves=%s",
                broker.node_id,
                ctx.session.principal if ctx.session is not None else "-",
                ",".join(f"{t}-{p}:{to}" for (t, p), to in sorted(moves.items())),
            )
    return _alter_response(ctx, req, answers.__getitem__, ErrorCode.none, None)


def _alter_response(
    ctx: RequestContext,
    req: Any,
    answer: Any,
    code: ErrorCode,
    message: str | None,
) -> Any:
    """Every partition of the request with ``answer(key)``'s error and message."""
    topics = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            error, text = answer((TopicName(t.name), PartitionId(p.partition_index)))
            partitions.append(
                {"partition_index": p.partition_index, "error_code": error, "error_message": text}
            )
        topics.append({"name": t.name, "partitions": partitions})
    return build(
        ctx.response_class,
        {"throttle_time": ZERO, "error_code": code, "error_message": message, "responses": topics},
    )


def handle_list(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    refused = _refusal(broker, ctx, Op.DESCRIBE)
    if refused is not None:
        code, message = refused
        return build(
            ctx.response_class,
            {"throttle_time": ZERO, "error_code": code, "error_message": message, "topics": []},
        )
    keys = None
    if req.topics is not None:
        keys = [
            (TopicName(t.name), PartitionId(i)) for t in req.topics for i in t.partition_indexes
        ]
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, partition), to, owner in ongoing(placement(broker), keys):
        by_topic[topic].append(
            {
                "partition_index": partition,
                "replicas": (to, owner),
                "adding_replicas": (to,),
                "removing_replicas": (owner,),
            }
        )
    return build(
        ctx.response_class,
        {
            "throttle_time": ZERO,
            "error_code": ErrorCode.none,
            "error_message": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )
