"""``floe group``: list, describe and reset the offsets of consumer groups.

Every verb goes through the admin HTTP API (``/api/v1/groups``, the facade the console
uses too; see :mod:`floe.cli.api`) at ``--admin URL``. Output is an aligned text table
or, with ``--output json|yaml``, one document. Failures print one line on stderr and
exit 1.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime
from typing import Any

from floe.cli import api
from floe.cli.output import CliError

GROUPS = "/api/v1/groups"


def add_parser(sub: Any) -> None:
    """Register ``floe group`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    api.add_common(common)
    group = sub.add_parser("group", help="consumer groups: list, describe, reset offsets")
    verbs = group.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", parents=[common], help="list consumer groups and their states")
    describe = verbs.add_parser(
        "describe", parents=[common], help="members, assignments, committed offsets and lag"
    )
    describe.add_argument("group")
    reset = verbs.add_parser(
        "reset-offsets", parents=[common], help="move an empty group's committed offsets"
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
    verbs: dict[str, api.Verb] = {
        "list": lambda url, _: _list(url),
        "describe": lambda url, a: _describe(url, a.group),
        "reset-offsets": _reset,
    }
    return api.run_api(args, verbs[args.verb])


def _state(value: Any) -> str:
    """A state as Kafka's tools spell it: ``STABLE``, ``PREPARING_REBALANCE`` (the
    admin API says ``Stable``, ``PreparingRebalance``)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", str(value)).upper()


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


def _reset(url: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.to_earliest:
        body: dict[str, Any] = {"to": "earliest"}
    elif args.to_latest:
        body = {"to": "latest"}
    elif args.to_offset is not None:
        body = {"to": "offset", "value": args.to_offset}
    else:
        body = {"to": "timestamp", "value": _parse_datetime(args.to_datetime)}
    body.update(topic=args.topic, partition=args.partition, dry_run=bool(args.dry_run))
    done = api.fetch(url, f"{GROUPS}/{api.segment(args.group)}/offsets/reset", "POST", body)
    rows = done["partitions"]
    table = [("TOPIC", "PARTITION", "PREVIOUS", "NEW")]
    table += [(r["topic"], str(r["partition"]), _dash(r["previous"]), str(r["new"])) for r in rows]
    return {
        "group": args.group,
        "dry_run": bool(args.dry_run),
        "partitions": rows,
        "_header": [("Group:", args.group), ("Dry run:", "yes" if args.dry_run else "no")],
        "_tables": [table],
    }
