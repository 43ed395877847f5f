"""What the AdminClient-based commands (``floe group``, ``floe topic``) share.

Each verb is a function ``(admin, args) -> document``; :func:`run_admin` creates the
client, runs the verb, prints the document (an aligned text table, or JSON with
``--output json``) and turns every failure into one line on stderr and exit code 1 —
a broker's refusal keeps its error name and message (``INVALID_CONFIG: ...``).
confluent-kafka is imported lazily so other commands do not pay for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_BROKERS = "127.0.0.1:9092"
TIMEOUT_S = 15.0

Verb = Callable[[Any, argparse.Namespace], dict[str, Any]]


class CliError(Exception):
    """A failure worth one line on stderr."""


def run_admin(args: argparse.Namespace, verb: Verb) -> int:
    """Run ``verb`` against ``args.brokers`` and print its document; returns the exit code."""
    try:
        emit(args, verb(admin_client(args.brokers), args))
    except CliError as exc:
        print(f"floe: error: {exc}", file=sys.stderr)
        return 1
    except TimeoutError:
        print(f"floe: error: no answer from {args.brokers} within {TIMEOUT_S:g} s", file=sys.stderr)
        return 1
    except Exception as exc:  # librdkafka errors: one line, no stack trace
        print(f"floe: error: {error_message(exc)}", file=sys.stderr)
        return 1
    return 0


def error_message(exc: Exception) -> str:
    """``NAME: broker message`` for a KafkaException, else the exception's text."""
    err = exc.args[0] if exc.args else None
    name, text = getattr(err, "name", None), getattr(err, "str", None)
    if callable(name) and callable(text):
        return f"{name()}: {text()}".splitlines()[0]
    return (str(exc) or type(exc).__name__).splitlines()[0]


def admin_client(brokers: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": brokers, "log_level": 0})


def kafka_admin() -> Any:
    """confluent_kafka.admin (its names are not re-exported for mypy, hence Any)."""
    import confluent_kafka.admin

    return confluent_kafka.admin


def offset_spec() -> Any:
    """confluent-kafka's OffsetSpec (untyped, hence Any)."""
    return kafka_admin().OffsetSpec


def result(future: Any) -> Any:
    return future.result(TIMEOUT_S)


def emit(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Print a verb's document: keys starting with ``_`` are the text rendering
    (``_header`` lines, ``_table`` or ``_tables``), the others are the JSON."""
    if args.output == "json":
        print(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")}, indent=2))
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
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
