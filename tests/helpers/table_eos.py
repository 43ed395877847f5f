"""Exactly-once checks for a table topic under crashes: a keyed producer stream whose
every record says what it should hold, the broker's committed rounds, and the check
that a table holds exactly its topic's records.

The stream's records are built from their sequence number alone (value ``str(seq)``,
key ``user-<seq % keys>`` (7 keys by default), header ``("seq", str(seq))``, partition
``seq % partitions``), so a test can tell from an acknowledgement what the topic must
hold at its offset.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import confluent_kafka as ck

from helpers.broker import Broker
from helpers.clients import confluent_config
from helpers.records import Record

EVENT_STALL_S = 180.0
"""Longest wait for a crash test's next event (the moment to kill) while the broker
shows no progress (:data:`PROGRESS`): a cold first round after a restart starts Spark
(~15 s on a quiet machine, 46 s on a loaded CI machine) and then takes the backlog the
kill left (170 s seen there)."""
PROGRESS = ("spark.started", "tabletopic.recovered", "tabletopic.committed ")
"""The log lines that show a broker's table pipeline moving on."""
CATCH_UP_STALL_S = 180.0
"""Longest the table may stay at the same offsets while it catches up with the log ends:
a round is allowed as long as a cold first one (a restart's backlog round took 73 s on
the CI machine under make test)."""


