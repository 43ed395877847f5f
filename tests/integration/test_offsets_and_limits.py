"""Offsets by timestamp, seeking, multi-segment fetches, size limits and unknown topics."""

from __future__ import annotations

import asyncio
import os
import random
import string
import subprocess
import time

import confluent_kafka as ck
import pytest

from helpers.admin import admin, create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import CONSUMERS, PRODUCERS, confluent_consumer, confluent_produce, kcat_path
from helpers.records import Record, assert_same_records, recent_ts, sample_records

BASE_TS = recent_ts()
PY_CLIENTS = ("confluent", "kafka-python", "aiokafka")


@pytest.fixture(scope="module")
def timed_topic(broker: Broker) -> str:
    """20 records at BASE_TS + i s, offsets 0..19, in one partition."""
    topic = create_topic(broker.bootstrap, partitions=1)
    confluent_produce(broker.bootstrap, topic, sample_records(20, base_ts=BASE_TS))
    return topic


def offsets_for_times(client: str, bootstrap: str, topic: str, ts: int) -> int | None:
    """The earliest offset whose timestamp is >= ts, as each client reports it."""
    if client == "confluent":
        c = confluent_consumer(bootstrap)
        try:
            (tp,) = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=30)
            assert tp.error is None, tp.error
            return None if tp.offset < 0 else int(tp.offset)
        finally:
            c.close()
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        kc = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        try:
            found = kc.offsets_for_times({TopicPartition(topic, 0): ts})
        finally:
            kc.close()
        hit = found[TopicPartition(topic, 0)]
        return None if hit is None else int(hit.offset)
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run() -> int | None:
        ac = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await ac.start()
        try:
            found = await ac.offsets_for_times({ATopicPartition(topic, 0): ts})
        finally:
            await ac.stop()
        hit = found[ATopicPartition(topic, 0)]
        return None if hit is None else int(hit.offset)

    return asyncio.run(run())


@pytest.mark.parametrize("client", PY_CLIENTS)
def test_offsets_for_times(broker: Broker, timed_topic: str, client: str) -> None:
    def lookup(ts: int) -> int | None:
        return offsets_for_times(client, broker.bootstrap, timed_topic, ts)

    assert lookup(BASE_TS - 10_000) == 0
    assert lookup(BASE_TS) == 0
    assert lookup(BASE_TS + 5_500) == 6
    assert lookup(BASE_TS + 19_000) == 19
    assert lookup(BASE_TS + 19_001) is None


@pytest.mark.parametrize("client", [*PY_CLIENTS, "kcat"])
def test_consume_from_a_seeked_offset(broker: Broker, timed_topic: str, client: str) -> None:
    if client == "kcat":  # kcat's JSON output is text: read a text topic
        topic = create_topic(broker.bootstrap)
        records = sample_records(20, text=True)
        PRODUCERS["kcat"](broker.bootstrap, topic, records)
    else:
        topic, records = timed_topic, sample_records(20, base_ts=BASE_TS)
    got = CONSUMERS[client](broker.bootstrap, topic, {0: 20}, {0: 13})
    assert [r.offset for r in got] == list(range(13, 20))
    assert_same_records(got, records[13:], client)


def test_seek_back_and_forth_while_consuming(broker: Broker, timed_topic: str) -> None:
    c = confluent_consumer(broker.bootstrap)
    try:
        c.assign([ck.TopicPartition(timed_topic, 0, 0)])

        def next_offset() -> int:
            for _ in range(60):
                msg = c.poll(0.5)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    return int(msg.offset())
            raise AssertionError("no record within 30 s")

        assert next_offset() == 0
        c.seek(ck.TopicPartition(timed_topic, 0, 17))
        assert next_offset() == 17
        c.seek(ck.TopicPartition(timed_topic, 0, 4))
        assert [next_offset() for _ in range(3)] == [4, 5, 6]
    finally:
        c.close()


def segment_files(broker: Broker, topic: str) -> list[str]:
    return [
        os.path.join(d, f)
        for d, _, files in os.walk(broker.data_dir)
        if topic in d
        for f in files
        if f.endswith(".log")
    ]


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_fetch_spans_many_segments(broker: Broker, client: str) -> None:
    topic = create_topic(broker.bootstrap, config={"segment.bytes": "4096"})
    records = sample_records(400)
    # Small batches so the log rolls many times.
    confluent_produce(broker.bootstrap, topic, records, **{"batch.num.messages": 7})
    assert len(segment_files(broker, topic)) >= 5, segment_files(broker, topic)

    assert_same_records(CONSUMERS[client](broker.bootstrap, topic, {0: 400}), records, client)
    mid = CONSUMERS[client](broker.bootstrap, topic, {0: 400}, {0: 251})
    assert [r.offset for r in mid] == list(range(251, 400))
    assert_same_records(mid, records[251:], client)


MAX_MESSAGE_BYTES = 100_000


