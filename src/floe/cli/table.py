"""``floe table status [TOPIC]`` and ``floe table maintain TOPIC [--now]``: table-topic
status from a running broker's admin API, and its maintenance (the last run and the next,
or with ``--now`` a run now: ``POST /api/v1/tables/TOPIC/maintenance``).

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
import sys
from typing import Any

from floe.cli import connect
from floe.cli.api import UnreachableError, fetch, segment
from floe.cli.output import CliError, add_output, dump, fail, print_table
from floe.tabletopic.model import MaintenanceResult

MAINTAIN_TIMEOUT_S = 3600.0
"""How long ``--now`` waits for the run (a large table's compaction takes minutes)."""


def add_parser(sub: Any) -> None:
    """Register ``floe table`` and its verbs on the top-level subparsers."""
    table = sub.add_parser("table", help="table topics: status, maintenance")
    verbs = table.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser(
        "status", help="committed offsets, lag, last commit and errors of table topics"
    )
    status.add_argument("topic", nargs="?", help="one table topic (default: all)")
    connect.add_connection(status, admin=True)
    add_output(status)
    maintain = verbs.add_parser(
        "maintain",
        help="a table's maintenance: the last run and the next; --now runs it now "
        "(compaction, snapshot expiry, orphan files, manifests) and waits for it",
    )
    maintain.add_argument("topic", help="the table topic")
    maintain.add_argument("--now", action="store_true", help="run the maintenance now")
    connect.add_connection(maintain, admin=True)
    add_output(maintain)


def run(args: argparse.Namespace) -> int:
    """Run ``floe table status|maintain``; returns the exit code."""
    try:
        doc = _ask(args)
    except UnreachableError as exc:
        print(f"floe: {exc}", file=sys.stderr)
        return 1
    except CliError as exc:
        return fail(args, exc)
    if args.verb == "maintain":
        return _print_maintenance(args, doc)
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


def _ask(args: argparse.Namespace) -> Any:
    """The admin API's answer for the verb.

    Raises:
        UnreachableError: no connection.
        CliError: an error answer.
    """
    url = connect.admin(args)
    path = "/api/v1/tables" + (f"/{segment(args.topic)}" if args.topic else "")
    if args.verb != "maintain":
        return fetch(url, path)
    if args.now:
        return fetch(url, path + "/maintenance", "POST", {}, timeout_s=MAINTAIN_TIMEOUT_S)
    return fetch(url, path)["maintenance"]


def _print_maintenance(args: argparse.Namespace, doc: Any) -> int:
    if args.output != "table":
        print(dump(doc, args.output))
    elif args.now:
        effect = MaintenanceResult(**doc).describe()
        print(f"maintained {args.topic} in {doc['duration_s']:.1f} s: {effect}")
    else:
        every = doc["interval_ms"]
        rows = [
            ("Schedule:", f"every {every / 1000:g} s" if every else "none (--now only)"),
            (
                "Last run:",
                _or_dash(doc["last_run_time"])
                + ("" if doc["last"] is None else f" ({doc['last_duration_s']:.1f} s)"),
            ),
            ("Effect:", _or_dash(doc["last_effect"])),
            ("Running:", "yes" if doc["running"] else "no"),
            ("Next run:", _or_dash(doc["next_run_time"])),
            ("Last error:", _or_dash(doc["error"])),
        ]
        width = max(len(k) for k, _ in rows)
        for k, v in rows:
            print(f"{k:<{width}} {v}")
    return 0


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _rows_mode(cfg: dict[str, Any]) -> str:
    """``append-only``, or how rows are upserted (``upsert by [id], deletes: op = D``)."""
    if not cfg.get("upsert"):
        return "append-only"
    ids = f"[{', '.join(cfg['id_columns'])}]"
    deletes = f"{cfg['cdc_field']} starting with D" if cfg["cdc_field"] else "tombstones"
    return f"upsert by {ids}, deletes: {deletes}"


def _partitioning(spec: str | None, configured: str) -> str:
    """The table's spec, and the configured one while the next round has yet to apply
    it."""
    shown = "-" if spec is None else "no" if spec == "[]" else f"by {spec}"
    if configured and configured != spec:
        shown += f" (partition.by {configured} from the next round)"
    return shown


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
        ("Partitioned:", _partitioning(s["partition_spec"], cfg["partition_by"])),
        ("Rows:", _rows_mode(cfg)),
        ("Snapshots:", _or_dash(s["snapshots"])),
        ("Skipped:", f"{s['skipped_records']} bad records"),
        ("Lost:", f"{s['lost_records']} records that never reached the table"),
        ("Last error:", _or_dash(s["last_error"])),
    ]
    if s.get("note"):
        header.append(("Note:", s["note"]))
    if s.get("warning"):
        header.append(("Warning:", s["warning"]))
    for p in s["partitions"]:
        if p.get("error"):
            header.append((f"Partition {p['partition']}:", p["error"]))
    if s.get("table_error"):
        header.append(("Table error:", s["table_error"]))
    width = max(len(k) for k, _ in header)
    for k, v in header:
        print(f"{k:<{width}} {v}")
    print()
    rows: list[tuple[str, ...]] = [
        ("PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS", "HELD-BYTES")
    ]
    rows += [
        (
            str(p["partition"]),
            _or_dash(p["committed_offset"]),
            str(p["log_end_offset"]),
            _or_dash(p["lag_records"]),
            _seconds(p["lag_seconds"]),
            str(p.get("retention_held_bytes", 0)),
        )
        for p in s["partitions"]
    ]
    print_table(rows)
    if s.get("routes"):  # route.by=record_name: one table per record type
        print()
        routes: list[tuple[str, ...]] = [
            ("RECORD", "TABLE", "STATUS", "COMMITTED", "LAG", "ROUNDS", "SKIPPED", "LOST")
        ]
        routes += [
            (
                r["record"],
                r["catalog_table"],
                r["status"],
                ",".join(
                    f"{p['partition']}:{_or_dash(p['committed_offset'])}" for p in r["partitions"]
                ),
                str(sum(p["lag_records"] or 0 for p in r["partitions"])),
                str(r["rounds"]),
                str(r["skipped_records"]),
                str(r["lost_records"]),
            )
            for r in s["routes"]
        ]
        print_table(routes)
