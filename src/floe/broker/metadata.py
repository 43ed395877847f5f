"""Metadata (API key 3): brokers, topics and partitions; auto-creates topics."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, CloseConnection, Reply, RequestContext, log
from floe.cluster.interface import BrokerInfo
from floe.config import broker as keys
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.security.acl import ResourceType
from floe.storage.interface import TopicMeta
from floe.types import PartitionId, TopicName

_ZERO_UUID = uuid.UUID(int=0)
NULL_NAMES_SINCE = 12
"""First Metadata version whose responses may name a topic by id alone."""


def leaders(broker: Broker) -> Callable[[TopicName, int], int]:
    """The leader of a partition as Metadata names it (see the inner function), for
    the brokers as the last lease renewal saw them."""
    node = broker.node_id
    view = broker.membership.view if broker.membership is not None else None
    owners = view.owners if view is not None else {}
    live = {node, *(b.broker_id for b in view.brokers)} if view is not None else {node}
    if broker.membership is not None:
        live -= broker.membership.refusing()  # dead, its lease not lapsed yet

    unclaimed = controller_id(broker)  # this broker, or a standby's writer (-1: none)
    if unclaimed not in live:
        unclaimed = -1

    def leader(topic: TopicName, p: int) -> int:
        """The owner, -1 (LEADER_NOT_AVAILABLE) while it is not a live broker: a dead
        writer's before the next one claims it (clients must never get a leader the
        brokers list lacks), or one whose Kafka port refuses connections (clients then
        refresh their metadata at their fast interval until the next owner claims it).
        A partition nobody claimed yet is this broker's, or on a standby the writer's
        (it serves every partition; a topic it created a moment ago may be in the bucket
        before the standby's next lease renewal sees its claims), -1 while there is no
        writer or it refuses connections."""
        ownership = owners.get((topic, PartitionId(p)))
        if ownership is None:
            return unclaimed
        return ownership.owner if ownership.owner in live else -1

    return leader


def topic_entry(broker: Broker, meta: TopicMeta) -> dict[str, Any]:
    leader = leaders(broker)
    return {
        "error_code": ErrorCode.none,
        "name": meta.name,
        "topic_id": meta.topic_id,
        "is_internal": meta.internal,
        "partitions": [
            _partition_entry(
                p, leader(meta.name, p), broker.leader_epoch(meta.name, PartitionId(p))
            )
            for p in range(meta.partitions)
        ],
        "topic_authorized_operations": authz.NO_AUTHORIZED_OPERATIONS,
    }


def _partition_entry(partition: int, leader: int, epoch: int) -> dict[str, Any]:
    replicas = (leader,) if leader >= 0 else ()
    return {
        "error_code": ErrorCode.leader_not_available if leader < 0 else ErrorCode.none,
        "partition_index": partition,
        "leader_id": leader,
        "leader_epoch": epoch,
        "replica_nodes": replicas,
        "isr_nodes": replicas,
        "offline_replicas": (),
    }


def _error_entry(name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or _ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": authz.NO_AUTHORIZED_OPERATIONS,
    }


def broker_entry(b: BrokerInfo) -> dict[str, Any]:
    return {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}


def controller_id(broker: Broker) -> int:
    """Where admin clients send CreateTopics and the like: the writer (-1 while a
    standby knows none)."""
    writer = broker.writer()
    return writer.broker_id if writer is not None else -1


def _may_create(broker: Broker, ctx: RequestContext, name: str) -> bool:
    """Kafka's rule for auto-creation: CREATE on the cluster or on the topic."""
    return authz.on_cluster(broker, ctx, Op.CREATE) or authz.on_topic(broker, ctx, Op.CREATE, name)


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    requested = req.topics
    if ctx.api_version == 0 and not requested:
        requested = None  # v0: an empty list means every topic
    if ctx.api_version < NULL_NAMES_SINCE and any(t.name is None for t in requested or ()):
        # Kafka answers INVALID_REQUEST, which these versions cannot carry for a topic
        # without a name: the connection is dropped instead
        return CloseConnection(
            f"Metadata v{ctx.api_version} names every topic (topic ids are v12+)", None
        )
    if broker.refresh_topics is not None and requested:
        names = (getattr(item, "name", None) for item in requested)
        if any(name and broker.store.topic(TopicName(name)) is None for name in names):
            return _after_refresh(broker.refresh_topics, broker, ctx, req, requested)
    return _answer(broker, ctx, req, requested)


async def _after_refresh(
    refresh: Callable[[], Awaitable[None]],
    broker: Broker,
    ctx: RequestContext,
    req: Any,
    requested: Any,
) -> Any:
    """A standby asked for a topic it does not know: the writer may have created it
    since the standby last read the bucket's topics (clients such as the Java consumer
    drop a topic answered with an error, and their group rebalances)."""
    await refresh()
    return _answer(broker, ctx, req, requested)


def _answer(broker: Broker, ctx: RequestContext, req: Any, requested: Any) -> Any:
    store = broker.store
    # CREATE is checked only when the broker would create the topic, as in Kafka
    allow_create = bool(getattr(req, "allow_auto_topic_creation", True)) and bool(
        broker.config[keys.AUTO_CREATE_TOPICS]
    )
    room = broker.auto_create_room() if allow_create else 0
    refused: list[str] = []  # the first few, for the log line
    refusals = 0
    topics: list[dict[str, Any]] = []
    if requested is None:  # every topic the principal may describe
        topics = [
            topic_entry(broker, m)
            for m in store.topics().values()
            if authz.on_topic(broker, ctx, Op.DESCRIBE, m.name)
        ]
    else:
        seen: set[object] = set()  # one entry per distinct topic, as Kafka's set of names
        for item in requested:
            name: str | None = getattr(item, "name", None)
            topic_id = getattr(item, "topic_id", None)
            key = (name, topic_id)
            if key in seen:
                continue
            seen.add(key)
            if name is None and topic_id not in (None, _ZERO_UUID):
                meta = store.topic_by_id(topic_id)
                if meta is None:
                    topics.append(_error_entry(None, topic_id, ErrorCode.unknown_topic_id))
                    continue
            else:
                meta = store.topic(TopicName(name or ""))
            shown = name or (meta.name if meta is not None else "")
            if not authz.on_topic(broker, ctx, Op.DESCRIBE, shown):
                # whether it exists or not, as Kafka: nothing is learnt of it
                topics.append(_error_entry(name, None, ErrorCode.topic_authorization_failed))
                continue
            if meta is None and name and allow_create and not _may_create(broker, ctx, name):
                topics.append(_error_entry(name, None, ErrorCode.topic_authorization_failed))
                continue
            if meta is None and name and allow_create and broker.passive:
                # the writer creates it when the client asks it; until then, retriable
                topics.append(_error_entry(name, None, ErrorCode.leader_not_available))
                continue
            if meta is None and name and allow_create:
                try:
                    meta = broker.auto_create(TopicName(name), room=room)
                    room -= 1
                except KafkaError as exc:
                    if exc.code is not ErrorCode.unknown_topic_or_partition:
                        refusals += 1
                        if len(refused) < 5:
                            refused.append(f"{name}: {exc.code.name}")
                    topics.append(_error_entry(name, None, exc.code))
                    continue
            if meta is None:
                topics.append(_error_entry(name, None, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(topic_entry(broker, meta))
    if getattr(req, "include_topic_authorized_operations", False):
        for entry in topics:
            if entry["error_code"] is not ErrorCode.topic_authorization_failed and entry["name"]:
                entry["topic_authorized_operations"] = authz.authorized_operations(
                    broker, ctx, ResourceType.TOPIC, entry["name"]
                )
    if refusals:  # one line per request, however many names it held
        log.info(
            "topic.auto_create_failed count=%d topics=%s",
            refusals,
            ", ".join(refused) + (", ..." if refusals > len(refused) else ""),
        )
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "brokers": [broker_entry(b) for b in broker.live_brokers(ctx.listener)],
            "cluster_id": broker.cluster_id,
            "controller_id": controller_id(broker),
            "topics": topics,
            "cluster_authorized_operations": authz.cluster_operations(
                broker, ctx, bool(getattr(req, "include_cluster_authorized_operations", False))
            ),
            "error_code": ErrorCode.none,
        },
    )
