"""``floe dlq replay TOPIC``: send a table topic's dead letters back, each once.

After the cause is fixed (a schema registered, a setting changed), the records a table
topic skipped into its dead-letter topic (``table.topic.errors.dlq.topic``, default
``<topic>.dlq``; ``--dlq`` names another) are produced again: to the topic and
partition each came from, or to ``--to TOPIC``; with their key, value, timestamp and
headers, without the ``floe.dlq.*`` headers. ``--reason TEXT`` replays only those whose
reason contains TEXT; ``--dry-run`` counts them (by reason) and sends nothing.

**Once.** Each run reads the whole dead-letter topic (read_committed). For every record
it replays it appends a marker to the dead-letter topic (no key, no value, headers
``floe.dlq.replayed.offset`` and ``floe.dlq.replayed.to``) in the same Kafka transaction
as the replayed records (``transactional.id`` ``floe-dlq-replay.<dlq>``, which also fences
a concurrent replay of the same topic): a record whose marker is there is never sent
again, a run that fails sends nothing, and records a ``--reason`` filter left out stay
for a later run.

An unusable batch's dead letter (error class ``unusable_batch``: the batch's bytes as
the log held them, whose records cannot be read) is counted apart and never replayed.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from floe.cli import connect
from floe.cli.output import CliError, add_output, dump, fail
from floe.tabletopic.model import (
    DLQ_ERROR_CLASS_HEADER,
    DLQ_HEADER_PREFIX,
    DLQ_OFFSET_HEADER,
    DLQ_PARTITION_HEADER,
    DLQ_REASON_HEADER,
    DLQ_REPLAYED_HEADER,
    DLQ_REPLAYED_TO_HEADER,
    DLQ_TOPIC_HEADER,
    UNUSABLE_BATCH,
)

DEFAULT_TIMEOUT_S = 30.0
POLL_S = 0.5


def add_parser(sub: Any) -> None:
    """Register ``floe dlq`` and its verbs on the top-level subparsers."""
    dlq = sub.add_parser("dlq", help="dead-letter topics of table topics: replay")
    verbs = dlq.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser(
        "replay", help="produce a table topic's dead letters again, each once (a transaction)"
    )
    p.add_argument("topic", help="the table topic whose dead letters to replay")
    p.add_argument("--dlq", metavar="TOPIC", help="the dead-letter topic (default <topic>.dlq)")
    p.add_argument("--to", metavar="TOPIC", help="produce here (default: where each came from)")
    p.add_argument("--reason", metavar="TEXT", help="only dead letters whose reason has TEXT")
    p.add_argument("--dry-run", action="store_true", help="count what would be replayed")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"give up on the brokers after S seconds ({DEFAULT_TIMEOUT_S:g})",
    )
    connect.add_connection(p, brokers=True)
    add_output(p)


def run(args: argparse.Namespace) -> int:
    """Run ``floe dlq replay``; returns the exit code."""
    try:
        dlq = args.dlq or f"{args.topic}.dlq"
        summary = replay(
            connect.brokers(args), dlq, to=args.to, reason=args.reason,
            dry_run=args.dry_run, timeout_s=args.timeout, client=connect.client_settings(args),
        )  # fmt: skip
    except Exception as exc:  # CliError, librdkafka errors: one line
        return fail(args, exc)
    if args.output != "table":
        print(dump(summary, args.output))
        return 0
    verb = "would replay" if args.dry_run else "replayed"
    print(
        f"{verb} {summary['replayed']} of {summary['dead_letters']} dead letters in {dlq} "
        f"({summary['already_replayed']} replayed before, {summary['not_matching']} not "
        "matching --reason)"
    )
    for reason, n in summary["reasons"].items():
        print(f"  {n:>6}  {reason}")
    if summary["unusable_batches"]:
        print(
            f"{summary['unusable_batches']} unusable batches not replayed (their records "
            "cannot be read; each dead letter holds the batch's bytes as stored)"
        )
    return 0


def replay(
    bootstrap: str,
    dlq: str,
    *,
    to: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    client: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Replay ``dlq``'s dead letters not replayed yet (see the module docstring);
    returns the counts (``replayed`` is what would be with ``dry_run``). ``client``:
    Kafka client properties for both clients (security, from ``--client-config``).

    Raises:
        CliError: ``dlq`` does not exist, or the brokers did not answer in time.
        KafkaException: the transaction failed (nothing was replayed).
    """
    letters, done = _read(bootstrap, dlq, timeout_s, client or {})
    unusable = [_header(m, DLQ_ERROR_CLASS_HEADER) == UNUSABLE_BATCH for m in letters]
    batches = sum(unusable)
    letters = [m for m, skip in zip(letters, unusable, strict=True) if not skip]
    fresh = [m for m in letters if m.offset() not in done]
    chosen = [m for m in fresh if reason is None or reason in _header(m, DLQ_REASON_HEADER)]
    summary: dict[str, Any] = {
        "dlq": dlq,
        "dead_letters": len(letters),
        "already_replayed": len(letters) - len(fresh),
        "not_matching": len(fresh) - len(chosen),
        "unusable_batches": batches,
        "replayed": len(chosen),
        "reasons": dict(Counter(_header(m, DLQ_REASON_HEADER) for m in chosen).most_common()),
    }
    if not dry_run and chosen:
        _send(bootstrap, dlq, chosen, to, timeout_s, client=client or {})
    return summary


