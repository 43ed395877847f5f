"""What the commands that use confluent-kafka's AdminClient share: ``floe user`` and
``floe acl`` (Kafka's own APIs for them) and ``floe demo``'s topic creation. Everything
else goes through the admin API (:mod:`floe.cli.api`).

Each verb is a function ``(admin, args) -> document``; :func:`run_admin` creates the
client for the brokers :func:`floe.cli.connect.brokers` names, runs the verb, prints the
document (:func:`floe.cli.output.emit`: a table, JSON or YAML) and turns every failure
into one line on stderr and exit code 1 — a broker's refusal keeps its error name and
message (``INVALID_CONFIG: ...``). confluent-kafka is imported lazily so other commands
do not pay for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from floe.cli import connect
from floe.cli.output import CliError, add_output, emit, fail

TIMEOUT_S = 15.0

Verb = Callable[[Any, argparse.Namespace], dict[str, Any]]


def add_common(
    parser: argparse.ArgumentParser, config_flags: tuple[str, ...] = ("--config", "-c")
) -> None:
    """``--brokers``, the config file flag and ``--output``: every AdminClient verb has them."""
    connect.add_connection(parser, brokers=True, config_flags=config_flags)
    add_output(parser)


def run_admin(args: argparse.Namespace, verb: Verb) -> int:
    """Run ``verb`` against the brokers and print its document; returns the exit code."""
    try:
        brokers = connect.brokers(args)
        settings = connect.client_settings(args)
    except CliError as exc:
        return fail(args, exc)
    try:
        emit(args, verb(admin_client(brokers, settings), args))
    except TimeoutError:
        return fail(args, CliError(f"no answer from {brokers} within {TIMEOUT_S:g} s"))
    except Exception as exc:  # CliError, librdkafka errors: one line, no stack trace
        return fail(args, exc)
    return 0


def admin_client(brokers: str, settings: dict[str, str] | None = None) -> Any:
    """An AdminClient for ``brokers``; ``settings``: more client properties (security)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": brokers, "log_level": 0, **(settings or {})})


def kafka_admin() -> Any:
    """confluent_kafka.admin (its names are not re-exported for mypy, hence Any)."""
    import confluent_kafka.admin

    return confluent_kafka.admin


def result(future: Any) -> Any:
    return future.result(TIMEOUT_S)
