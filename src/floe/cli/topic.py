"""``floe topic``: create, list, describe, alter and delete topics.

Talks to any Kafka-compatible broker through confluent-kafka's AdminClient (imported
lazily), like ``floe group``, and shares its output helpers: an aligned text table or,
with ``--output json``, one JSON document. Failures print one line on stderr and exit 1;
a broker's refusal keeps its error name and message (``INVALID_CONFIG: ...``).

``--table`` is shorthand for ``table.topic.enable=true``. ``describe`` says whether a
topic is a table topic and names its Iceberg table, derived exactly as the pipeline
does (:func:`floe.tabletopic.convert.layout.table_identifier`).
"""

from __future__ import annotations

import argparse
from typing import Any

from floe.cli.admin import (
    TIMEOUT_S,
    add_common,
    kafka_admin,
    offset_spec,
    result,
    run_admin,
)
from floe.cli.output import CliError

INTERNAL_PREFIX = "__"


def add_parser(sub: Any) -> None:
    """Register ``floe topic`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_common(common, config_flags=("--config-file",))
    topic = sub.add_parser("topic", help="topics: create, list, describe, alter, delete")
    verbs = topic.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", "-p", type=int, default=1)
    create.add_argument("--replication-factor", "-r", type=int, default=1)
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="topic config"
    )
    create.add_argument(
        "--table", action="store_true", help="make it a table topic (table.topic.enable=true)"
    )
    listing = verbs.add_parser("list", parents=[common], help="list topics")
    listing.add_argument("--internal", action="store_true", help="include __internal topics")
    describe = verbs.add_parser(
        "describe", parents=[common], help="partitions, offsets, configs set, table topic"
    )
    describe.add_argument("topic")
    alter = verbs.add_parser("alter", parents=[common], help="set or delete topic configs")
    alter.add_argument("topic")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    delete = verbs.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("topic")


def run(args: argparse.Namespace) -> int:
    """Run one ``floe topic`` verb; returns the exit code."""
    verbs = {
        "create": _create,
        "list": _list,
        "describe": _describe,
        "alter": _alter,
        "delete": _delete,
    }
    return run_admin(args, verbs[args.verb])


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    """Raises:
    CliError: an item without ``=``.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def _create(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    ka = kafka_admin()

    configs = _pairs(args.config, "--config")
    if args.table:
        configs["table.topic.enable"] = "true"
    new = ka.NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)
    result(
        admin.create_topics([new], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[
            args.topic
        ]
    )
    return {
        "topic": args.topic,
        "partitions": args.partitions,
        "configs": configs,
        "_table": [("TOPIC", "STATUS"), (args.topic, "created")],
    }


def _metadata(admin: Any, topic: str | None = None) -> Any:
    return admin.list_topics(topic=topic, timeout=TIMEOUT_S)


def _list(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    meta = _metadata(admin)
    names = sorted(n for n in meta.topics if args.internal or not n.startswith(INTERNAL_PREFIX))
    topics = [{"topic": n, "partitions": len(meta.topics[n].partitions)} for n in names]
    return {
        "topics": topics,
        "_table": [
            ("TOPIC", "PARTITIONS"),
            *((t["topic"], str(t["partitions"])) for t in topics),
        ],
    }


def _set_configs(admin: Any, topic: str) -> dict[str, str]:
    """The topic's configs that are set on the topic (not broker defaults)."""
    ka = kafka_admin()

    resource = ka.ConfigResource("topic", topic)
    entries = result(admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource])
    dynamic = ka.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    return {
        e.name: e.value
        for e in sorted(entries.values(), key=lambda e: e.name)
        if e.source == dynamic and e.value is not None
    }


def _broker_values(admin: Any, meta: Any) -> dict[str, str]:
    """The broker's ``table.topic.namespace`` and ``catalog.name``, or empty when they
    cannot be read (then the documented defaults apply)."""
    ka = kafka_admin()

    from floe.config.broker import CATALOG_NAME, TABLE_TOPIC_NAMESPACE

    if not meta.brokers:
        return {}
    resource = ka.ConfigResource("broker", str(min(meta.brokers)))
    try:
        entries = result(admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource])
    except Exception:  # a broker that does not describe its configs: use the defaults
        return {}
    wanted = (TABLE_TOPIC_NAMESPACE.name, CATALOG_NAME.name)
    return {n: entries[n].value for n in wanted if n in entries and entries[n].value}


