"""``floe demo clickstream``: the getting-started story against a running ``floe up``.

Five steps, each through the same public interfaces a user's own code would use:

1. register an Avro ``Click`` schema under ``<topic>-value`` in Floe's Schema Registry;
2. create the table topic (``by_schema_id`` + ``flatten``, a 2 s commit interval), or
   reuse it when it already exists as such a table topic;
3. produce ``-n`` events with confluent-kafka's ``AvroSerializer`` (deterministic with
   ``--seed``; timestamps spread over the ``--minutes`` before the run);
4. poll the admin API's ``GET /api/v1/tables/{topic}`` until every partition's committed
   offset reaches the end offsets the delivery reports gave;
5. answer two questions in Spark SQL (top pages, events per minute) through
   :func:`floe.cli.sql.query`, the code ``floe sql`` runs.

Addresses default to the configuration ``floe up`` loads (``floe.toml`` or ``--config``,
``FLOE_*``, ``--set``); ``--brokers``, ``--registry`` and ``--admin`` override them.
Failures are one line on stderr and exit code 1. confluent-kafka and rich are imported
lazily so other commands do not pay for them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from floe.cli import connect, sql
from floe.cli.admin import TIMEOUT_S
from floe.cli.api import UnreachableError, fetch
from floe.cli.output import CliError, error_message
from floe.errors import FloeError

POLL_S = 0.5

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "floe.demo",
    "doc": "One event of a web clickstream (floe demo clickstream).",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {
            "name": "event_type",
            "type": {
                "type": "enum",
                "name": "EventType",
                "symbols": ["PAGE_VIEW", "CLICK", "ADD_TO_CART", "PURCHASE"],
            },
        },
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Device",
                "fields": [
                    {
                        "name": "type",
                        "type": {
                            "type": "enum",
                            "name": "DeviceType",
                            "symbols": ["DESKTOP", "MOBILE", "TABLET"],
                        },
                    },
                    {"name": "os", "type": "string"},
                ],
            },
        },
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}

# pages with a long-tailed popularity, as real sites have
PAGES = (
    ("/", 30),
    ("/products", 18),
    ("/search", 14),
    ("/products/espresso-machine", 9),
    ("/products/grinder", 7),
    ("/cart", 6),
    ("/blog/latte-art", 5),
    ("/products/milk-jug", 4),
    ("/checkout", 3),
    ("/about", 2),
    ("/help", 1),
    ("/careers", 1),
)
EVENT_TYPES = (("PAGE_VIEW", 70), ("CLICK", 20), ("ADD_TO_CART", 7), ("PURCHASE", 3))
REFERRERS = ("https://www.google.com/", "https://news.ycombinator.com/", "newsletter", "ads")
DEVICES: tuple[tuple[str, str], ...] = (
    ("DESKTOP", "macOS"),
    ("DESKTOP", "Windows"),
    ("MOBILE", "iOS"),
    ("MOBILE", "Android"),
    ("TABLET", "iPadOS"),
)
USERS = 5000


def add_parser(sub: Any) -> None:
    """Register ``floe demo`` and its demos on the top-level subparsers."""
    demo = sub.add_parser("demo", help="demos against a running floe up")
    demos = demo.add_subparsers(dest="demo", required=True)
    p = demos.add_parser(
        "clickstream",
        help="Avro clicks into a table topic, then Spark SQL over its Iceberg table",
    )
    p.add_argument("--topic", default="clickstream", help="table topic (default clickstream)")
    p.add_argument("--partitions", "-p", type=int, default=3, help="when creating (default 3)")
    p.add_argument(
        "--events", "-n", type=int, default=100_000, help="events to produce (default 100000)"
    )
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument(
        "--minutes", type=int, default=10, help="event timestamps span this many minutes (10)"
    )
    p.add_argument(
        "--commit-interval-ms",
        type=int,
        default=2000,
        help="table.topic.commit.interval.ms when creating (default 2000)",
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the table (300)"
    )
    p.add_argument("--brokers", help="bootstrap HOST:PORT (default: from the configuration)")
    p.add_argument("--registry", metavar="URL", help="registry URL (default: from the config)")
    p.add_argument("--admin", metavar="URL", help="admin API URL (default: from the config)")
    p.add_argument("--config", "-c", help="config file (default ./floe.toml if present)")
    p.add_argument("--data-dir", help="data directory (data.dir), for Spark SQL's catalog")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any config key (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``floe demo clickstream``; returns the exit code."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    try:
        _check(args)
        _clickstream(args, console)
    except UnreachableError as exc:  # as `floe table status` says it
        print(f"floe: {exc}", file=sys.stderr)
        return 1
    except (CliError, FloeError) as exc:
        print(f"floe: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("floe: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # librdkafka, the registry client, the JVM: one line
        print(f"floe: error: {error_message(exc)}", file=sys.stderr)
        return 1
    return 0


def _check(args: argparse.Namespace) -> None:
    """Raises:
    CliError: a numeric option out of range.
    """
    for name, low in (("events", 1), ("partitions", 1), ("minutes", 1)):
        if getattr(args, name) < low:
            raise CliError(f"--{name} must be >= {low}")
    if args.commit_interval_ms < 1000:
        raise CliError("--commit-interval-ms must be >= 1000")
    if args.timeout <= 0:
        raise CliError("--timeout must be > 0")


# -- addresses --------------------------------------------------------------------------


@dataclass(frozen=True)
class Addresses:
    brokers: str
    registry: str
    admin: str


def addresses(args: argparse.Namespace) -> Addresses:
    """The flags, else the ``cli.*`` keys, else what the configuration ``floe up`` loads
    says (:mod:`floe.cli.connect`; ``--config``, ``--data-dir`` and ``--set`` included).

    Raises:
        CliError: the configuration does not load, or a needed port is 0 (any free port)
            and no flag names it.
    """
    given = argparse.Namespace(**vars(args), config_file=args.config)
    return Addresses(connect.brokers(given), connect.registry(given), connect.admin(given))


# -- the events -------------------------------------------------------------------------


def events(seed: int, count: int, end_ms: int, minutes: int) -> Iterator[dict[str, Any]]:
    """``count`` clicks, the same for the same ``seed`` (timestamps excepted: they are
    spread evenly over the ``minutes`` before ``end_ms``). Users keep a device and a
    session, starting a new session now and then."""
    rng = random.Random(seed)
    pages, page_w = [p for p, _ in PAGES], [w for _, w in PAGES]
    kinds, kind_w = [k for k, _ in EVENT_TYPES], [w for _, w in EVENT_TYPES]
    sessions: dict[int, str] = {}
    span = minutes * 60_000
    for i in range(count):
        user = int(USERS * rng.random() ** 3)  # low user numbers are the most active
        if user not in sessions or rng.random() < 0.05:
            sessions[user] = uuid.UUID(int=rng.getrandbits(128), version=4).hex[:16]
        device_type, os_name = DEVICES[user % len(DEVICES)]
        referrer = rng.choice(REFERRERS) if rng.random() < 0.4 else None
        yield {
            "user_id": f"user-{user:04d}",
            "session_id": sessions[user],
            "page": rng.choices(pages, page_w)[0],
            "referrer": referrer,
            "event_type": rng.choices(kinds, kind_w)[0],
            "device": {"type": device_type, "os": os_name},
            "ts": end_ms - span + (i * span) // count,
        }


# -- the steps --------------------------------------------------------------------------


@dataclass
class Produced:
    """What the delivery reports said: per partition, the first offset and the end."""

    first: dict[int, int] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=dict)
    error: str | None = None

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = self.error or f"{err.name()}: {err.str()}"
            return
        p, o = msg.partition(), msg.offset()
        self.first[p] = min(self.first.get(p, o), o)
        self.end[p] = max(self.end.get(p, 0), o + 1)

    def committed(self, status: dict[str, Any]) -> int:
        """Of the records produced here, how many the table holds now."""
        done = 0
        for part in status["partitions"]:
            p, committed = part["partition"], part["committed_offset"]
            if p in self.end and committed is not None:
                done += max(0, min(committed, self.end[p]) - self.first[p])
        return done


def _clickstream(args: argparse.Namespace, console: Any) -> None:
    where = addresses(args)
    subject = f"{args.topic}-value"
    console.print(
        f"Floe at [bold]{where.brokers}[/] (registry {where.registry}, admin {where.admin})"
    )

    fetch(where.admin, "/api/v1/health")  # fail before producing, not after

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    registry = SchemaRegistryClient({"url": where.registry, "timeout": int(TIMEOUT_S)})
    try:
        schema_id = registry.register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO"))
    except SchemaRegistryError as exc:
        raise CliError(
            f"the registry refused the schema for {subject}: {exc.error_message} "
            f"(error code {exc.error_code})"
        ) from None
    except Exception as exc:  # httpx's connection errors
        raise CliError(
            f"cannot reach the registry at {where.registry}: {error_message(exc)}"
        ) from None
    console.print(f"[green]✓[/] registered the Avro schema [bold]{subject}[/] (id {schema_id})")

    _ensure_topic(args, where, console)
    produced, first_produce, seconds = _produce(args, where, registry, console)
    status = _wait(args, where, produced, console)
    caught_up = time.monotonic() - first_produce
    console.print(
        f"[green]✓[/] produced {args.events:,} events in {seconds:.1f} s "
        f"({args.events / max(seconds, 1e-9):,.0f}/s); the table caught up "
        f"[bold]{caught_up:.1f} s[/] after the first produce"
    )
    _answer(args, status["catalog_table"], console)


def _ensure_topic(args: argparse.Namespace, where: Addresses, console: Any) -> None:
    """Create the table topic, or reuse it if it exists as a suitable table topic.

    Raises:
        CliError: the topic exists and is not a ``by_schema_id`` table topic.
    """
    from confluent_kafka import KafkaError, KafkaException

    from floe.cli.admin import admin_client, kafka_admin

    admin = admin_client(where.brokers)
    configs = {
        "table.topic.enable": "true",
        "table.topic.commit.interval.ms": str(args.commit_interval_ms),
        "table.topic.convert.value.type": "by_schema_id",
        "table.topic.transform.value.type": "flatten",
    }
    new = kafka_admin().NewTopic(args.topic, args.partitions, 1, config=configs)
    futures = admin.create_topics([new], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    try:
        futures[args.topic].result(TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    else:
        console.print(
            f"[green]✓[/] created the table topic [bold]{args.topic}[/] "
            f"({args.partitions} partitions, commit every {args.commit_interval_ms / 1000:g} s)"
        )
        return
    try:
        status = fetch(where.admin, f"/api/v1/tables/{quote(args.topic, safe='')}")
    except CliError:  # the API's 404
        raise CliError(
            f"topic {args.topic!r} exists and is not a table topic: pick another --topic"
        ) from None
    mode = status["settings"]["convert_value_type"]
    if not status["enabled"] or mode != "by_schema_id":
        raise CliError(
            f"topic {args.topic!r} exists but is not a by_schema_id table topic "
            f"(value {mode}): pick another --topic"
        )
    console.print(f"[green]✓[/] the table topic [bold]{args.topic}[/] exists: reusing it")


def _produce(
    args: argparse.Namespace, where: Addresses, registry: Any, console: Any
) -> tuple[Produced, float, float]:
    """Produce the events; returns the delivery summary, the monotonic time of the first
    produce and the seconds until every delivery was acknowledged.

    Raises:
        CliError: a delivery failed, or deliveries were still pending after the timeout.
    """
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

    serialize = AvroSerializer(registry, json.dumps(SCHEMA))
    ctx = SerializationContext(args.topic, MessageField.VALUE)
    producer = Producer(
        {
            "bootstrap.servers": where.brokers,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 200_000,
            "log_level": 0,
        }
    )
    produced = Produced()
    end_ms = int(time.time() * 1000)
    columns = (*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeRemainingColumn())
    start = time.monotonic()
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("producing", total=args.events)
        for i, event in enumerate(events(args.seed, args.events, end_ms, args.minutes)):
            value = serialize(event, ctx)
            key = event["user_id"].encode()
            while True:
                try:
                    producer.produce(args.topic, value, key, on_delivery=produced.on_delivery)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            if i % 1000 == 999:
                producer.poll(0)
                progress.update(task, completed=i + 1)
                if produced.error:
                    break
        progress.update(task, completed=args.events)
        remaining = producer.flush(args.timeout)
    seconds = time.monotonic() - start
    if produced.error:
        raise CliError(f"produce failed: {produced.error}")
    if remaining:
        raise CliError(f"{remaining} events not acknowledged within {args.timeout:g} s")
    return produced, start, seconds


def _wait(
    args: argparse.Namespace, where: Addresses, produced: Produced, console: Any
) -> dict[str, Any]:
    """Poll the table's status until it holds every produced record; returns the status.

    Raises:
        CliError: the table stopped on a bad record, or did not catch up in time.
        UnreachableError: the admin API is not reachable.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    path = f"/api/v1/tables/{quote(args.topic, safe='')}"
    deadline = time.monotonic() + args.timeout
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
    status: dict[str, Any] = {}
    last_error = "no status yet"
    with Progress(*columns, MofNCompleteColumn(), console=console) as progress:
        task = progress.add_task("waiting for the Iceberg table", total=args.events)
        while True:
            try:
                status = fetch(where.admin, path)
            except CliError as exc:  # a topic the broker has not seen yet, briefly
                last_error = str(exc)
            else:
                done = produced.committed(status)
                progress.update(task, completed=done)
                if status["status"] == "stopped":
                    raise CliError(f"the table stopped: {status['last_error']}")
                last_error = status["last_error"] or f"status {status['status']}"
                ends = {p["partition"]: p["committed_offset"] for p in status["partitions"]}
                if all((ends.get(p) or 0) >= end for p, end in produced.end.items()):
                    return status
            if time.monotonic() > deadline:
                committed = produced.committed(status) if status else 0
                raise CliError(
                    f"the table holds {committed} of {args.events} events after "
                    f"{args.timeout:g} s ({last_error})"
                )
            time.sleep(POLL_S)


