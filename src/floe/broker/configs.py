"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are dynamic (stored with the topic); broker configs are static (read
from floe.toml, environment and flags at start) and are described, not altered. The
configs of internal topics are the broker's: altering them is TOPIC_AUTHORIZATION_FAILED.
Sensitive broker values (passwords, keys, tokens, URLs with credentials) are described
as Kafka describes a password: ``is_sensitive`` and a null value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from enum import IntEnum
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.config.broker import BROKER_KEYS, TABLE_TOPIC_NAMESPACE
from floe.config.keys import ConfigKey
from floe.config.loader import looks_sensitive
from floe.config.tabletopic import NAMESPACE as TABLE_NAMESPACE
from floe.config.tabletopic import TABLE_TOPIC_KEYS, canonical_name, key_for
from floe.config.topic import (
    BROKER_DEFAULTS,
    TOPIC_KEYS,
    is_passthrough,
    validate_topic_configs,
)
from floe.errors import ConfigError, ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.storage.interface import TopicMeta
from floe.types import TopicName

log = logging.getLogger("floe.broker.configs")


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


class Source(IntEnum):
    """Kafka's ConfigSource numbers."""

    TOPIC = 1
    STATIC_BROKER = 4
    DEFAULT = 5


class OpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def _config_type(key: ConfigKey[Any] | None) -> int:
    """Kafka's ConfigType numbers: BOOLEAN 1, STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7."""
    if key is None:
        return 2
    if key.is_list:
        return 7
    return {bool: 1, str: 2, int: 5, float: 6}[key.type]


def _entry(
    name: str,
    value: str | None,
    source: Source,
    key: ConfigKey[Any] | None,
    synonyms: list[dict[str, Any]],
    *,
    read_only: bool,
    docs: bool,
) -> dict[str, Any]:
    return {
        "name": name,
        "value": None if key is not None and key.sensitive else value,
        "read_only": read_only,
        "is_default": source is Source.DEFAULT,
        "config_source": int(source),
        "is_sensitive": bool(key and key.sensitive),
        "synonyms": synonyms,
        "config_type": _config_type(key),
        "documentation": key.doc if docs and key is not None else None,
    }


def describe_topic(
    broker: Broker,
    meta: TopicMeta,
    names: tuple[str, ...] | None = None,
    *,
    synonyms: bool = False,
    docs: bool = False,
) -> list[dict[str, Any]]:
    """Every topic key with its effective value and source (overrides first)."""
    resolved = broker.store.topic_config(meta.name)
    explicit = broker.config.explicit()
    out = []
    for key in TOPIC_KEYS:
        if names is not None and key.name not in names:
            continue
        syn: list[dict[str, Any]] = []
        broker_key = BROKER_DEFAULTS.get(key.name)
        if key.name in meta.configs:
            source = Source.TOPIC
            syn.append({"name": key.name, "value": meta.configs[key.name], "source": 1})
        elif broker_key is not None and broker_key.name in explicit:
            source = Source.STATIC_BROKER
        else:
            source = Source.DEFAULT
        if broker_key is not None and broker_key.name in explicit:
            syn.append(
                {
                    "name": broker_key.name,
                    "value": broker_key.render(explicit[broker_key.name]),
                    "source": int(Source.STATIC_BROKER),
                }
            )
        syn.append({"name": key.name, "value": key.render(key.default), "source": 5})
        out.append(
            _entry(
                key.name,
                key.render(resolved.value(key)),
                source,
                key,
                syn if synonyms else [],
                read_only=False,
                docs=docs,
            )
        )
    overridden = set()
    for name, value in sorted(meta.configs.items()):
        if is_passthrough(name):
            overridden.add(canonical_name(name))
            if names is None or name in names:
                out.append(
                    _entry(name, value, Source.TOPIC, key_for(name), [], read_only=False, docs=docs)
                )
    for key in TABLE_TOPIC_KEYS:  # the table-topic keys this topic does not override
        if key.name in overridden or (names is not None and key.name not in names):
            continue
        default = key.default
        if key is TABLE_NAMESPACE and not default:
            default = broker.config[TABLE_TOPIC_NAMESPACE]
        out.append(
            _entry(
                key.name, key.render(default), Source.DEFAULT, key, [], read_only=False, docs=docs
            )
        )
    return out


def _describe_broker(broker: Broker, names: tuple[str, ...] | None, docs: bool) -> list[Any]:
    """Every declared broker key, then the passthrough ``spark.*`` / ``catalog.*`` keys
    set in floe.toml or on the command line. Sensitive values are null (Kafka's answer
    for a password): a declared key marked ``sensitive``, a passthrough key whose name
    or value suggests a secret (:func:`looks_sensitive`)."""
    out = []
    for key in BROKER_KEYS:
        if names is not None and key.name not in names:
            continue
        src = broker.config.sources.get(key.name, "default")
        source = Source.DEFAULT if src == "default" else Source.STATIC_BROKER
        out.append(
            _entry(
                key.name,
                key.render(broker.config.values[key.name]),
                source,
                key,
                [],
                read_only=True,
                docs=docs,
            )
        )
    for name, value in sorted(broker.config.passthrough.items()):
        if names is not None and name not in names:
            continue
        entry = _entry(name, value, Source.STATIC_BROKER, None, [], read_only=True, docs=docs)
        if looks_sensitive(name, value):
            entry["value"], entry["is_sensitive"] = None, True
        out.append(entry)
    return out


