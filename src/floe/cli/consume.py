"""``floe consume TOPIC``: print records, decoded through the Schema Registry.

Where to start: new records only (default), ``--from-beginning``, or ``--offset N``, on
every partition or ``--partition P``. With ``--group G`` the consumer joins the group
(subscribing, or with ``--partition``/``--offset`` assigning), starts from the group's
committed offsets (``--from-beginning``: the earliest ones when it has none) and
commits what it printed.

When to stop: after ``-n N`` records; at the end of every partition with
``--exit-on-end``; never (until Ctrl-C) with ``--follow``. Without either flag it
follows when stdout is a terminal and exits at the end otherwise, so
``floe consume t --from-beginning | wc -l`` and scripts terminate while a person
watching gets a tail.

Decoding (``--format``, :class:`floe.cli.serde.Decoder`): ``auto`` (default) decodes
the registry's wire format by the schema id's type and prints anything else as UTF-8
text, else ``hex:...``. Output: ``--output json`` is one object per line (``topic``,
``partition``, ``offset``, ``timestamp`` in ms, ``key``, ``value``, ``headers`` as a
list of ``{key, value}``); ``yaml`` is one list item per record (a YAML list as a
whole); ``table`` is one aligned line per record.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from floe.cli import connect, serde
from floe.cli.output import CliError, add_output, dump, error_message, fail

DEFAULT_TIMEOUT_S = 15.0
POLL_S = 0.2
MAX_CELL = 60


def add_parser(sub: Any) -> None:
    """Register ``floe consume`` on the top-level subparsers."""
    p = sub.add_parser("consume", help="print records, decoded through the Schema Registry")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N")
    p.add_argument("--partition", "-p", type=int, help="only this partition")
    p.add_argument("--group", "-g", metavar="G", help="consume as group G and commit")
    p.add_argument("-n", "--num", type=int, metavar="N", help="stop after N records")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--exit-on-end", "-e", action="store_true", help="stop at the end")
    stop.add_argument("--follow", action="store_true", help="wait for new records (Ctrl-C)")
    p.add_argument(
        "--format", "-f", choices=serde.DECODINGS, default="auto", help="decoding (auto)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"give up on the brokers after S seconds ({DEFAULT_TIMEOUT_S:g})",
    )
    connect.add_connection(p, brokers=True, registry=True)
    add_output(p)


def run(args: argparse.Namespace) -> int:
    """Run ``floe consume``; returns the exit code."""
    try:
        if args.num is not None and args.num < 0:
            raise CliError("-n must be >= 0")
        _consume(args, _printer(args.output))
    except KeyboardInterrupt:
        return 0  # the way to stop --follow
    except Exception as exc:  # CliError, librdkafka and registry errors: one line
        return fail(args, exc)
    return 0


def _printer(output: str) -> Callable[[dict[str, Any]], None]:
    if output == "json":
        return lambda record: print(json.dumps(record, ensure_ascii=False), flush=True)
    if output == "yaml":
        return lambda record: print(dump([record], "yaml"), flush=True)
    header = [f"{'PARTITION':<9}  {'OFFSET':<8}  {'TIMESTAMP':<23}  {'KEY':<16}  VALUE"]

    def line(r: dict[str, Any]) -> None:
        while header:  # before the first record, so errors come without one
            print(header.pop())
        when = datetime.fromtimestamp(r["timestamp"] / 1000, UTC).isoformat(timespec="milliseconds")
        key, value = _cell(r["key"]), _cell(r["value"])
        print(
            f"{r['partition']:<9}  {r['offset']:<8}  {when[:23]:<23}  {key:<16}  {value}",
            flush=True,
        )

    return line


def _cell(value: Any) -> str:
    text = "-" if value is None else value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _consume(args: argparse.Namespace, emit: Callable[[dict[str, Any]], None]) -> None:
    """Raises:
    CliError: an unreachable broker, an unknown topic or partition, a consume error.
    """
    from confluent_kafka import (
        OFFSET_BEGINNING,
        OFFSET_END,
        Consumer,
        KafkaException,
        TopicPartition,
    )

    brokers = connect.brokers(args)
    decoder = serde.Decoder(
        args.format, lambda: serde.registry_client(connect.registry(args)), args.topic
    )
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            **connect.client_settings(args),
            "group.id": args.group or f"floe-cli-{uuid.uuid4().hex}",
            "enable.auto.commit": args.group is not None,
            "enable.auto.offset.store": False,  # commit what was printed, not what was polled
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            "log_level": 0,
        }
    )
    try:
        try:
            meta = consumer.list_topics(args.topic, timeout=args.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot reach the brokers at {brokers}: {error_message(exc)}") from None
        tmeta = meta.topics.get(args.topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            raise CliError(f"unknown topic {args.topic}")
        partitions = sorted(tmeta.partitions)
        if args.partition is not None:
            if args.partition not in tmeta.partitions:
                raise CliError(f"topic {args.topic} has no partition {args.partition}")
            partitions = [args.partition]
        assigned: set[int] = set()
        if args.group and args.partition is None and args.offset is None:

            def on_assign(_: Any, tps: list[Any]) -> None:
                assigned.update(tp.partition for tp in tps)

            def on_revoke(_: Any, tps: list[Any]) -> None:
                assigned.difference_update(tp.partition for tp in tps)

            consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        else:
            if args.offset is not None:
                first = args.offset
            elif args.from_beginning:
                first = OFFSET_BEGINNING
            else:
                first = OFFSET_END
            consumer.assign([TopicPartition(args.topic, p, first) for p in partitions])
            assigned.update(partitions)
        _loop(args, consumer, decoder, assigned, emit)
    finally:
        consumer.close()  # with --group: commits the stored offsets, leaves the group


def _loop(
    args: argparse.Namespace,
    consumer: Any,
    decoder: serde.Decoder,
    assigned: set[int],
    emit: Callable[[dict[str, Any]], None],
) -> None:
    """Poll and print until ``-n``, or the end of every assigned partition when exiting
    at the end.

    Raises:
        CliError: a consume error, or a record that does not decode in ``--format``.
    """
    from confluent_kafka import KafkaError

    exit_on_end = args.exit_on_end or (not args.follow and not sys.stdout.isatty())
    at_end: set[int] = set()
    printed = 0
    while args.num is None or printed < args.num:
        if exit_on_end and assigned and at_end >= assigned:
            return
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise CliError(f"{msg.error().name()}: {msg.error().str()}")
        at_end.discard(msg.partition())
        where = f"partition {msg.partition()} offset {msg.offset()}"
        try:
            key, value = decoder.decode(msg.key(), key=True), decoder.decode(msg.value())
        except CliError as exc:
            raise CliError(f"{where}: {exc}") from None
        emit(
            {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "timestamp": msg.timestamp()[1],
                "key": key,
                "value": value,
                "headers": [
                    {"key": k, "value": serde.raw(v or b"")} for k, v in msg.headers() or []
                ],
            }
        )
        printed += 1
        if args.group:
            consumer.store_offsets(msg)
