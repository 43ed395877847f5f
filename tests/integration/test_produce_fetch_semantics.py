"""Produce acks levels, LogAppendTime topics and long-poll fetches (confluent-kafka)."""

from __future__ import annotations

import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import (
    Record,
    assert_same_records,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    recent_ts,
    sample_records,
)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_level_stores_the_records(broker: Broker, acks: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    records = sample_records(50, partition=1)
    acked = confluent_produce(broker.bootstrap, topic, records, "snappy", acks=acks)
    if acks != "0":  # acks=0 has no answer, hence no offsets
        assert [r.offset for r in acked] == list(range(50))
    # acks=0 is fire-and-forget: wait for the records to land, then read them.
    deadline = time.monotonic() + 30
    while watermarks(broker.bootstrap, topic, 2)[1][1] < 50:
        assert time.monotonic() < deadline, watermarks(broker.bootstrap, topic, 2)
        time.sleep(0.05)
    assert watermarks(broker.bootstrap, topic, 2) == {0: (0, 0), 1: (0, 50)}
    assert_same_records(confluent_consume(broker.bootstrap, topic, {1: 50}), records)


def test_log_append_time_topic_stamps_records(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap, config={"message.timestamp.type": "LogAppendTime"})
    old = recent_ts() - 86_400_000
    before = int(time.time() * 1000)
    confluent_produce(
        broker.bootstrap, topic, [Record(b"k", b"v%d" % i, (), old, 0) for i in range(5)]
    )
    c = confluent_consumer(broker.bootstrap)
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        stamps = []
        deadline = time.monotonic() + 30
        while len(stamps) < 5:
            assert time.monotonic() < deadline, f"only {len(stamps)} records"
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                stamps.append(msg.timestamp())
    finally:
        c.close()
    # One batch, one append time; the producer's CreateTime is replaced.
    assert {kind for kind, _ in stamps} == {ck.TIMESTAMP_LOG_APPEND_TIME}
    assert all(ts >= before for _, ts in stamps), (before, stamps)


def test_long_poll_fetch_delivers_records_produced_later(broker: Broker) -> None:
    """A consumer parked at the log end gets a record appended while it waits."""
    topic = create_topic(broker.bootstrap)
    c = confluent_consumer(
        broker.bootstrap, **{"fetch.wait.max.ms": 2000, "enable.partition.eof": True}
    )
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while True:  # wait until the consumer reached the (empty) log end
            assert time.monotonic() < deadline, "no partition EOF"
            msg = c.poll(0.5)
            if (
                msg is not None
                and msg.error()
                and msg.error().code() == ck.KafkaError._PARTITION_EOF
            ):
                break
        confluent_produce(broker.bootstrap, topic, [Record(b"late", b"arrival", partition=0)])
        got = None
        while got is None:
            assert time.monotonic() < deadline, "the parked fetch never returned the record"
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got = msg
        assert (got.offset(), got.key(), got.value()) == (0, b"late", b"arrival")
    finally:
        c.close()


def test_auto_create_on_produce(broker_factory: Callable[..., Broker]) -> None:
    """With auto-create on, producing to an unknown topic creates it (num.partitions)."""
    b = broker_factory({"auto.create.topics.enable": "true", "num.partitions": "3"})
    topic = unique_topic("auto")
    acked = confluent_produce(b.bootstrap, topic, [Record(b"k", b"v", partition=2)])
    assert (acked[0].partition, acked[0].offset) == (2, 0)
    assert watermarks(b.bootstrap, topic, 3) == {0: (0, 0), 1: (0, 0), 2: (0, 1)}
    b.stop()