def handle_describe(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    results = []
    synonyms = bool(getattr(req, "include_synonyms", False))
    docs = bool(getattr(req, "include_documentation", False))
    for res in req.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "configs": [],
        }
        names = res.configuration_keys
        refused = _refused(broker, ctx, res, Op.DESCRIBE_CONFIGS)
        if refused is not None:
            result["error_code"], result["error_message"] = refused
        elif res.resource_type == ResourceType.TOPIC:
            meta = broker.store.topic(TopicName(res.resource_name))
            if meta is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"unknown topic {res.resource_name}"
            else:
                result["configs"] = describe_topic(
                    broker, meta, names, synonyms=synonyms, docs=docs
                )
        elif res.resource_type == ResourceType.BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = f"unknown broker {res.resource_name}"
            else:
                result["configs"] = _describe_broker(broker, names, docs)
        else:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"unsupported resource type {res.resource_type}"
        results.append(result)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "results": results})


def _refuse_internal(broker: Broker, name: TopicName) -> None:
    """Raises:
    KafkaError: TOPIC_AUTHORIZATION_FAILED for an internal topic (what Kafka answers a
        principal without ALTER_CONFIGS on it; no Floe client has it).
    """
    if broker.is_internal(name):
        log.warning("topic.configs_refused topic=%s reason=internal", name)
        raise KafkaError(
            f"{name} is an internal topic (the broker's own state): its configs cannot be altered",
            ErrorCode.topic_authorization_failed,
        )


def _refused(
    broker: Broker, ctx: RequestContext, res: Any, operation: Op
) -> tuple[ErrorCode, str] | None:
    """Kafka's check of a config resource: ``operation`` on the topic, or on the cluster
    for a broker; the error and message when it is refused."""
    if res.resource_type == ResourceType.TOPIC:
        if not authz.on_topic(broker, ctx, operation, res.resource_name):
            return ErrorCode.topic_authorization_failed, f"not authorized: {operation.name}"
    elif res.resource_type == ResourceType.BROKER and not authz.on_cluster(broker, ctx, operation):
        return ErrorCode.cluster_authorization_failed, f"not authorized: {operation.name}"
    return None


def _apply(
    broker: Broker,
    ctx: RequestContext,
    res: Any,
    new: Mapping[str, str | None],
    validate_only: bool,
) -> dict[str, Any]:
    """Validate and store a topic's complete new override set."""
    out: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": res.resource_type,
        "resource_name": res.resource_name,
    }
    try:
        refused = _refused(broker, ctx, res, Op.ALTER_CONFIGS)
        if refused is not None:
            raise KafkaError(refused[1], refused[0])
        if res.resource_type == ResourceType.BROKER:
            raise KafkaError(
                "broker configs are static: set them in floe.toml or FLOE_* variables",
                ErrorCode.invalid_config,
            )
        if res.resource_type != ResourceType.TOPIC:
            raise KafkaError(
                f"unsupported resource type {res.resource_type}", ErrorCode.invalid_request
            )
        name = TopicName(res.resource_name)
        if broker.store.topic(name) is None:
            raise KafkaError(f"unknown topic {name}", ErrorCode.unknown_topic_or_partition)
        _refuse_internal(broker, name)
        configs = validate_topic_configs(new)
        broker.check_table(name, configs)
        if not validate_only:
            broker.store.set_topic_configs(name, configs)
            log.info("topic.configs_altered topic=%s configs=%s", name, configs)
    except KafkaError as exc:
        out["error_code"] = exc.code
        out["error_message"] = str(exc)
    return out


def handle_alter(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    responses = [
        _apply(broker, ctx, res, {c.name: c.value for c in res.configs}, req.validate_only)
        for res in req.resources
    ]
    return build(ctx.response_class, {"throttle_time": timedelta(0), "responses": responses})


def _incremental(current: Mapping[str, str], ops: Any) -> dict[str, str | None]:
    """Apply SET/DELETE/APPEND/SUBTRACT operations to a copy of the overrides.

    Raises:
        ConfigError: an unknown key, or APPEND/SUBTRACT on a key that is not a list.
    """
    new: dict[str, str | None] = dict(current)
    for op in ops:
        key = TOPIC_KEYS.get(op.name)
        if key is None and not is_passthrough(op.name):
            raise ConfigError(f"unknown topic config {op.name!r}")
        kind = op.config_operation
        if kind == OpType.SET:
            new[op.name] = op.value
        elif kind == OpType.DELETE:
            new.pop(op.name, None)
        elif kind in (OpType.APPEND, OpType.SUBTRACT):
            if key is None or not key.is_list:
                raise ConfigError(f"{op.name}: APPEND/SUBTRACT need a list config")
            base = new.get(op.name) or key.render(key.default)
            items = [v for v in base.split(",") if v]
            given = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if kind == OpType.APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            new[op.name] = ",".join(items)
        else:
            raise ConfigError(f"{op.name}: unknown operation {kind}")
    return new


def handle_incremental(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    responses = []
    for res in req.resources:
        meta = broker.store.topic(TopicName(res.resource_name))
        try:
            refused = _refused(broker, ctx, res, Op.ALTER_CONFIGS)
            if refused is not None:
                raise KafkaError(refused[1], refused[0])
            if res.resource_type == ResourceType.TOPIC and meta is not None:
                _refuse_internal(broker, meta.name)
            current = meta.configs if meta is not None else {}
            new = _incremental(current, res.configs)
        except KafkaError as exc:
            responses.append(
                {
                    "error_code": exc.code,
                    "error_message": str(exc),
                    "resource_type": res.resource_type,
                    "resource_name": res.resource_name,
                }
            )
            continue
        responses.append(_apply(broker, ctx, res, new, req.validate_only))
    return build(ctx.response_class, {"throttle_time": timedelta(0), "responses": responses})
