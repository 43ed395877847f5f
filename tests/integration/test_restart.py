"""What a client was told survives a clean restart and a ``kill -9``: records, log start
and end offsets, topic configs and partition counts. On both storage engines; on object
storage a ``kill -9`` also loses the whole data directory (the bucket has everything)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import (
    confluent_config,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
)
from helpers.records import Record, assert_same_records, sample_records

T = ADMIN_TIMEOUT_S


def snapshot(b: Broker, topics: dict[str, int]) -> dict[str, object]:
    """Everything a client can observe about the topics (partitions, offsets, configs)."""
    a = admin(b.bootstrap)
    state: dict[str, object] = {}
    described = a.describe_topics(ck.TopicCollection(list(topics)), request_timeout=T)
    for name, future in described.items():
        state[f"{name}/partitions"] = len(future.result(T).partitions)
    for name, partitions in topics.items():
        state[f"{name}/watermarks"] = watermarks(b.bootstrap, name, partitions)
        res = ConfigResource(ResourceType.TOPIC, name)
        entries = a.describe_configs([res])[res].result(T)
        state[f"{name}/configs"] = {k: (e.value, e.source) for k, e in entries.items()}
    return state


def read_all(b: Broker, topic: str, partitions: int) -> list[Record]:
    marks = watermarks(b.bootstrap, topic, partitions)
    return confluent_consume(
        b.bootstrap,
        topic,
        {p: hi for p, (_, hi) in marks.items()},
        {p: lo for p, (lo, _) in marks.items()},
    )


def by_partition(records: list[Record], partitions: int) -> list[list[Record]]:
    return [[r for r in records if r.partition == p] for p in range(partitions)]


def crash(b: Broker) -> None:
    """kill -9; on object storage the disk goes too."""
    b.kill()
    if b.on_object_storage:
        b.lose_disk()
    b.start()


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_state_survives_restart(engine_broker_factory: Callable[..., Broker], how: str) -> None:
    b = engine_broker_factory({"log.segment.bytes": "8192"})
    a = admin(b.bootstrap)
    main = create_topic(
        b.bootstrap,
        partitions=3,
        config={
            "retention.ms": "86400000",
            "max.message.bytes": "50000",
            "table.topic.enable": "true",
        },
    )
    grown = create_topic(b.bootstrap, partitions=1)
    a.create_partitions([ck.admin.NewPartitions(grown, 4)], request_timeout=T)[grown].result(T)
    res = ConfigResource(
        ResourceType.TOPIC,
        main,
        incremental_configs=[
            ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    a.incremental_alter_configs([res])[res].result(T)
    empty = create_topic(b.bootstrap, partitions=2, config={"segment.bytes": "100000"})

    records = [replace(r, partition=i % 3) for i, r in enumerate(sample_records(300))]
    acked = confluent_produce(b.bootstrap, main, records, "zstd", **{"batch.num.messages": 9})
    confluent_produce(b.bootstrap, grown, sample_records(10, partition=3))
    tp = ck.TopicPartition(main, 0, 40)
    a.delete_records([tp], request_timeout=T)[tp].result(T)
    gone = create_topic(b.bootstrap, partitions=2)
    confluent_produce(b.bootstrap, gone, sample_records(5))
    a.delete_topics([gone], operation_timeout=T, request_timeout=T)[gone].result(T)
    topics = {main: 3, grown: 4, empty: 2}
    before = snapshot(b, topics)
    assert before[f"{main}/watermarks"] == {0: (40, 100), 1: (0, 100), 2: (0, 100)}
    # `floe up --set log.segment.bytes=8192` is the default of topics that set nothing.
    assert before[f"{main}/configs"]["segment.bytes"] == (  # type: ignore[index]
        "8192",
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )

    if how == "sigterm":
        b.restart()  # SIGTERM, exit code 0 asserted, start on the same port and data dir
    else:
        crash(b)

    assert snapshot(b, topics) == before
    with pytest.raises(ck.KafkaException) as info:
        a.describe_topics(ck.TopicCollection([gone]), request_timeout=T)[gone].result(T)
    assert info.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, "deleted topic is back"
    got = by_partition(read_all(b, main, 3), 3)
    want = by_partition(acked, 3)
    want[0] = [r for r in want[0] if r.offset is not None and r.offset >= 40]
    for p in range(3):
        assert_same_records(got[p], want[p], f"partition {p}")

    # The log continues where it left off, and that too survives a further restart.
    more = confluent_produce(b.bootstrap, main, sample_records(5, partition=1))
    assert [r.offset for r in more] == list(range(100, 105))
    crash(b)
    after = watermarks(b.bootstrap, main, 3)
    assert after == {0: (40, 100), 1: (0, 105), 2: (0, 100)}
    assert_same_records(confluent_consume(b.bootstrap, main, {1: 105}, {1: 100}), more)
    b.stop()


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_live_consumer_and_producer_ride_through_a_restart(
    broker_factory: Callable[..., Broker], how: str
) -> None:
    """Clients kept open across a broker restart carry on: no gap, no duplicate."""
    b = broker_factory()
    topic = create_topic(b.bootstrap, partitions=2)
    producer = ck.Producer(
        confluent_config(
            b.bootstrap,
            **{"acks": "all", "enable.idempotence": False, "reconnect.backoff.max.ms": 500},
        )
    )
    consumer = confluent_consumer(b.bootstrap, **{"reconnect.backoff.max.ms": 500})
    errors: list[object] = []

    def send(values: range) -> None:
        for i in values:
            producer.produce(
                topic,
                value=b"%d" % i,
                partition=i % 2,
                on_delivery=lambda e, m: e and errors.append(e),
            )
        assert producer.flush(60) == 0 and not errors, errors

    def receive(count: int) -> list[tuple[int, int, int]]:
        got: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 60
        while len(got) < count:
            assert time.monotonic() < deadline, f"received {got}"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.partition(), msg.offset(), int(msg.value())))
        return got

    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in (0, 1)])
        send(range(20))
        first = receive(20)
        if how == "sigterm":
            b.restart()
        else:
            b.kill()
            b.start()
        send(range(20, 40))
        second = receive(20)
    finally:
        consumer.close()
    # Value i went to partition i % 2 at offset i // 2, once.
    everything = sorted(first + second)
    assert everything == [(p, o, 2 * o + p) for p in (0, 1) for o in range(20)]
    b.stop()
