"""``floe group``: list, describe and reset the offsets of consumer groups.

``list`` and ``describe`` go through the admin HTTP API (``/api/v1/groups``, the facade
the console uses too; see :mod:`floe.cli.api`) at ``--admin URL``. ``reset-offsets``
has no admin API endpoint yet, so it still talks to the brokers (``--brokers``) through
confluent-kafka's AdminClient (:mod:`floe.cli.admin`, imported lazily). Output is an
aligned text table or, with ``--output json|yaml``, one document. Failures print one
line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from floe.cli import api
from floe.cli.admin import TIMEOUT_S, add_common, offset_spec, result, run_admin
from floe.cli.output import CliError

GROUPS = "/api/v1/groups"

RESETTABLE_STATES = ("EMPTY", "DEAD")
"""Kafka's rule: offsets are reset only when no member is consuming."""


def add_parser(sub: Any) -> None:
    """Register ``floe group`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    api.add_common(common)
    brokers = argparse.ArgumentParser(add_help=False)
    add_common(brokers)
    group = sub.add_parser("group", help="consumer groups: list, describe, reset offsets")
    verbs = group.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", parents=[common], help="list consumer groups and their states")
    describe = verbs.add_parser(
        "describe", parents=[common], help="members, assignments, committed offsets and lag"
    )
    describe.add_argument("group")
    reset = verbs.add_parser(
        "reset-offsets", parents=[brokers], help="move an empty group's committed offsets"
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partition", type=int, help="only this partition (default: all)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument("--to-datetime", metavar="ISO", help="e.g. 2026-01-31T12:00:00Z")
    reset.add_argument("--dry-run", action="store_true", help="show the new offsets only")


def run(args: argparse.Namespace) -> int:
    """Run one ``floe group`` verb; returns the exit code."""
    if args.verb == "reset-offsets":
        return run_admin(args, _reset)
    verbs: dict[str, api.Verb] = {
        "list": lambda url, _: _list(url),
        "describe": lambda url, a: _describe(url, a.group),
    }
    return api.run_api(args, verbs[args.verb])


def _state(value: Any) -> str:
    """A state as Kafka's tools spell it: ``STABLE``, ``PREPARING_REBALANCE`` (the
    admin API says ``Stable``, ``PreparingRebalance``; AdminClient has enum names)."""
    name = str(getattr(value, "name", value))
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).upper()


def _list(url: str) -> dict[str, Any]:
    groups = [
        {"group": g["group"], "state": _state(g["state"]), "simple": not g["protocol_type"]}
        for g in api.fetch(url, GROUPS)["groups"]
    ]
    return {
        "groups": groups,
        "_table": [
            ("GROUP", "STATE", "SIMPLE"),
            *((g["group"], g["state"], "yes" if g["simple"] else "no") for g in groups),
        ],
    }


def _committed(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )
    committed = result(futures[group])
    return {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions}


def _offsets(admin: Any, partitions: Sequence[tuple[str, int]], spec: Any) -> dict[Any, int]:
    from confluent_kafka import TopicPartition

    if not partitions:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): spec for t, p in partitions}, request_timeout=TIMEOUT_S
    )
    return {(tp.topic, tp.partition): result(f).offset for tp, f in futures.items()}


def _describe(url: str, group: str) -> dict[str, Any]:
    detail = api.fetch(url, f"{GROUPS}/{api.segment(group)}")
    members = [
        {
            "member_id": m["member_id"],
            "client_id": m["client_id"],
            "host": m["client_host"],
            "instance_id": m["instance_id"],
            "assignment": m["assignment"],
        }
        for m in detail["members"]
    ]
    partitions = [
        {
            "topic": p["topic"],
            "partition": p["partition"],
            "committed": p["committed_offset"],
            "log_end": p["log_end_offset"],
            "lag": p["lag"],
            "member": p["member_id"],
        }
        for p in detail["partitions"]
    ]
    state = _state(detail["state"])
    header = [
        ("Group:", group),
        ("State:", state),
        ("Assignor:", detail["protocol"] or "-"),
        ("Members:", str(len(members))),
    ]
    table = [("TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "MEMBER")]
    table += [
        (
            x["topic"],
            str(x["partition"]),
            _dash(x["committed"]),
            _dash(x["log_end"]),
            _dash(x["lag"]),
            _dash(x["member"]),
        )
        for x in partitions
    ]
    member_table = [("MEMBER", "CLIENT-ID", "HOST", "ASSIGNMENT")]
    member_table += [
        (m["member_id"], m["client_id"], m["host"], ",".join(m["assignment"]) or "-")
        for m in members
    ]
    return {
        "group": group,
        "state": state,
        "assignor": detail["protocol"] or None,
        "members": members,
        "partitions": partitions,
        "_header": header,
        "_tables": [member_table, table] if members else [table],
    }


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time (UTC when no zone is given).

    Raises:
        CliError: not an ISO-8601 date-time.
    """
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-datetime: not an ISO-8601 date-time: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _reset(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    desc = result(
        admin.describe_consumer_groups([args.group], request_timeout=TIMEOUT_S)[args.group]
    )
    state = _state(desc.state)
    if state not in RESETTABLE_STATES:
        raise CliError(
            f"group {args.group} is {state}: stop its consumers first "
            "(offsets can only be reset for an empty group)"
        )
    meta = admin.list_topics(topic=args.topic, timeout=TIMEOUT_S).topics.get(args.topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise CliError(f"unknown topic {args.topic}")
    numbers = sorted(meta.partitions)
    if args.partition is not None:
        if args.partition not in meta.partitions:
            raise CliError(f"topic {args.topic} has no partition {args.partition}")
        numbers = [args.partition]
    parts = [(args.topic, p) for p in numbers]
    earliest = _offsets(admin, parts, offset_spec().earliest())
    latest = _offsets(admin, parts, offset_spec().latest())
    if args.to_earliest:
        target = earliest
    elif args.to_latest:
        target = latest
    elif args.to_offset is not None:
        target = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in parts}
    else:
        found = _offsets(
            admin, parts, offset_spec().for_timestamp(_parse_datetime(args.to_datetime))
        )
        target = {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in parts}
    current = _committed(admin, args.group)
    if not args.dry_run:
        request = ConsumerGroupTopicPartitions(
            args.group, [TopicPartition(t, p, target[(t, p)]) for t, p in parts]
        )
        altered = result(
            admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[args.group]
        )
        for tp in altered.topic_partitions:
            if tp.error is not None:
                raise CliError(f"{tp.topic}-{tp.partition}: {tp.error.str()}")
    rows = [
        {
            "topic": t,
            "partition": p,
            "previous": current.get((t, p)) if current.get((t, p), -1) >= 0 else None,
            "new": target[(t, p)],
        }
        for t, p in parts
    ]
    table = [("TOPIC", "PARTITION", "PREVIOUS", "NEW")]
    table += [(r["topic"], str(r["partition"]), _dash(r["previous"]), str(r["new"])) for r in rows]
    return {
        "group": args.group,
        "dry_run": bool(args.dry_run),
        "partitions": rows,
        "_header": [("Group:", args.group), ("Dry run:", "yes" if args.dry_run else "no")],
        "_tables": [table],
    }