def statements(table: str) -> list[tuple[str, str]]:
    """The demo's questions: (title, Spark SQL)."""
    return [
        (
            "Top pages",
            "SELECT page, count(*) AS views, count(DISTINCT user_id) AS users\n"
            f"FROM {table} WHERE event_type = 'PAGE_VIEW'\n"
            "GROUP BY page ORDER BY views DESC, page LIMIT 5",
        ),
        (
            "Events per minute (the newest 15 minutes)",
            "SELECT * FROM (\n"
            "  SELECT date_format(date_trunc('minute', ts), 'yyyy-MM-dd HH:mm') AS minute_utc,\n"
            "         count(*) AS events, count_if(event_type = 'PURCHASE') AS purchases\n"
            f"  FROM {table} GROUP BY 1 ORDER BY 1 DESC LIMIT 15\n"
            ") ORDER BY minute_utc",
        ),
        ("Rows in the table", f"SELECT count(*) AS total FROM {table}"),
    ]


def _answer(args: argparse.Namespace, table: str, console: Any) -> None:
    """Run the questions in one local Spark session (``floe sql``'s path) and print them."""
    asked = statements(table)
    with console.status("starting Spark SQL (a local session: ~5-10 s)"):
        answers = sql.query(args, [s for _, s in asked])
    for (title, statement), (columns, rows) in zip(asked, answers, strict=True):
        console.print()
        console.print(f"[bold]{title}[/]")
        console.print(f"[dim]{statement}[/]")
        print(sql.to_table(columns, rows), flush=True)
