"""Transactional and isolation-aware client shortcuts (confluent-kafka)."""

from __future__ import annotations

import time

import confluent_kafka as ck

from helpers.clients import confluent_config, confluent_consumer


def txn_producer(bootstrap: str, transactional_id: str, **extra: object) -> ck.Producer:
    """A transactional producer with ``init_transactions()`` done."""
    producer = ck.Producer(
        confluent_config(
            bootstrap,
            **{"transactional.id": transactional_id, "linger.ms": 2, **extra},
        )
    )
    producer.init_transactions(30)
    return producer


def consume_values(
    bootstrap: str,
    topic: str,
    partitions: int,
    isolation: str,
    expected: int,
    *,
    settle_s: float = 1.0,
    deadline_s: float = 30.0,
) -> list[tuple[int, bytes]]:
    """(partition, value) of every record an assigned consumer with ``isolation.level``
    returns: polls until ``expected`` records arrived, then ``settle_s`` more to catch
    extras.

    Raises:
        AssertionError: fewer than ``expected`` records within ``deadline_s``.
    """
    consumer = confluent_consumer(bootstrap, **{"isolation.level": isolation})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + deadline_s
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if settle_until is None and len(got) >= expected:
                settle_until = now + settle_s
            if settle_until is not None and now >= settle_until:
                return got
            if now > deadline:
                raise AssertionError(f"{isolation}: {len(got)} of {expected} records")
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                        continue
                    raise ck.KafkaException(msg.error())
                got.append((int(msg.partition()), bytes(msg.value())))
    finally:
        consumer.close()
