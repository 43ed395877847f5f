"""The unmodified Apache Kafka Java client (kafka-clients 3.9.1) against a real broker.

Invariants: the AdminClient creates, describes and lists topics and describes the
cluster; every value an idempotent acks=all Java producer had acknowledged (each codec)
is read exactly once, at its acknowledged partition and offset, by a Java group consumer
whose synchronous commits leave the group at the end offsets; a Java read_committed
consumer sees a Java transaction's committed values only, while a read_uncommitted one
sees the aborted ones too; the Java Admin finds a transaction left open on a partition
and aborts it there (WriteTxnMarkers), freeing read_committed consumers; long-running Java
producer and consumer processes (the ones the failover test drives) agree value for
value. Each test checks its data first and the broker's log last.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions

from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import CODECS, confluent_consume, confluent_produce
from helpers.java import Event, FloeJava, done, events, floe_clients
from helpers.records import Record
from helpers.txn import consume_values, txn_producer

PARTITIONS = 3
COUNT = 300
CONSUME_TIMEOUT_MS = 30_000
STREAM_RUN_S = 3.0


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> FloeJava:
    return floe_clients(tmp_path_factory)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """This module's broker; topics are created explicitly, each test its own. Every group
    here has one member, so the first rebalance need not wait for more (saves 3 s a group)."""
    settings = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
    b = Broker(tmp_path_factory.mktemp("java-clients") / "data", settings)
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


@pytest.fixture
def log_mark(kafka: Broker) -> int:
    """Where the broker's log stood when the test began (see :func:`assert_log_clean`)."""
    return len(kafka.stderr_text())


def assert_log_clean(broker: Broker, mark: int) -> None:
    """No ERROR line and no traceback in what the broker logged since ``mark``."""
    new = broker.stderr_text()[mark:]
    bad = [line for line in new.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad[:20])


def assert_exactly_once(got: list[Event], acked: list[Event]) -> None:
    """``got`` holds each acknowledged value once, where it was acknowledged, and no more."""
    doubled = [v for v, n in Counter(e.value for e in got).items() if n > 1]
    assert not doubled, f"{len(doubled)} values read twice, e.g. {doubled[:5]}"
    missing = set(acked) - set(got)
    assert not missing, f"{len(missing)} acknowledged values not read, e.g. {sorted(missing)[:5]}"
    extra = set(got) - set(acked)
    assert not extra, f"{len(extra)} unexpected values read: {sorted(extra)[:5]}"


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka's AdminClient reads them."""
    request = [ConsumerGroupTopicPartitions(group)]
    result: Any = (
        admin(bootstrap).list_consumer_group_offsets(request)[group].result(ADMIN_TIMEOUT_S)
    )
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def test_admin_client(java: FloeJava, kafka: Broker, log_mark: int) -> None:
    topic = unique_topic("java-admin")
    lines = java.run("admin", kafka.bootstrap, topic, PARTITIONS)

    assert f"EXISTS {topic}" in lines, "a second CreateTopics was not refused as TopicExists"
    assert f"LISTED {topic}" in lines
    nodes = {
        int(line.split(" ")[1]): line.split(" ")[2:] for line in lines if line.startswith("NODE ")
    }
    assert list(nodes.values()) == [[kafka.host, str(kafka.port)]]
    partitions = [
        [int(f) for f in line.split(" ")[1:]] for line in lines if line.startswith("PARTITION ")
    ]
    assert sorted(p for p, *_ in partitions) == list(range(PARTITIONS))
    for _, leader, replicas, isr in partitions:
        assert leader in nodes and (replicas, isr) == (1, 1)
    (cluster,) = (line.split(" ") for line in lines if line.startswith("CLUSTER "))
    assert cluster[1] and int(cluster[2]) in nodes
    # another client sees the topic the Java AdminClient made
    assert watermarks(kafka.bootstrap, topic, PARTITIONS) == {p: (0, 0) for p in range(PARTITIONS)}
    assert_log_clean(kafka, log_mark)


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_then_group_consume(
    java: FloeJava, kafka: Broker, log_mark: int, codec: str
) -> None:
    topic = create_topic(kafka.bootstrap, partitions=PARTITIONS)
    produced = java.run("produce", kafka.bootstrap, topic, COUNT, codec)
    acked = events(produced, "ACK")
    assert sorted(e.value for e in acked) == sorted(f"{codec}-{i}" for i in range(COUNT))
    ends = {p: hi for p, (_, hi) in watermarks(kafka.bootstrap, topic, PARTITIONS).items()}
    for p in range(PARTITIONS):
        offsets = sorted(e.offset for e in acked if e.partition == p)
        assert offsets == list(range(ends[p])), f"partition {p}: acks not dense up to the end"
    assert all(ends.values()), f"the keys did not spread over the partitions: {ends}"

    group = unique_topic("java-group")
    consumed = java.run("consume", kafka.bootstrap, topic, group, COUNT, CONSUME_TIMEOUT_MS)
    assert_exactly_once(events(consumed, "GOT"), acked)
    assert group_offsets(kafka.bootstrap, group) == ends
    # librdkafka reads the Java client's batches too
    python_read = confluent_consume(kafka.bootstrap, topic, ends)
    assert sorted((r.value or b"").decode() for r in python_read) == sorted(e.value for e in acked)
    assert_log_clean(kafka, log_mark)


