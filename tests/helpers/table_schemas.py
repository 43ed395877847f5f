"""Produce to a table topic through a real broker and wait for its table to commit
(shared by the schema-mode table-topic tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from floe.config import BrokerConfig
from floe.tabletopic import catalog as cat
from helpers.broker import Broker

DEADLINE_S = 120.0


def produce(
    broker: Broker, topic: str, messages: list[tuple[bytes | None, bytes | None, int]]
) -> list[tuple[int, int]]:
    """Produce (key, value, partition) triples; returns (partition, offset) per message."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    where: list[tuple[int, int] | None] = [None] * len(messages)
    errors: list[Any] = []

    def done(i: int) -> Callable[[Any, Any], None]:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                where[i] = (msg.partition(), msg.offset())

        return callback

    for i, (key, value, partition) in enumerate(messages):
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            headers=[("i", str(i).encode())],
            on_delivery=done(i),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return [w for w in where if w is not None]


def wait_committed(config: BrokerConfig, table: str, ends: dict[int, int]) -> None:
    """Until the newest floe snapshot's offsets reach ``ends`` (partition -> end)."""
    settings = cat.CatalogSettings.from_config(config)
    deadline = time.monotonic() + DEADLINE_S
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            loaded = cat.load_table(cat.load_catalog(settings), "default", table)
            seen = {int(p): int(o) for p, o in cat.read_recorded(loaded).committed.items()}
            if all(seen.get(p, 0) >= e for p, e in ends.items()):
                return
        except Exception:  # not created yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"table {table} committed {seen}, expected {ends}")


def ends_of(where: list[tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, o in where:
        out[p] = max(out.get(p, 0), o + 1)
    return out