class KeyedStream:
    """One idempotent acks=all confluent-kafka producer to ``topic``, driven by its own
    thread until ``stop``.

    Record ``seq`` has value ``str(seq)``, key ``user-<seq % keys>``, header
    ``("seq", str(seq))`` and goes to partition ``seq % partitions``, at most about
    ``per_second`` records a second. Delivery callbacks
    (served by the same thread) fill ``acked`` (seq -> (partition, offset)) and
    ``failed``; ``acked_at`` is the time of the latest acknowledgement. ``produced`` is
    how many records were handed to the producer and ``unflushed`` what ``flush`` left
    undelivered once stopped (-1 until then).

    The thread owns the producer: the test only starts ``thread``, sets ``stop``, joins
    ``thread`` and then reads the counters.
    """

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, keys: int = 7, per_second: int = 1000
    ) -> None:
        self.topic = topic
        self.pause_s = 10 / per_second
        self.partitions = partitions
        self.keys = keys
        self.producer = ck.Producer(
            confluent_config(
                bootstrap,
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 180000,
                    "reconnect.backoff.ms": 50,
                    "reconnect.backoff.max.ms": 500,
                    "queue.buffering.max.messages": 20000,
                },
            )
        )
        self.acked: dict[int, tuple[int, int]] = {}
        self.acked_at = 0.0
        self.failed: dict[int, str] = {}
        self.produced = 0
        self.unflushed = -1
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="keyed-stream", daemon=True)

    def _on_delivery(self, seq: int, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            # a delivered message always has both (the stubs allow None for any message)
            self.acked[seq] = (cast(int, msg.partition()), cast(int, msg.offset()))
            self.acked_at = time.monotonic()
        else:
            self.failed[seq] = str(err)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    value=str(seq).encode(),
                    key=f"user-{seq % self.keys}".encode(),
                    headers=[("seq", str(seq).encode())],
                    partition=seq % self.partitions,
                    on_delivery=partial(self._on_delivery, seq),
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            seq += 1
            self.produced = seq
            if seq % 10 == 0:  # serve callbacks; pace the stream to <= ~per_second
                self.producer.poll(0)
                time.sleep(self.pause_s)
        self.unflushed = self.producer.flush(120)


def progress(b: Broker) -> int:
    """The :data:`PROGRESS` lines ``b`` has logged, over all its starts."""
    text = b.stderr_text()
    return sum(text.count(line) for line in PROGRESS)


def wait_event(
    due: Callable[[], bool], b: Broker, stream: KeyedStream, what: str, poll_s: float
) -> None:
    """Poll ``due`` every ``poll_s`` until it holds, while ``b`` and the producer stay
    alive; fail after :data:`EVENT_STALL_S` without any :func:`progress` of ``b`` (a slow
    round is fine, a stuck one is not). ``what`` starts the failure message."""
    shown, checked = progress(b), time.monotonic()
    deadline = checked + EVENT_STALL_S
    while not due():
        now = time.monotonic()
        assert now < deadline, (
            f"{what}: no event and no progress in {EVENT_STALL_S} s:\n{b.stderr_tail()}"
        )
        if now - checked >= 1.0:  # reading the whole log is not for every poll
            checked = now
            if (lines := progress(b)) > shown:
                shown, deadline = lines, now + EVENT_STALL_S
        assert stream.thread.is_alive(), "producer thread died"
        b.assert_alive()
        time.sleep(poll_s)


def committed_lines(b: Broker) -> int:
    """The rounds ``b`` has logged as committed, over all its starts."""
    return b.stderr_text().count("tabletopic.committed ")


def assert_acked_in_topic(stream: KeyedStream, log: dict[tuple[int, int], Record]) -> None:
    """Every record ``stream`` had acknowledged is in ``log`` (by (partition, offset)) at
    its acknowledged offset, with the key, value and header of its sequence number.

    Raises:
        AssertionError: an acknowledged record that differs.
        KeyError: an acknowledged offset that is not in ``log``.
    """
    for seq, (p, offset) in stream.acked.items():
        rec = log[(p, offset)]
        assert (rec.key, rec.value, rec.headers) == (
            f"user-{seq % stream.keys}".encode(),
            str(seq).encode(),
            (("seq", str(seq).encode()),),
        ), f"seq {seq} acked at {p}/{offset}: {rec}"


def assert_table_is_topic(rows: list[dict[str, Any]], log: dict[tuple[int, int], Record]) -> None:
    """Each record of ``log`` (by (partition, offset)) is in ``rows`` exactly once, no
    row is outside the topic, and every row carries its record's key, value, header and
    timestamp.

    Raises:
        AssertionError: a duplicate, missing or foreign row, or a field that differs.
    """
    where = Counter(
        (r["_kafka_metadata"]["partition"], r["_kafka_metadata"]["offset"]) for r in rows
    )
    duplicates = sorted(w for w, n in where.items() if n > 1)
    missing = sorted(set(log) - set(where))
    extra = sorted(set(where) - set(log))
    assert not (duplicates or missing or extra), (
        f"{len(rows)} rows for {len(log)} records; duplicated {len(duplicates)} "
        f"{duplicates[:10]}, missing {len(missing)} {missing[:10]}, not in the topic "
        f"{extra[:10]}"
    )
    for row in rows:
        meta = row["_kafka_metadata"]
        at = f"row at {meta['partition']}/{meta['offset']}"
        rec = log[(meta["partition"], meta["offset"])]
        # helpers are not assertion-rewritten by pytest: the messages say what differs
        assert rec.key is not None and rec.value is not None, f"{at}: {rec}"
        assert (row["_kafka_key"], row["_kafka_value"], list(row["_kafka_header"])) == (
            rec.key.decode(),
            rec.value.decode(),
            list(rec.headers),
        ), at
        ts = int(meta["timestamp"].timestamp() * 1000)
        assert ts == rec.timestamp, f"{at}: timestamp {ts}, the record's {rec.timestamp}"


def upserted_view(log: dict[tuple[int, int], Record]) -> dict[tuple[int, int], Record]:
    """The records of ``log`` an upsert table by key holds: each key's last (the highest
    offset; a stream whose key decides its partition, so offsets compare).

    Raises:
        AssertionError: a key found in two partitions.
    """
    last: dict[bytes | None, tuple[int, int]] = {}
    for where in sorted(log):
        key = log[where].key
        if key in last:
            assert last[key][0] == where[0], f"key {key!r} in partitions {last[key][0]}, {where[0]}"
        last[key] = where
    return {where: log[where] for where in last.values()}


def wait_caught_up(
    read: Callable[[], dict[int, int]], ends: dict[int, int], b: Broker, what: str = ""
) -> None:
    """Wait until the table's offsets (``read``) are the log ends; fail when they stand
    still for ``CATCH_UP_STALL_S`` (a slow round is fine, a stuck table is not)."""
    seen, deadline = read(), time.monotonic() + CATCH_UP_STALL_S
    while seen != ends:
        assert time.monotonic() < deadline, (
            f"{what}table at {seen} for {CATCH_UP_STALL_S} s, log ends {ends}:\n{b.stderr_tail()}"
        )
        b.assert_alive()
        time.sleep(0.5)
        now = read()
        if now != seen:
            seen, deadline = now, time.monotonic() + CATCH_UP_STALL_S
