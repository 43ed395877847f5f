"""``floe produce TOPIC``: records from stdin (one per line) or generated test data.

``--format text`` (default): the line is the value. ``--format json|avro|protobuf``:
the line is JSON, serialized through the Schema Registry with ``--schema FILE``
(:mod:`floe.cli.serde`; ``json`` without a schema sends the JSON as it is). Keys:
``--key K`` for every record, ``--parse-key SEP`` to split ``key<SEP>value`` lines, or
``--key-field NAME`` to take a JSON line's field. ``--header k=v`` (repeatable) and
``--partition N`` apply to every record. ``--generate N`` produces N records of
``--size`` bytes instead of reading stdin, with a progress bar.

The producer uses ``acks=all`` and idempotence; the command returns after every
record is acknowledged and prints a summary (records, bytes, offsets per partition).
Any failure, including an unreachable broker after ``--timeout``, is one line on stderr
and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floe.cli import connect, serde
from floe.cli.output import CliError, add_output, emit, error_message, fail

DEFAULT_TIMEOUT_S = 15.0
DEFAULT_SIZE = 100
_FILL = "abcdefghijklmnopqrstuvwxyz0123456789"


def add_parser(sub: Any) -> None:
    """Register ``floe produce`` on the top-level subparsers."""
    p = sub.add_parser("produce", help="produce records from stdin lines or generated data")
    p.add_argument("topic")
    p.add_argument(
        "--format", "-f", choices=serde.FORMATS, default="text", help="input format (text)"
    )
    p.add_argument("--schema", type=Path, metavar="FILE", help=".avsc, JSON Schema or .proto")
    p.add_argument("--message", metavar="NAME", help="protobuf message (default: the first)")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--key", "-k", help="the key of every record")
    keys.add_argument("--parse-key", metavar="SEP", help="lines are KEY<SEP>VALUE")
    keys.add_argument("--key-field", metavar="NAME", help="the key is this JSON field")
    p.add_argument("--header", "-H", action="append", default=[], metavar="K=V", help="repeatable")
    p.add_argument("--partition", "-p", type=int, help="(default: the partitioner's choice)")
    p.add_argument("--generate", type=int, metavar="N", help="produce N generated records")
    p.add_argument(
        "--size", type=int, default=DEFAULT_SIZE, help=f"generated value bytes ({DEFAULT_SIZE})"
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


@dataclass
class Summary:
    """What the delivery reports said: per partition, the first and last offsets."""

    records: int = 0
    bytes: int = 0
    error: str | None = None
    offsets: dict[int, list[int]] = field(default_factory=dict)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = self.error or f"{err.name()}: {err.str()}"
            return
        self.records += 1
        self.bytes += len(msg.value() or b"") + len(msg.key() or b"")
        span = self.offsets.setdefault(msg.partition(), [msg.offset(), msg.offset()])
        span[0], span[1] = min(span[0], msg.offset()), max(span[1], msg.offset())

    def document(self, topic: str) -> dict[str, Any]:
        parts = [
            {"partition": p, "first_offset": a, "last_offset": b}
            for p, (a, b) in sorted(self.offsets.items())
        ]
        return {
            "topic": topic,
            "records": self.records,
            "bytes": self.bytes,
            "partitions": parts,
            "_header": [
                ("Topic:", topic),
                ("Records:", str(self.records)),
                ("Bytes:", str(self.bytes)),
            ],
            "_table": [
                ("PARTITION", "FIRST-OFFSET", "LAST-OFFSET"),
                *(
                    (str(x["partition"]), str(x["first_offset"]), str(x["last_offset"]))
                    for x in parts
                ),
            ],
        }


def run(args: argparse.Namespace) -> int:
    """Run ``floe produce``; returns the exit code."""
    try:
        _check(args)
        summary = _produce(args)
    except Exception as exc:  # CliError, librdkafka and registry errors: one line
        return fail(args, exc)
    emit(args, summary.document(args.topic))
    return 0


def _check(args: argparse.Namespace) -> None:
    """Raises:
    CliError: options that do not fit together.
    """
    if args.generate is not None and (args.generate < 0 or args.format != "text"):
        raise CliError("--generate N needs N >= 0 and --format text")
    if args.size < 0 or args.timeout <= 0:
        raise CliError("--size must be >= 0 and --timeout > 0")
    if args.key_field and args.format == "text":
        raise CliError("--key-field needs --format json, avro or protobuf")
    if args.schema is None and args.format in ("avro", "protobuf"):
        raise CliError(f"--format {args.format} needs --schema FILE")


def headers(items: list[str]) -> list[tuple[str, bytes]]:
    """Raises:
    CliError: an item without ``=``.
    """
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--header expects K=V, got {item!r}")
        out.append((name, value.encode()))
    return out


def _lines(args: argparse.Namespace) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value line) per record: stdin lines (bytes: text values need not be UTF-8),
    or generated records."""
    fixed = None if args.key is None else args.key.encode()
    if args.generate is not None:
        body = (_FILL * (args.size // len(_FILL) + 1)).encode()
        for i in range(args.generate):
            yield fixed, (f"{i:010d} ".encode() + body)[: args.size]
        return
    sep = None if args.parse_key is None else args.parse_key.encode()
    for line in sys.stdin.buffer:
        text = line.rstrip(b"\r\n")
        if args.format != "text" and not text.strip():
            continue  # blank lines between JSON records
        if sep is not None:
            key, found, value = text.partition(sep)
            if not found:
                raise CliError(f"--parse-key {args.parse_key!r}: no separator in {text[:80]!r}")
            yield key, value
        elif args.key_field:
            doc = serde.parse_json(text)
            if not isinstance(doc, dict) or args.key_field not in doc:
                raise CliError(f"--key-field {args.key_field}: not in {text[:80]!r}")
            field_value = doc[args.key_field]
            key_text = field_value if isinstance(field_value, str) else json.dumps(field_value)
            yield key_text.encode(), text
        else:
            yield fixed, text


def _produce(args: argparse.Namespace) -> Summary:
    """Raises:
    CliError: bad input, an unreachable broker, or a failed delivery.
    """
    from confluent_kafka import KafkaException, Producer

    brokers = connect.brokers(args)
    encode = serde.serializer(
        args.format,
        args.schema,
        lambda: serde.registry_client(connect.registry(args)),
        args.topic,
        args.message,
    )
    extra = headers(args.header)
    producer = Producer(
        {
            "bootstrap.servers": brokers,
            **connect.client_settings(args),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int(args.timeout * 1000),
            "log_level": 0,
        }
    )
    try:
        meta = producer.list_topics(args.topic, timeout=args.timeout)
    except KafkaException as exc:
        raise CliError(f"cannot reach the brokers at {brokers}: {error_message(exc)}") from None
    tmeta = meta.topics.get(args.topic)
    if tmeta is None or tmeta.error is not None or not tmeta.partitions:
        raise CliError(f"unknown topic {args.topic} (and the broker does not auto-create topics)")
    if args.partition is not None and args.partition not in tmeta.partitions:
        raise CliError(f"topic {args.topic} has no partition {args.partition}")
    summary = Summary()
    kwargs: dict[str, Any] = {"on_delivery": summary.on_delivery}
    if args.partition is not None:
        kwargs["partition"] = args.partition
    if extra:
        kwargs["headers"] = extra
    with _Progress(args.generate) as advance:
        for key, text in _lines(args):
            value = encode(text)
            while True:
                try:
                    producer.produce(args.topic, value, key, **kwargs)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            producer.poll(0)
            advance()
            if summary.error:
                break
        remaining = producer.flush(args.timeout)
    if summary.error:
        raise CliError(f"produce failed: {summary.error}")
    if remaining:
        raise CliError(f"{remaining} records not acknowledged within {args.timeout:g} s")
    return summary


class _Progress:
    """A rich progress bar on stderr for ``--generate`` on a terminal; else nothing.
    Entering returns the function that counts one record."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if self.total is None or not sys.stderr.isatty():
            return lambda: None
        from rich.console import Console
        from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

        columns = (
            *Progress.get_default_columns()[:-1],
            MofNCompleteColumn(),
            TimeRemainingColumn(),
        )
        self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task("producing", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