def test_transaction_read_committed(java: FloeJava, kafka: Broker, log_mark: int) -> None:
    topic = create_topic(kafka.bootstrap, partitions=PARTITIONS)
    n = 50
    produced = java.run("txn", kafka.bootstrap, topic, unique_topic("java-txn"), n)
    assert f"ABORTED {n}" in produced and f"COMMITTED {n}" in produced
    acked = events(produced, "ACK")
    committed = [e for e in acked if e.value.startswith("committed-")]
    assert sorted(e.value for e in committed) == sorted(f"committed-{i}" for i in range(n))
    assert len(acked) == 2 * n

    # The aborted values come first in every partition: a consumer shown them would
    # read them before it had its n values.
    group = unique_topic("java-rc")
    rc = java.run("read-committed", kafka.bootstrap, topic, group, n, CONSUME_TIMEOUT_MS)
    assert_exactly_once(events(rc, "GOT"), committed)
    group = unique_topic("java-ru")
    ru = java.run("consume", kafka.bootstrap, topic, group, 2 * n, CONSUME_TIMEOUT_MS)
    assert_exactly_once(events(ru, "GOT"), acked)
    python_rc = consume_values(kafka.bootstrap, topic, PARTITIONS, "read_committed", n)
    assert sorted(v.decode() for _, v in python_rc) == sorted(e.value for e in committed)
    assert_log_clean(kafka, log_mark)


def test_admin_aborts_a_hanging_transaction(java: FloeJava, kafka: Broker, log_mark: int) -> None:
    """A transaction left open on a partition holds read_committed consumers at its first
    offset until it times out. Kafka's remedy, what ``kafka-transactions.sh abort`` runs
    (DescribeProducers, then ``Admin.abortTransaction``: WriteTxnMarkers to the leader),
    ends it there: its records are aborted and read_committed consumers move on."""
    topic = create_topic(kafka.bootstrap, partitions=1)
    tid = unique_topic("java-hanging")
    producer = txn_producer(kafka.bootstrap, tid, **{"transaction.timeout.ms": 600_000})
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"open-{i}".encode(), partition=0)
    producer.flush()
    after = confluent_produce(
        kafka.bootstrap, topic, [Record(None, f"after-{i}".encode(), partition=0) for i in range(2)]
    )
    assert [r.offset for r in after] == [3, 4]
    with pytest.raises(AssertionError, match="0 of 2 records"):  # held at offset 0
        consume_values(kafka.bootstrap, topic, 1, "read_committed", 2, deadline_s=3.0)

    lines = java.run("abort-hanging", kafka.bootstrap, topic, 0)
    hanging = [line.split() for line in lines if line.startswith("HANGING ")]
    assert len(hanging) == 1 and hanging[0][3] == "0", lines
    assert done(lines)["aborted"] == "1"
    got = consume_values(kafka.bootstrap, topic, 1, "read_committed", 2)
    assert [v for _, v in got] == [b"after-0", b"after-1"]
    everything = consume_values(kafka.bootstrap, topic, 1, "read_uncommitted", 5)
    assert len(everything) == 5  # the aborted records stay in the log, marked

    # its coordinator still has it open: the producer aborts it too, without harm
    producer.abort_transaction()
    got = consume_values(kafka.bootstrap, topic, 1, "read_committed", 2)
    assert [v for _, v in got] == [b"after-0", b"after-1"]
    assert_log_clean(kafka, log_mark)


def test_streaming_producer_and_consumer(java: FloeJava, kafka: Broker, log_mark: int) -> None:
    topic = create_topic(kafka.bootstrap, partitions=PARTITIONS)
    group = unique_topic("java-stream")
    with (
        java.start("stream-consume", kafka.bootstrap, topic, group) as consumer,
        java.start("stream-produce", kafka.bootstrap, topic, "s") as producer,
    ):
        producer.wait_for(lambda lines: bool(events(lines, "ACK")), 30, "a first ACK")
        consumer.wait_for(lambda lines: bool(events(lines, "GOT")), 30, "a first GOT")
        time.sleep(STREAM_RUN_S)
        produced = producer.stop()
        acked = events(produced, "ACK")
        sent = int(done(produced)["sent"])
        assert sent > 0 and done(produced) == {"acked": str(sent), "failed": "0", "sent": str(sent)}
        assert sorted(e.value for e in acked) == sorted(f"s-{i}" for i in range(sent))
        values = {e.value for e in acked}
        consumer.wait_for(
            lambda lines: values <= {e.value for e in events(lines, "GOT")}, 60, "every ACK as GOT"
        )
        consumed = consumer.stop()
    assert_exactly_once(events(consumed, "GOT"), acked)
    assert not [line for line in consumed if line.startswith("ERR")]
    assert_log_clean(kafka, log_mark)
