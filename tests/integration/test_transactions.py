"""Transactional producers with confluent-kafka: commit and abort across partitions,
read_committed vs read_uncommitted, zombie fencing, and transaction timeouts."""

from __future__ import annotations

import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, unique_topic
from helpers.broker import Broker
from helpers.txn import consume_values, txn_producer

PARTITIONS = 3


def test_commit_and_abort_interleaved_across_partitions(engine_broker: Broker) -> None:
    broker = engine_broker
    topic = create_topic(broker.bootstrap, partitions=PARTITIONS)
    producer = txn_producer(broker.bootstrap, unique_topic("txn"))
    committed: set[tuple[int, bytes]] = set()
    everything: set[tuple[int, bytes]] = set()
    for t in range(6):
        producer.begin_transaction()
        for i in range(10):
            p = (t + i) % PARTITIONS
            value = b"t%d-%d" % (t, i)
            producer.produce(topic, value=value, partition=p)
            everything.add((p, value))
            if t % 2 == 0:
                committed.add((p, value))
        if t % 2 == 0:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # the data is in the log before the abort
            producer.abort_transaction(30)
    # non-transactional data after the last transaction is visible to both
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(30) == 0
    committed.add((0, b"plain"))
    everything.add((0, b"plain"))

    rc = consume_values(broker.bootstrap, topic, PARTITIONS, "read_committed", len(committed))
    assert sorted(rc) == sorted(committed)
    ru = consume_values(broker.bootstrap, topic, PARTITIONS, "read_uncommitted", len(everything))
    assert sorted(ru) == sorted(everything)


def test_open_transaction_holds_back_read_committed(engine_broker: Broker) -> None:
    broker = engine_broker
    topic = create_topic(broker.bootstrap)
    producer = txn_producer(broker.bootstrap, unique_topic("txn"))
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(30)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(30) == 0
    # the LSO stops at the open transaction: "after" is not visible yet
    assert consume_values(broker.bootstrap, topic, 1, "read_committed", 0, settle_s=1.5) == []
    producer.commit_transaction(30)
    got = consume_values(broker.bootstrap, topic, 1, "read_committed", 2)
    assert got == [(0, b"pending"), (0, b"after")]


def test_zombie_producer_is_fenced(engine_broker: Broker) -> None:
    broker = engine_broker
    topic = create_topic(broker.bootstrap)
    tid = unique_topic("zombie")
    zombie = txn_producer(broker.bootstrap, tid)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    successor = txn_producer(broker.bootstrap, tid)  # fences the zombie, aborts its txn
    with pytest.raises(ck.KafkaException) as info:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert consume_values(broker.bootstrap, topic, 1, "read_committed", 1) == [(0, b"successor")]


def test_transaction_timeout_aborts(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = create_topic(b.bootstrap)
    producer = txn_producer(b.bootstrap, unique_topic("slow"), **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce(topic, value=b"too-slow", partition=0)
    producer.flush(30)
    time.sleep(2.5)  # the coordinator aborts the transaction and bumps the epoch
    with pytest.raises(ck.KafkaException):
        producer.commit_transaction(30)
    plain = ck.Producer({"bootstrap.servers": b.bootstrap})
    plain.produce(topic, value=b"later", partition=0)
    assert plain.flush(30) == 0
    assert consume_values(b.bootstrap, topic, 1, "read_committed", 1) == [(0, b"later")]
    assert "txn.aborting" in b.stderr_text() and "reason=timeout" in b.stderr_text()
