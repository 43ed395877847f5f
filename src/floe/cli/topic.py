"""``floe topic``: create, list, describe, alter and delete topics.

Every verb goes through the admin HTTP API (``/api/v1/topics``, the facade the console
uses too; see :mod:`floe.cli.api`) at ``--admin URL``, by default ``cli.admin``, else
the server config's ``admin.*``. Output is an aligned text table or, with ``--output
json|yaml``, one document. Failures print one line on stderr and exit 1 with the API's
message (``floe: error: unknown topic 'x'``).

``--table`` is shorthand for ``table.topic.enable=true``. ``describe`` says whether a
topic is a table topic and names its Iceberg table as Spark SQL does
(``<catalog>.<namespace>.<table>``, from ``GET /api/v1/tables/TOPIC``).
"""

from __future__ import annotations

import argparse
from typing import Any

from floe.cli.api import Verb, add_common, fetch, run_api, segment
from floe.cli.output import CliError

TOPICS = "/api/v1/topics"


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
    verbs: dict[str, Verb] = {
        "create": _create,
        "list": _list,
        "describe": _describe,
        "alter": _alter,
        "delete": _delete,
    }
    return run_api(args, verbs[args.verb])


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


def _create(url: str, args: argparse.Namespace) -> dict[str, Any]:
    configs = _pairs(args.config, "--config")
    if args.table:
        configs["table.topic.enable"] = "true"
    body = {
        "name": args.topic,
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "configs": configs,
    }
    fetch(url, TOPICS, "POST", body)
    return {
        "topic": args.topic,
        "partitions": args.partitions,
        "configs": configs,
        "_table": [("TOPIC", "STATUS"), (args.topic, "created")],
    }


def _list(url: str, args: argparse.Namespace) -> dict[str, Any]:
    listed = fetch(url, TOPICS + ("?internal=true" if args.internal else ""))["topics"]
    topics = [{"topic": t["topic"], "partitions": t["partitions"]} for t in listed]
    return {
        "topics": topics,
        "_table": [
            ("TOPIC", "PARTITIONS"),
            *((t["topic"], str(t["partitions"])) for t in topics),
        ],
    }


def _table_topic(url: str, detail: dict[str, Any]) -> dict[str, Any]:
    """Whether the topic is a table topic, and its table as Spark SQL names it."""
    if not detail["table_topic"]:
        return {"enabled": False, "table": None}
    status = fetch(url, f"/api/v1/tables/{segment(detail['topic'])}")
    return {"enabled": True, "table": status["catalog_table"]}


def _describe(url: str, args: argparse.Namespace) -> dict[str, Any]:
    detail = fetch(url, f"{TOPICS}/{segment(args.topic)}")
    partitions = [
        {
            "partition": p["partition"],
            "leader": p["leader"],
            "log_start": p["log_start_offset"],
            "log_end": p["log_end_offset"],
        }
        for p in detail["partitions"]
    ]
    configs = dict(sorted(detail["overrides"].items()))
    table = _table_topic(url, detail)
    header = [
        ("Topic:", args.topic),
        ("Partitions:", str(len(partitions))),
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


def _alter(url: str, args: argparse.Namespace) -> dict[str, Any]:
    setting = _pairs(args.config, "--config")
    if not setting and not args.delete_config:
        raise CliError("nothing to alter: give --config KEY=VALUE or --delete-config KEY")
    body = {"set": setting, "delete": list(args.delete_config)}
    fetch(url, f"{TOPICS}/{segment(args.topic)}/configs", "PATCH", body)
    rows = [(k, "set", v) for k, v in setting.items()]
    rows += [(k, "deleted", "-") for k in args.delete_config]
    return {
        "topic": args.topic,
        "set": setting,
        "deleted": list(args.delete_config),
        "_table": [("CONFIG", "CHANGE", "VALUE"), *rows],
    }


def _delete(url: str, args: argparse.Namespace) -> dict[str, Any]:
    fetch(url, f"{TOPICS}/{segment(args.topic)}", "DELETE")
    return {"topic": args.topic, "_table": [("TOPIC", "STATUS"), (args.topic, "deleted")]}