def _table_topic(admin: Any, meta: Any, topic: str, configs: dict[str, str]) -> dict[str, Any]:
    """Whether the topic is a table topic, and its table as Spark SQL names it
    (``<catalog>.<namespace>.<table>``)."""
    from floe.config.broker import CATALOG_NAME
    from floe.config.tabletopic import resolve_table_topic
    from floe.errors import ConfigError
    from floe.tabletopic.convert.layout import table_identifier

    broker = _broker_values(admin, meta)
    try:
        resolved = resolve_table_topic(configs, broker)
    except ConfigError as exc:
        return {"enabled": False, "table": None, "error": str(exc)}
    if not resolved.enable:
        return {"enabled": False, "table": None}
    namespace, table = table_identifier(resolved.namespace, topic)
    catalog = broker.get(CATALOG_NAME.name, CATALOG_NAME.default)
    return {"enabled": True, "table": f"{catalog}.{namespace}.{table}"}


def _describe(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    meta = _metadata(admin)  # all topics: asking for one may auto-create it
    tmeta = meta.topics.get(args.topic)
    if tmeta is None or tmeta.error is not None or not tmeta.partitions:
        raise CliError(f"unknown topic {args.topic}")
    numbers = sorted(tmeta.partitions)

    def offsets(spec: Any) -> dict[int, int]:
        futures = admin.list_offsets(
            {TopicPartition(args.topic, p): spec for p in numbers}, request_timeout=TIMEOUT_S
        )
        return {tp.partition: result(f).offset for tp, f in futures.items()}

    start, end = offsets(offset_spec().earliest()), offsets(offset_spec().latest())
    partitions = [
        {
            "partition": p,
            "leader": tmeta.partitions[p].leader,
            "log_start": start[p],
            "log_end": end[p],
        }
        for p in numbers
    ]
    configs = _set_configs(admin, args.topic)
    table = _table_topic(admin, meta, args.topic, configs)
    header = [
        ("Topic:", args.topic),
        ("Partitions:", str(len(numbers))),
        ("Table topic:", "yes" if table["enabled"] else "no"),
        ("Table:", table["table"] or "-"),
    ]
    part_table: list[tuple[str, ...]] = [("PARTITION", "LEADER", "LOG-START", "LOG-END")]
    part_table += [
        (str(x["partition"]), str(x["leader"]), str(x["log_start"]), str(x["log_end"]))
        for x in partitions
    ]
    tables: list[list[tuple[str, ...]]] = [part_table]
    if configs:
        tables.append([("CONFIG", "VALUE"), *configs.items()])
    return {
        "topic": args.topic,
        "partitions": partitions,
        "configs": configs,
        "table_topic": table,
        "_header": header,
        "_tables": tables,
    }


def _alter(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    ka = kafka_admin()

    setting = _pairs(args.config, "--config")
    if not setting and not args.delete_config:
        raise CliError("nothing to alter: give --config KEY=VALUE or --delete-config KEY")
    entries = [
        ka.ConfigEntry(k, v, incremental_operation=ka.AlterConfigOpType.SET)
        for k, v in setting.items()
    ]
    entries += [
        ka.ConfigEntry(k, None, incremental_operation=ka.AlterConfigOpType.DELETE)
        for k in args.delete_config
    ]
    resource = ka.ConfigResource("topic", args.topic, incremental_configs=entries)
    result(admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource])
    rows = [(k, "set", v) for k, v in setting.items()]
    rows += [(k, "deleted", "-") for k in args.delete_config]
    return {
        "topic": args.topic,
        "set": setting,
        "deleted": list(args.delete_config),
        "_table": [("CONFIG", "CHANGE", "VALUE"), *rows],
    }


def _delete(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    futures = admin.delete_topics(
        [args.topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S
    )
    result(futures[args.topic])
    return {"topic": args.topic, "_table": [("TOPIC", "STATUS"), (args.topic, "deleted")]}
