"""``floe table status [TOPIC]``: table-topic status from a running broker's admin API.

It asks ``GET /api/v1/tables`` (or ``/api/v1/tables/TOPIC``) at ``--admin URL``, by
default ``cli.admin``, else ``http://<admin.host>:<admin.port>`` from the same
configuration ``floe up`` loads (``floe.toml`` or ``--config FILE``, ``FLOE_*``; see
:mod:`floe.cli.connect`). It prints a header block per topic and one row per partition,
or with ``--output json|yaml`` the API's document unchanged.
Failures are one line on stderr and exit code 1: an unreachable API
(``floe: cannot reach the admin API at URL: connection refused``), or the API's error
message (``floe: error: topic 'x' is not a table topic``).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

from floe.cli import connect
from floe.cli.output import CliError, add_output, dump, fail, print_table

TIMEOUT_S = 30.0


class UnreachableError(Exception):
    """No connection to the admin API (printed without the ``error:`` label)."""


def add_parser(sub: Any) -> None:
    """Register ``floe table`` and its verbs on the top-level subparsers."""
    table = sub.add_parser("table", help="table topics: status")
    verbs = table.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser(
        "status", help="committed offsets, lag, last commit and errors of table topics"
    )
    status.add_argument("topic", nargs="?", help="one table topic (default: all)")
    connect.add_connection(status, admin=True)
    add_output(status)


def run(args: argparse.Namespace) -> int:
    """Run ``floe table status``; returns the exit code."""
    try:
        url = connect.admin(args)
        path = "/api/v1/tables" + (f"/{quote(args.topic, safe='')}" if args.topic else "")
        doc = fetch(url, path)
    except UnreachableError as exc:
        print(f"floe: {exc}", file=sys.stderr)
        return 1
    except CliError as exc:
        return fail(args, exc)
    if args.output != "table":
        print(dump(doc, args.output))
        return 0
    tables = doc["tables"] if args.topic is None else [doc]
    if not tables:
        print("no table topics")
    for i, status in enumerate(tables):
        if i:
            print()
        print_status(status)
    return 0


def fetch(url: str, path: str) -> Any:
    """GET ``url + path`` and decode its JSON.

    Raises:
        UnreachableError: no connection (refused, timeout, unknown host).
        CliError: an error answer (its ``message``) or a body that is not JSON.
    """
    try:
        with urllib.request.urlopen(url + path, timeout=TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise CliError(_error_message(exc)) from None
    except urllib.error.URLError as exc:
        raise UnreachableError(
            f"cannot reach the admin API at {url}: {_reason(exc.reason)}"
        ) from None
    except OSError as exc:  # timeouts while reading, resets
        raise UnreachableError(f"cannot reach the admin API at {url}: {_reason(exc)}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise CliError(f"the admin API at {url} answered something that is not JSON") from None


def _reason(reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(exc.read())["message"]
    except Exception:
        return f"HTTP {exc.code} {exc.reason}"
    return str(message).splitlines()[0] if message else f"HTTP {exc.code}"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_status(s: dict[str, Any]) -> None:
    """One topic: a header block, then one row per partition."""
    cfg = s["settings"]
    commit = "-"
    if s["last_commit_id"] is not None:
        details = [s["last_commit_id"]]
        if s["last_commit_duration_s"] is not None:
            details.append(f"{s['last_commit_duration_s']:.2f} s")
        if s["last_commit_rows"] is not None:
            details.append(f"{s['last_commit_rows']} rows")
        if s["last_commit_files"] is not None:
            details.append(f"{s['last_commit_files']} files")
        commit = f"{_or_dash(s['last_commit_time'])} ({', '.join(details)})"
    header = [
        ("Topic:", s["topic"]),
        ("Table:", f"{s['table']} (Spark SQL: {s['catalog_table']})"),
        ("Status:", s["status"] + ("" if s["enabled"] else " (table.topic.enable=false)")),
        (
            "Settings:",
            f"commit every {cfg['commit_interval_ms'] / 1000:g} s, "
            f"value {cfg['convert_value_type']}, key {cfg['convert_key_type']}, "
            f"transform {cfg['transform_value_type']}, tolerance {cfg['errors_tolerance']}",
        ),
        ("Last commit:", commit),
        ("Rounds:", f"{s['rounds']} since the broker started"),
        ("Snapshots:", _or_dash(s["snapshots"])),
        ("Skipped:", f"{s['skipped_records']} bad records"),
        ("Lost:", f"{s['lost_records']} records deleted before they were materialized"),
        ("Last error:", _or_dash(s["last_error"])),
    ]
    if s.get("table_error"):
        header.append(("Table error:", s["table_error"]))
    width = max(len(k) for k, _ in header)
    for k, v in header:
        print(f"{k:<{width}} {v}")
    print()
    rows: list[tuple[str, ...]] = [("PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS")]
    rows += [
        (
            str(p["partition"]),
            _or_dash(p["committed_offset"]),
            str(p["log_end_offset"]),
            _or_dash(p["lag_records"]),
            _seconds(p["lag_seconds"]),
        )
        for p in s["partitions"]
    ]
    print_table(rows)