def big_value(size: int) -> bytes:
    """Incompressible, printable (kcat-safe) bytes."""
    rng = random.Random(size)
    return "".join(rng.choices(string.ascii_letters, k=size)).encode()


def too_large_error(client: str) -> tuple[type[BaseException], ...]:
    if client == "kafka-python":
        from kafka.errors import MessageSizeTooLargeError

        return (MessageSizeTooLargeError,)
    if client == "aiokafka":
        from aiokafka.errors import MessageSizeTooLargeError as AioTooLarge

        return (AioTooLarge,)
    return (ck.KafkaException,)


@pytest.mark.parametrize("client", [*PY_CLIENTS, "kcat"])
def test_message_size_limit(broker: Broker, client: str) -> None:
    topic = create_topic(broker.bootstrap, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    near = Record(b"big", big_value(MAX_MESSAGE_BYTES - 500), partition=0)
    over = Record(b"big", big_value(MAX_MESSAGE_BYTES + 1000), partition=0)

    PRODUCERS[client](broker.bootstrap, topic, [near])
    got = CONSUMERS["confluent"](broker.bootstrap, topic, {0: 1})
    assert got[0].value == near.value

    if client == "kcat":
        with pytest.raises(AssertionError, match=r"(?i)too large"):
            PRODUCERS[client](broker.bootstrap, topic, [over])
    else:
        with pytest.raises(too_large_error(client)) as info:
            PRODUCERS[client](broker.bootstrap, topic, [over])
        if client == "confluent":
            assert info.value.args[0].code() == ck.KafkaError.MSG_SIZE_TOO_LARGE
    assert watermarks(broker.bootstrap, topic, 1) == {0: (0, 1)}


def assert_topic_absent(broker: Broker, topic: str) -> None:
    md = admin(broker.bootstrap).list_topics(timeout=30)
    assert topic not in md.topics or md.topics[topic].error is not None, "auto-created"


def test_unknown_topic_confluent(broker: Broker) -> None:
    topic = unique_topic("absent")
    with pytest.raises(ck.KafkaException) as info:
        confluent_produce(
            broker.bootstrap,
            topic,
            [Record(b"k", b"v")],
            **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 20000},
        )
    assert info.value.args[0].code() in (
        ck.KafkaError.UNKNOWN_TOPIC_OR_PART,
        ck.KafkaError._UNKNOWN_TOPIC,
    )
    assert_topic_absent(broker, topic)


def test_unknown_topic_kafka_python(broker: Broker) -> None:
    from kafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError

    topic = unique_topic("absent")
    # kafka-python reports an unknown topic as a metadata wait that times out.
    with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
        PRODUCERS["kafka-python"](broker.bootstrap, topic, [Record(b"k", b"v")], max_block_ms=3000)
    assert_topic_absent(broker, topic)


def test_unknown_topic_aiokafka(broker: Broker) -> None:
    from aiokafka.errors import UnknownTopicOrPartitionError

    topic = unique_topic("absent")
    with pytest.raises(UnknownTopicOrPartitionError):
        PRODUCERS["aiokafka"](
            broker.bootstrap, topic, [Record(b"k", b"v")], request_timeout_ms=3000
        )
    assert_topic_absent(broker, topic)


def test_unknown_topic_kcat(broker: Broker) -> None:
    topic = unique_topic("absent")
    proc = subprocess.run(
        [
            kcat_path(),
            "-P",
            "-b",
            broker.bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-X",
            "topic.metadata.propagation.max.ms=1000",
        ],
        input=b"v\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert b"nknown topic" in proc.stderr, proc.stderr
    assert_topic_absent(broker, topic)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_fetch_beyond_the_log_end_resets(broker: Broker, reset: str) -> None:
    """A fetch at an offset past the end gets OFFSET_OUT_OF_RANGE; the client resets."""
    topic = create_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, sample_records(10))
    c = confluent_consumer(
        broker.bootstrap, **{"auto.offset.reset": reset, "enable.partition.eof": True}
    )
    try:
        c.assign([ck.TopicPartition(topic, 0, 1000)])
        if reset == "latest":
            # Parked at the end: the end-of-partition event names offset 10. Only records
            # produced from now on arrive.
            deadline = time.monotonic() + 30
            while True:
                assert time.monotonic() < deadline, "no end-of-partition event"
                msg = c.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is not None, f"consumed offset {msg.offset()}"
                assert msg.error().code() == ck.KafkaError._PARTITION_EOF, msg.error()
                assert msg.offset() == 10
                break
            confluent_produce(broker.bootstrap, topic, [Record(b"k", b"new", partition=0)])
        first = None
        deadline = time.monotonic() + 30
        while first is None:
            assert time.monotonic() < deadline, "nothing consumed after the reset"
            msg = c.poll(0.5)
            if msg is not None and not (
                msg.error() and msg.error().code() == ck.KafkaError._PARTITION_EOF
            ):
                assert msg.error() is None, msg.error()
                first = msg
    finally:
        c.close()
    assert first.offset() == (0 if reset == "earliest" else 10)
