"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37).

Internal topics (:meth:`Broker.is_internal`) are the broker's: creating one of their
names is INVALID_REQUEST (Kafka's answer for ``__cluster_metadata``), deleting or growing
one TOPIC_AUTHORIZATION_FAILED (what Kafka answers a principal without DELETE/ALTER on
the topic; no Floe client has it on an internal topic). Partition counts are bounded per
topic (``create.topic.max.partitions``: INVALID_PARTITIONS) and per request
(``create.request.max.partitions``: POLICY_VIOLATION for every topic of the request).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.configs import describe_topic
from floe.broker.core import Broker, RequestContext
from floe.config import broker as keys
from floe.config import tabletopic as tt
from floe.config.tabletopic import canonical_name
from floe.config.topic import validate_topic_configs
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.storage.interface import InvalidPartitionsError, TopicExistsError, TopicMeta
from floe.types import TopicName

log = logging.getLogger("floe.broker.topics")

_ZERO_UUID = uuid.UUID(int=0)
Result = dict[str, Any]


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


@dataclass(frozen=True)
class _Plan:
    """A CreateTopics entry that passed validation: what to create."""

    name: TopicName
    partitions: int
    configs: dict[str, str]


def _result(name: str, code: ErrorCode = ErrorCode.none, message: str | None = None) -> Result:
    return {
        "name": name,
        "topic_id": _ZERO_UUID,
        "error_code": code,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


def _validate(broker: Broker, t: Any) -> _Plan:
    """Check one CreateTopics entry without creating anything.

    Raises:
        KafkaError: INVALID_REQUEST for a reserved name or both a count and assignments,
            INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT,
            INVALID_CONFIG (ConfigError) or TOPIC_ALREADY_EXISTS.
    """
    name = TopicName(t.name)
    if broker.is_internal(name):
        # Kafka answers INVALID_REQUEST for __cluster_metadata; Floe for every internal name
        raise KafkaError(
            f"Creation of internal topic {name} is prohibited.", ErrorCode.invalid_request
        )
    if t.assignments and t.num_partitions != -1:
        raise KafkaError("set either num_partitions or assignments", ErrorCode.invalid_request)
    partitions = t.num_partitions
    if partitions == -1:
        partitions = len(t.assignments) or broker.config[keys.NUM_PARTITIONS]
    broker.check_partitions(partitions)
    _check_replication(broker, t.replication_factor, t.assignments)
    configs = validate_topic_configs({c.name: c.value for c in t.configs})
    if broker.store.topic(name) is not None:
        raise TopicExistsError(f"topic {name} already exists")
    broker.check_table(name, configs)
    return _Plan(name, partitions, configs)


def _created(broker: Broker, plan: _Plan, result: Result, validate_only: bool) -> None:
    """Create ``plan`` (unless ``validate_only``) and fill in its result.

    Raises:
        KafkaError: the store refused (an illegal name, a topic created meanwhile).
    """
    meta = None
    if not validate_only:
        meta = broker.store.create_topic(plan.name, plan.partitions, plan.configs)
        log.info(
            "topic.created topic=%s partitions=%d configs=%s",
            plan.name,
            plan.partitions,
            plan.configs,
        )
    result["num_partitions"] = plan.partitions
    result["replication_factor"] = 1
    if meta is not None:
        result["topic_id"] = meta.topic_id
        result["configs"] = [
            {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
            for e in describe_topic(broker, meta)
        ]


def _error(result: Result, exc: KafkaError) -> None:
    result["error_code"] = exc.code
    result["error_message"] = str(exc)


def _check_create(broker: Broker, ctx: RequestContext, t: Any) -> None:
    """Kafka's checks: CREATE on the cluster or the topic; a topic created as a table
    topic also needs ALTER_CONFIGS on it (turning a topic into a table is a config change).

    Raises:
        KafkaError: TOPIC_AUTHORIZATION_FAILED.
    """
    if not (
        authz.on_cluster(broker, ctx, Op.CREATE) or authz.on_topic(broker, ctx, Op.CREATE, t.name)
    ):
        raise KafkaError("not authorized to create the topic", ErrorCode.topic_authorization_failed)
    table = any(
        canonical_name(c.name) == tt.ENABLE.name and str(c.value).strip().lower() == "true"
        for c in t.configs
    )
    if table and not authz.on_topic(broker, ctx, Op.ALTER_CONFIGS, t.name):
        raise KafkaError(
            "not authorized to make the topic a table topic (ALTER_CONFIGS)",
            ErrorCode.topic_authorization_failed,
        )


def handle_create(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    """Validate every topic first, then bound the request as a whole
    (``create.request.max.partitions``: over it nothing is created and every topic gets
    POLICY_VIOLATION, as Kafka's controller answers an oversized batch), then create."""
    validate_only = bool(getattr(req, "validate_only", False))
    counts = Counter(t.name for t in req.topics)
    results: list[Result] = []
    plans: list[tuple[_Plan, Result]] = []
    answered: set[str] = set()
    for t in req.topics:
        if counts[t.name] > 1:  # one INVALID_REQUEST entry per duplicated name, as Kafka
            if t.name not in answered:
                answered.add(t.name)
                result = _result(t.name)
                results.append(result)
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = "topic named more than once in the request"
            continue
        result = _result(t.name)
        results.append(result)
        try:
            _check_create(broker, ctx, t)
            plans.append((_validate(broker, t), result))
        except KafkaError as exc:  # ConfigError is INVALID_CONFIG
            _error(result, exc)
    total = sum(plan.partitions for plan, _ in plans)
    most = broker.config[keys.CREATE_REQUEST_MAX_PARTITIONS]
    if total > most:
        log.warning("topic.create_refused partitions=%d max=%d", total, most)
        refusal = KafkaError(
            f"the request creates {total} partitions; at most {most} per request "
            "(create.request.max.partitions)",
            ErrorCode.policy_violation,
        )
        for _, result in plans:
            _error(result, refusal)
        plans = []
    for plan, result in plans:
        try:
            _created(broker, plan, result, validate_only)
        except KafkaError as exc:
            _error(result, exc)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": results})


def _delete_refused(
    broker: Broker,
    ctx: RequestContext,
    name: str | None,
    meta: TopicMeta | None,
    *,
    anything: bool,
) -> ErrorCode | None:
    """Kafka's answer to a DeleteTopics entry that names no topic or one the principal
    may not delete (None: delete it). ``anything``: DELETE on the cluster. A name the
    principal may not describe is refused whether the topic exists or not: nothing is
    learnt of it."""
    if name and not anything and not authz.on_topic(broker, ctx, Op.DESCRIBE, name):
        return ErrorCode.topic_authorization_failed
    if meta is None:
        return ErrorCode.unknown_topic_or_partition if name else ErrorCode.unknown_topic_id
    if not anything and not authz.on_topic(broker, ctx, Op.DELETE, meta.name):
        return ErrorCode.topic_authorization_failed
    return None


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    store = broker.store
    items: list[tuple[str | None, uuid.UUID | None]]
    if hasattr(req, "topic_names"):
        items = [(n, None) for n in req.topic_names]
    else:
        items = [(t.name, t.topic_id) for t in req.topics]
    responses = []
    counts = Counter(items)
    answered: set[tuple[str | None, uuid.UUID | None]] = set()
    anything = authz.on_cluster(broker, ctx, Op.DELETE)  # Kafka: every topic may go
    for name, topic_id in items:
        if counts[(name, topic_id)] > 1:  # one INVALID_REQUEST entry per duplicate, as Kafka
            if (name, topic_id) not in answered:
                answered.add((name, topic_id))
                responses.append(
                    {
                        "name": name,
                        "topic_id": topic_id or _ZERO_UUID,
                        "error_code": ErrorCode.invalid_request,
                        "error_message": "topic named more than once in the request",
                    }
                )
            continue
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
        refused = _delete_refused(broker, ctx, name, meta, anything=anything)
        if refused is not None or meta is None:
            entry["error_code"] = refused or ErrorCode.unknown_topic_id
            if meta is not None and authz.on_topic(broker, ctx, Op.DESCRIBE, meta.name):
                entry["name"] = meta.name
        elif broker.is_internal(meta.name):
            entry["name"], entry["topic_id"] = meta.name, meta.topic_id
            entry["error_code"] = ErrorCode.topic_authorization_failed
            entry["error_message"] = refusal(meta.name, "deleted")
            log.warning("topic.delete_refused topic=%s reason=internal", meta.name)
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
    """Validate every topic, bound the partitions the request adds in all
    (``create.request.max.partitions``, else POLICY_VIOLATION for all), then grow."""
    results = []
    growing: list[tuple[TopicName, int, int, dict[str, Any]]] = []
    for t in req.topics:
        entry: dict[str, Any] = {
            "name": t.name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        try:
            if not authz.on_topic(broker, ctx, Op.ALTER, t.name):
                raise KafkaError("not authorized", ErrorCode.topic_authorization_failed)
            added = _partitions_to_add(broker, t)
            growing.append((TopicName(t.name), t.count, added, entry))
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = exc.code, str(exc)
        results.append(entry)
    total = sum(added for _, _, added, _ in growing)
    most = broker.config[keys.CREATE_REQUEST_MAX_PARTITIONS]
    if total > most:
        log.warning("topic.partitions_refused partitions=%d max=%d", total, most)
        for _, _, _, entry in growing:
            entry["error_code"] = ErrorCode.policy_violation
            entry["error_message"] = (
                f"the request creates {total} partitions; at most {most} per request "
                "(create.request.max.partitions)"
            )
        growing = []
    for name, count, _, entry in growing:
        if req.validate_only:
            continue
        try:
            broker.store.create_partitions(name, count)
            log.info("topic.partitions_created topic=%s partitions=%d", name, count)
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = exc.code, str(exc)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "results": results})


def _partitions_to_add(broker: Broker, t: Any) -> int:
    """How many partitions a CreatePartitions entry adds.

    Raises:
        KafkaError: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED for an
            internal topic, INVALID_PARTITIONS (not more than now, or above
            ``create.topic.max.partitions``), INVALID_REPLICA_ASSIGNMENT.
    """
    meta = broker.store.topic(TopicName(t.name))
    if meta is None:
        raise KafkaError(f"unknown topic {t.name}", ErrorCode.unknown_topic_or_partition)
    if broker.is_internal(meta.name):
        log.warning("topic.partitions_refused topic=%s reason=internal", meta.name)
        raise KafkaError(refusal(meta.name, "grown"), ErrorCode.topic_authorization_failed)
    if t.count <= meta.partitions:
        raise InvalidPartitionsError(
            f"topic has {meta.partitions} partitions; {t.count} is not more"
        )
    broker.check_partitions(t.count)
    for assignment in t.assignments or ():
        if tuple(assignment.broker_ids) != (broker.node_id,):
            raise KafkaError(
                f"replicas must be [{broker.node_id}]",
                ErrorCode.invalid_replica_assignment,
            )
    return int(t.count - meta.partitions)


def refusal(topic: str, done: str) -> str:
    """The message of a refused change to an internal topic."""
    return f"{topic} is an internal topic (the broker's own state): it cannot be {done}"
