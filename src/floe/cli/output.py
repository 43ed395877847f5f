"""How every ``floe`` read command prints, and how every command fails.

``--output table`` (the default) is for people: aligned text. ``--output json`` and
``--output yaml`` are for programs: the same document in either syntax (``yaml`` is
PyYAML's ``safe_dump``, so ``yaml.safe_load`` gives back what ``json.loads`` would).
A verb returns one document; keys starting with ``_`` are its text rendering
(``_header`` lines, ``_table`` or ``_tables``) and are left out of JSON and YAML.

Failures are one line on stderr (``floe: error: ...``) and a non-zero exit code; the
global ``--debug`` flag adds the stack trace.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import traceback
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

OUTPUTS = ("table", "json", "yaml")


class CliError(Exception):
    """A failure worth one line on stderr."""


def add_output(parser: argparse.ArgumentParser) -> None:
    """``--output table|json|yaml`` (default table)."""
    parser.add_argument(
        "--output", "-o", choices=OUTPUTS, default="table", help="table (default), json or yaml"
    )


def jsonable(value: Any) -> Any:
    """A decoded value as JSON/YAML data: ISO-8601 times, base64 bytes, decimals as
    strings (no precision lost), containers converted recursively."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def dump(data: Any, output: str) -> str:
    """``data`` (JSON-able) as indented JSON or block-style YAML, without a final newline."""
    if output == "yaml":
        import yaml

        text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        return text.rstrip("\n")
    return json.dumps(data, indent=2, ensure_ascii=False)


def emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Print a verb's document in ``args.output``."""
    if args.output != "table":
        print(dump({k: v for k, v in doc.items() if not k.startswith("_")}, args.output))
        return
    header = doc.get("_header", [])
    if header:
        width = max(len(k) for k, _ in header)
        for k, v in header:
            print(f"{k:<{width}} {v}")
        print()
    tables = doc.get("_tables") or [doc["_table"]]
    for i, table in enumerate(tables):
        if i:
            print()
        print_table(table)


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows of cells, left-aligned in columns two spaces apart; the first is the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def error_message(exc: BaseException) -> str:
    """``NAME: broker message`` for a KafkaException, else the exception's first line."""
    err = exc.args[0] if exc.args else None
    name, text = getattr(err, "name", None), getattr(err, "str", None)
    if callable(name) and callable(text):
        return f"{name()}: {text()}".splitlines()[0]
    return (str(exc) or type(exc).__name__).splitlines()[0]


def fail(args: argparse.Namespace, exc: BaseException, prefix: str = "floe: error") -> int:
    """Print ``exc`` as one line (with its stack trace under ``--debug``); returns 1.

    Raises:
        BrokenPipeError: ``exc`` itself: the output's reader went away, which
            :func:`floe.cli.main.main` ends quietly.
    """
    if isinstance(exc, BrokenPipeError):
        raise exc
    if getattr(args, "debug", False):
        traceback.print_exception(exc)
    print(f"{prefix}: {error_message(exc)}", file=sys.stderr)
    return 1
