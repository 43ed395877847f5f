"""The ``floe`` command line: ``floe up`` and ``floe config`` here, every other command
in its own module (``floe.cli.<command>``) with ``add_parser`` and ``run``.

Errors are one line on stderr and a non-zero exit code; ``floe --debug ...`` (or
``--debug`` after the command) adds the stack trace. docs/cli.md is generated from this
parser (``python -m floe.cli.reference``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from floe import __version__
from floe.cli import (
    acl,
    bench,
    cluster,
    completion,
    consume,
    demo,
    dev,
    dlq,
    group,
    produce,
    schema,
    sql,
    table,
    topic,
    user,
)
from floe.cli.output import fail
from floe.config import load_config
from floe.config.broker import BROKER_KEYS
from floe.config.loader import looks_sensitive
from floe.errors import ConfigError, FloeError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="floe", description="Floe: Kafka-compatible streaming with Iceberg table topics."
    )
    parser.add_argument("--version", action="version", version=f"floe {__version__}")
    parser.add_argument("--debug", action="store_true", help="print stack traces of errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def server_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", "-c", help="config file (default ./floe.toml if present)")
        p.add_argument("--data-dir", help="data directory (data.dir)")
        p.add_argument("--host", help="interface to bind (host)")
        p.add_argument("--kafka-port", type=int, help="Kafka listener port (kafka.port)")
        p.add_argument("--advertised-host", help="host given to clients (advertised.host)")
        p.add_argument(
            "--advertised-port", type=int, help="port given to clients (advertised.port)"
        )
        p.add_argument(
            "--log-format", choices=("text", "json"), help="stderr log lines (log.format)"
        )
        p.add_argument(
            "--log-level",
            metavar="LEVEL[,LOGGER=LEVEL...]",
            help="Floe's log level, then per logger family (log.level): INFO,pyiceberg=DEBUG",
        )
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="set any config key (repeatable)",
        )

    up = sub.add_parser("up", help="run Floe in the foreground until Ctrl-C / SIGTERM")
    server_options(up)
    cfg = sub.add_parser("config", help="print the effective configuration and its sources")
    server_options(cfg)
    cfg.add_argument("--docs", action="store_true", help="also print each key's description")
    topic.add_parser(sub)
    produce.add_parser(sub)
    consume.add_parser(sub)
    group.add_parser(sub)
    schema.add_parser(sub)
    sql.add_parser(sub)
    table.add_parser(sub)
    dlq.add_parser(sub)
    cluster.add_parser(sub)
    user.add_parser(sub)
    acl.add_parser(sub)
    bench.add_parser(sub)
    demo.add_parser(sub)
    dev.add_parser(sub)
    completion.add_parser(sub)
    return parser


class _Parser(argparse.ArgumentParser):
    """Every subcommand (and verb) also takes ``--debug`` after it: ``floe topic list
    --debug``. Its default is suppressed so it never resets a ``floe --debug`` given first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("add_help", True):
            self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {
        "data.dir": args.data_dir,
        "host": args.host,
        "kafka.port": args.kafka_port,
        "advertised.host": args.advertised_host,
        "advertised.port": args.advertised_port,
        "log.format": args.log_format,
        "log.level": args.log_level,
    }
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


MASK = "********"
"""What ``floe config`` prints instead of a sensitive value."""


def _print_config(args: argparse.Namespace) -> None:
    config = load_config(args.config, _overrides(args))
    width = max(len(k.name) for k in BROKER_KEYS)
    for key in BROKER_KEYS:
        value = key.render(config.values[key.name])
        if key.sensitive and value:
            value = MASK
        print(f"{key.name:<{width}}  {value:<24} ({config.sources[key.name]})")
        if args.docs:
            print(f"{'':<{width}}  {key.doc}")
    for name, raw in sorted(config.passthrough.items()):  # [spark] and [catalog.*] tables
        value = MASK if looks_sensitive(name, raw) else raw
        print(f"{name:<{width}}  {value:<24} ({config.sources[name]})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``floe`` command; returns its exit code. A reader that goes away before
    the output ends (``floe config --docs | head``) stops the command quietly, as any
    Unix tool: exit 141 (SIGPIPE's), no traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # what is still buffered for stdout must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # its options belong to the harness: pass them through
        return bench.main(argv[1:])
    args = build_parser().parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "topic": topic.run,
        "produce": produce.run,
        "consume": consume.run,
        "group": group.run,
        "schema": schema.run,
        "sql": sql.run,
        "table": table.run,
        "dlq": dlq.run,
        "cluster": cluster.run,
        "user": user.run,
        "acl": acl.run,
        "demo": demo.run,
        "dev": dev.run,
        "completion": lambda a: completion.run(a, build_parser()),
    }
    if args.command in commands:
        try:
            return commands[args.command](args)
        except KeyboardInterrupt:
            print("floe: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            raise
        except Exception as exc:  # whatever a command did not expect: still one line
            return fail(args, exc)
    try:
        if args.command == "config":
            _print_config(args)
            return 0
        config = load_config(args.config, _overrides(args))
    except ConfigError as exc:
        print(f"floe: error: {exc}", file=sys.stderr)
        return 2
    from floe.app import run

    try:
        run(config)
    except OSError as exc:
        print(f"floe: error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except FloeError as exc:  # the storage cannot be opened (a bucket missing or unreachable)
        print(f"floe: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
