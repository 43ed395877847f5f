"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.configs import describe_topic
from floe.broker.core import Broker, RequestContext
from floe.config import broker as keys
from floe.config.topic import validate_topic_configs
from floe.errors import ConfigError, ErrorCode, KafkaError
from floe.storage.interface import InvalidPartitionsError, TopicExistsError
from floe.types import TopicName

log = logging.getLogger("floe.broker.topics")

_ZERO_UUID = uuid.UUID(int=0)
MAX_PARTITIONS = 10000


def _check_replication(broker: Broker, factor: int, assignments: Any) -> None:
    if factor not in (-1, 1) and not assignments:
        raise KafkaError(
            f"replication factor {factor} is larger than the 1 available broker",
            ErrorCode.invalid_replication_factor,
        )
    for a in assignments or ():
        if tuple(a.broker_ids) != (broker.node_id,):
            raise KafkaError(
                f"partition {a.partition_index}: replicas must be [{broker.node_id}]",
                ErrorCode.invalid_replica_assignment,
            )


def _create_one(broker: Broker, t: Any, validate_only: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": t.name,
        "topic_id": _ZERO_UUID,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
    try:
        name = TopicName(t.name)
        partitions = t.num_partitions
        if partitions == -1:
            partitions = len(t.assignments) or broker.config[keys.NUM_PARTITIONS]
        if t.assignments and t.num_partitions != -1:
            raise KafkaError("set either num_partitions or assignments", ErrorCode.invalid_request)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"partitions must be 1..{MAX_PARTITIONS}")
        _check_replication(broker, t.replication_factor, t.assignments)
        configs = validate_topic_configs({c.name: c.value for c in t.configs})
        if broker.store.topic(name) is not None:
            raise TopicExistsError(f"topic {name} already exists")
        if validate_only:
            meta = None
        else:
            meta = broker.store.create_topic(name, partitions, configs)
            log.info("topic.created topic=%s partitions=%d configs=%s", name, partitions, configs)
        result["num_partitions"] = partitions
        result["replication_factor"] = 1
        if meta is not None:
            result["topic_id"] = meta.topic_id
            result["configs"] = [
                {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                for e in describe_topic(broker, meta)
            ]
    except ConfigError as exc:
        result["error_code"] = ErrorCode.invalid_config
        result["error_message"] = str(exc)
    except KafkaError as exc:
        result["error_code"] = exc.code
        result["error_message"] = str(exc)
    return result


def handle_create(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    counts = Counter(t.name for t in req.topics)
    results = []
    for t in req.topics:
        if counts[t.name] > 1:
            results.append(
                {
                    "name": t.name,
                    "topic_id": _ZERO_UUID,
                    "error_code": ErrorCode.invalid_request,
                    "error_message": "topic named more than once in the request",
                    "configs": None,
                }
            )
            continue
        results.append(_create_one(broker, t, bool(getattr(req, "validate_only", False))))
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": results})


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    store = broker.store
    items: list[tuple[str | None, uuid.UUID | None]]
    if hasattr(req, "topic_names"):
        items = [(n, None) for n in req.topic_names]
    else:
        items = [(t.name, t.topic_id) for t in req.topics]
    responses = []
    for name, topic_id in items:
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or _ZERO_UUID,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        meta = (
            store.topic(TopicName(name))
            if name
            else (store.topic_by_id(topic_id) if topic_id else None)
        )
        if meta is None:
            entry["error_code"] = (
                ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
            )
        else:
            try:
                store.delete_topic(meta.name)
                if broker.groups is not None:
                    broker.groups.topic_deleted(meta.name)
                entry["name"], entry["topic_id"] = meta.name, meta.topic_id
                log.info("topic.deleted topic=%s", meta.name)
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, str(exc)
        responses.append(entry)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "responses": responses})


def handle_create_partitions(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    results = []
    for t in req.topics:
        entry: dict[str, Any] = {
            "name": t.name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            meta = broker.store.topic(TopicName(t.name))
            if meta is None:
                raise KafkaError(f"unknown topic {t.name}", ErrorCode.unknown_topic_or_partition)
            if t.count <= meta.partitions:
                raise InvalidPartitionsError(
                    f"topic has {meta.partitions} partitions; {t.count} is not more"
                )
            if t.count > MAX_PARTITIONS:
                raise InvalidPartitionsError(f"at most {MAX_PARTITIONS} partitions")
            for assignment in t.assignments or ():
                if tuple(assignment.broker_ids) != (broker.node_id,):
                    raise KafkaError(
                        f"replicas must be [{broker.node_id}]",
                        ErrorCode.invalid_replica_assignment,
                    )
            if not req.validate_only:
                broker.store.create_partitions(meta.name, t.count)
                log.info("topic.partitions_created topic=%s partitions=%d", t.name, t.count)
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = exc.code, str(exc)
        results.append(entry)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "results": results})