def _header(msg: Any, name: str) -> str:
    for key, value in msg.headers() or ():
        if key == name:
            return (value or b"").decode(errors="replace")
    return ""


def _read(
    bootstrap: str, dlq: str, timeout_s: float, client: Mapping[str, str]
) -> tuple[list[Any], set[int]]:
    """The dead letters of ``dlq`` and the offsets already replayed (from the markers),
    read from its start to its end (librdkafka's end-of-partition event, which also
    steps over the transaction markers a read_committed reader never sees)."""
    import confluent_kafka as ck

    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "floe-dlq-replay-reader",  # never commits: assigned, not subscribed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,  # errors reach the user as one line, not librdkafka's log
            **client,
        }
    )
    try:
        topics = consumer.list_topics(dlq, timeout=timeout_s).topics
        if dlq not in topics or topics[dlq].error is not None:
            raise CliError(f"no dead-letter topic {dlq!r}")
        left = set(topics[dlq].partitions)
        consumer.assign([ck.TopicPartition(dlq, p, ck.OFFSET_BEGINNING) for p in left])
        letters: list[Any] = []
        done: set[int] = set()
        idle = 0.0
        while left:
            msg = consumer.poll(POLL_S)
            if msg is None:
                idle += POLL_S
                if idle > timeout_s:
                    raise CliError(f"{dlq}: no answer for {timeout_s:g} s before its end")
                continue
            idle = 0.0
            error = msg.error()
            if error is not None:
                if error.code() != ck.KafkaError._PARTITION_EOF:
                    raise CliError(f"{dlq}: {error.str()}")
                left.discard(msg.partition())
                continue
            replayed = _header(msg, DLQ_REPLAYED_HEADER)
            if replayed:
                done.add(int(replayed))
            elif _header(msg, DLQ_OFFSET_HEADER):
                letters.append(msg)
        return letters, done
    finally:
        consumer.close()


def _send(
    bootstrap: str,
    dlq: str,
    chosen: Sequence[Any],
    to: str | None,
    timeout_s: float,
    *,
    client: Mapping[str, str],
) -> None:
    """``chosen`` produced again and their markers appended, in one transaction."""
    import confluent_kafka as ck

    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"floe-dlq-replay.{dlq}",
            "enable.idempotence": True,
            "log_level": 0,
            **client,
        }
    )
    producer.init_transactions(timeout_s)
    producer.begin_transaction()
    try:
        for m in chosen:
            source = _header(m, DLQ_TOPIC_HEADER)
            target = to or source
            headers = [(k, v) for k, v in m.headers() or () if not k.startswith(DLQ_HEADER_PREFIX)]
            where: dict[str, Any] = {}
            if target == source:  # the same partition: the key's order is kept
                where["partition"] = int(_header(m, DLQ_PARTITION_HEADER))
            producer.produce(
                target, m.value(), m.key(), headers=headers, timestamp=m.timestamp()[1], **where
            )
            marker: list[tuple[str, str | bytes | None]] = [
                (DLQ_REPLAYED_HEADER, str(m.offset()).encode()),
                (DLQ_REPLAYED_TO_HEADER, target.encode()),
            ]
            producer.produce(dlq, None, None, partition=m.partition(), headers=marker)
        producer.commit_transaction(timeout_s)
    except BaseException:
        producer.abort_transaction(timeout_s)
        raise
