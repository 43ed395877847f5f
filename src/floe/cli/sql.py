"""``floe sql "SELECT ..."``: run Spark SQL against Floe's Iceberg catalog.

Starts a SparkSession in this process through :class:`SparkManager`, built from the
same configuration ``floe up`` would load (``floe.toml``, ``--data-dir``, ``--set``),
so it sees the same catalog (by default the embedded JDBC-SQLite catalog under the
data dir) and writes Spark's logs to ``<data.dir>/spark/spark.log``, never the console.

``--fresh`` asks the running broker instead (its admin API: ``--admin``, ``cli.admin``,
else the config's ``admin.*``): the table topics the statement reads include their
records not committed to the table yet, each exactly once (see docs/table-topics.md,
"Hybrid reads"). Only read-only statements, at most 10000 rows.

Output is an aligned text table, CSV (``--format csv``) or one JSON array of objects
(``--format json``: ISO-8601 timestamps, base64 binary, decimals as strings so no
precision is lost). Failures print one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import csv
import json
import sys
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from floe.cli.output import jsonable
from floe.errors import FloeError

MAX_CELL = 40
"""Text-table cells longer than this are cut, ending with an ellipsis."""
ELLIPSIS = "…"
NULL = "NULL"
MAX_FRESH_ROWS = 10000
"""The admin API's row limit (``--fresh``)."""


def add_parser(sub: Any) -> None:
    """Register ``floe sql`` on the top-level subparsers."""
    p = sub.add_parser("sql", help="run a Spark SQL statement against the Iceberg catalog")
    p.add_argument("statement", help='e.g. "SELECT * FROM floe.default.clicks"')
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--limit", type=int, metavar="N", help="print at most N rows")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="ask the running broker; table topics include records not committed yet",
    )
    p.add_argument("--admin", metavar="URL", help="admin API URL for --fresh (default: cli.admin)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="--fresh: seconds")
    p.add_argument("--config", "-c", help="config file (default ./floe.toml if present)")
    p.add_argument("--data-dir", help="data directory (data.dir)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any config key (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``floe sql``; returns the exit code."""
    if args.limit is not None and args.limit < 0:
        print("floe: error: --limit must be >= 0", file=sys.stderr)
        return 1
    try:
        columns, rows = _fresh(args) if args.fresh else _query(args)
    except FloeError as exc:  # ConfigError, SparkUnavailableError, SqlError
        print(f"floe: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the catalog database, the JVM: one line, no stack trace
        print(f"floe: error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    if args.format == "csv":
        write_csv(columns, rows)
    elif args.format == "json":
        print(to_json(columns, rows))
    elif columns:
        print(to_table(columns, rows))
    return 0


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """``--data-dir`` and ``--set`` as config overrides (``floe demo`` has them too).

    Raises:
    ConfigError: a ``--set`` item without ``=``.
    """
    from floe.errors import ConfigError

    out: dict[str, object] = {"data.dir": args.data_dir}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def _query(args: argparse.Namespace) -> tuple[list[str], list[tuple[Any, ...]]]:
    return query(args, [args.statement], args.limit)[0]


def _fresh(args: argparse.Namespace) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The statement run by the broker's admin API with ``fresh`` (rows as JSON values).

    Raises:
        FloeError: the API is unreachable or refused the statement (one line).
    """
    from floe.cli import api, connect
    from floe.cli.output import CliError

    args.config_file = args.config  # the admin address comes from the same config
    limit = MAX_FRESH_ROWS if args.limit is None else min(args.limit, MAX_FRESH_ROWS)
    if limit == 0:
        return [], []
    body = {"statement": args.statement, "limit": limit, "fresh": True, "timeout_s": args.timeout}
    try:
        answer = api.fetch(
            connect.admin(args), "/api/v1/sql", "POST", body, timeout_s=args.timeout + 5
        )
    except (CliError, api.UnreachableError) as exc:
        raise FloeError(str(exc)) from None
    if answer.get("truncated") and args.limit is None:
        print(f"floe: only the first {limit} rows are shown", file=sys.stderr)
    return list(answer["columns"]), [tuple(row) for row in answer["rows"]]


def query(
    args: argparse.Namespace, statements: Sequence[str], limit: int | None = None
) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
    """Run ``statements`` in one local SparkSession built from ``args.config``,
    ``args.data_dir`` and ``args.set`` (as ``floe up`` would load them); returns
    ``(columns, rows)`` per statement. ``floe demo`` uses it too.

    Raises:
        ConfigError: the configuration does not load.
        SparkUnavailableError: no Java 17.
        SqlError: a statement failed (one-line message).
    """
    from floe.config import broker as keys
    from floe.config import load_config
    from floe.tabletopic import catalog as cat
    from floe.tabletopic.spark import SparkManager
    from floe.tabletopic.spark.session import check_java
    from floe.tabletopic.spark.sql import run_sql

    config = load_config(args.config, overrides(args))
    manager = SparkManager.from_config(config)
    check_java()  # before touching the catalog: the commonest failure, said first
    catalog = cat.bootstrap(manager.settings.catalog)  # Spark never creates JDBC tables
    if catalog is not None:  # as under `floe up`: the default namespace exists
        cat.ensure_namespace(catalog, config[keys.TABLE_TOPIC_NAMESPACE])
    try:
        session = manager.session()
        return [run_sql(session, statement, limit) for statement in statements]
    finally:
        manager.stop_sync()


# -- rendering ------------------------------------------------------------------------


def render(value: Any) -> str:
    """A value as text (CSV cells and table cells before truncation); ``None`` is NULL."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list | dict):
        return json.dumps(jsonable(value), ensure_ascii=False)
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _cut(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + ELLIPSIS


def to_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """An aligned text table: headers, numbers right-aligned, long cells cut, NULLs."""
    cells = [[_cut(render(v)) for v in row] for row in rows]
    widths = [max([len(_cut(c)), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [
        any(_is_number(r[i]) for r in rows) and all(_is_number(r[i]) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(items: Sequence[str]) -> str:
        parts = [
            s.rjust(w) if right else s.ljust(w)
            for s, w, right in zip(items, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line([_cut(c) for c in columns]), line(["-" * w for w in widths])]
    out += [line(row_cells) for row_cells in cells]
    out.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


def write_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """CSV with a header row; NULL is an empty cell."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else render(v) for v in row])


def to_json(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """One JSON array of objects, keyed by column name."""
    return json.dumps(
        [{c: jsonable(v) for c, v in zip(columns, row, strict=True)} for row in rows],
        ensure_ascii=False,
    )
