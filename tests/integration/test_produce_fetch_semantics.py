"""Produce acks levels, LogAppendTime, auto-create, long-poll fetches, fetch size limits
and bulk transfers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import (
    CODECS,
    CONSUMERS,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
)
from helpers.records import Record, assert_same_records, recent_ts, sample_records


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


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_fetch_limits_smaller_than_a_batch_still_progress(broker: Broker, client: str) -> None:
    """Kafka returns at least one whole batch even when it exceeds the fetch limits."""
    topic = create_topic(broker.bootstrap)
    records = [Record(b"k%d" % i, bytes([i]) * 20_000, partition=0) for i in range(12)]
    confluent_produce(broker.bootstrap, topic, records, **{"batch.num.messages": 3})
    tiny = 1024
    if client == "confluent":
        c = confluent_consumer(
            broker.bootstrap,
            # librdkafka insists on fetch.max.bytes >= message.max.bytes (its own minimum)
            **{
                "fetch.max.bytes": tiny,
                "max.partition.fetch.bytes": tiny,
                "message.max.bytes": tiny,
            },
        )
        try:
            c.assign([ck.TopicPartition(topic, 0, 0)])
            got: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while len(got) < len(records):
                assert time.monotonic() < deadline, f"stuck after {len(got)} records"
                msg = c.poll(0.5)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    got.append(msg.value())
        finally:
            c.close()
        assert got == [r.value for r in records]
        return
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        kc = KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_bytes=tiny,
            max_partition_fetch_bytes=tiny,
        )
        try:
            tp = TopicPartition(topic, 0)
            kc.assign([tp])
            kc.seek(tp, 0)
            values: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while len(values) < len(records):
                assert time.monotonic() < deadline, f"stuck after {len(values)} records"
                for msgs in kc.poll(timeout_ms=500).values():
                    values += [m.value for m in msgs]
        finally:
            kc.close()
        assert values == [r.value for r in records]
        return

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> list[bytes | None]:
        ac = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_bytes=tiny,
            max_partition_fetch_bytes=tiny,
        )
        await ac.start()
        try:
            tp = ATopicPartition(topic, 0)
            ac.assign([tp])
            ac.seek(tp, 0)
            out: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while len(out) < len(records):
                assert time.monotonic() < deadline, f"stuck after {len(out)} records"
                for msgs in (await ac.getmany(timeout_ms=500)).values():
                    out += [m.value for m in msgs]
            return out
        finally:
            await ac.stop()

    assert asyncio.run(run()) == [r.value for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_bulk_round_trip(broker: Broker, codec: str) -> None:
    """Thousands of compressible records: large batches, many fetch responses."""
    topic = create_topic(broker.bootstrap, partitions=2)
    records = [
        Record(b"key-%d" % (i % 100), b"payload %06d " % i * 40, partition=i % 2)
        for i in range(6000)
    ]
    acked = confluent_produce(broker.bootstrap, topic, records, codec, **{"linger.ms": 50})
    ends = {p: 3000 for p in (0, 1)}
    assert watermarks(broker.bootstrap, topic, 2) == {0: (0, 3000), 1: (0, 3000)}
    got = CONSUMERS["aiokafka"](broker.bootstrap, topic, ends)
    for p in (0, 1):
        assert_same_records(
            sorted((r for r in got if r.partition == p), key=lambda r: r.offset or 0),
            [r for r in acked if r.partition == p],
            f"partition {p}",
        )
