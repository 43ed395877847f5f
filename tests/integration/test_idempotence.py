"""Idempotent producers: real clients with idempotence on, and the sequence rules over
the raw protocol (a duplicate is answered with its original offset, a gap with
OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch with INVALID_PRODUCER_EPOCH)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

from aiokafka.protocol.produce import ProduceRequest_v3, ProduceResponse_v3
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import aiokafka_produce, confluent_consume, confluent_produce
from helpers.records import sample_records

PID = 987_654


def test_kafka_python_default_producer_is_idempotent(engine_broker: Broker) -> None:
    broker = engine_broker
    from kafka import KafkaProducer

    topic = create_topic(broker.bootstrap, partitions=3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotence on by default
    try:
        futures = [producer.send(topic, value=b"kp-%d" % i, partition=i % 3) for i in range(300)]
        producer.flush(30)
        acked = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    assert sorted((m.partition, m.offset) for m in acked) == sorted(
        (p, o) for p in range(3) for o in range(100)
    )
    got = confluent_consume(broker.bootstrap, topic, {p: 100 for p in range(3)})
    assert sorted(r.value or b"" for r in got) == sorted(b"kp-%d" % i for i in range(300))


def test_confluent_and_aiokafka_idempotent_producers(engine_broker: Broker) -> None:
    broker = engine_broker
    topic = create_topic(broker.bootstrap, partitions=2)
    records = sample_records(200, partition=None)
    acked = confluent_produce(broker.bootstrap, topic, records, **{"enable.idempotence": True})
    acked += aiokafka_produce(broker.bootstrap, topic, records, enable_idempotence=True)
    ends = {p: sum(1 for r in acked if r.partition == p) for p in range(2)}
    got = confluent_consume(broker.bootstrap, topic, ends)
    assert len(got) == len(acked) == 400
    assert {(r.partition, r.offset) for r in got} == {(r.partition, r.offset) for r in acked}
    assert all(r.offset is not None and r.offset < ends[r.partition or 0] for r in got)


def _batch(seq: int, n: int, epoch: int = 0, pid: int = PID) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
    for i in range(n):
        builder.append(i, int(time.time() * 1000), None, b"v%d" % (seq + i), [])
    return bytes(builder.build())


def _produce(s: socket.socket, topic: str, data: bytes, correlation_id: int) -> tuple[int, int]:
    req = ProduceRequest_v3(
        transactional_id=None, required_acks=-1, timeout=5000, topics=[(topic, [(0, data)])]
    )
    hdr = req.build_request_header(correlation_id, "idem")
    payload = hdr.encode() + req.encode()
    s.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    resp = s.recv(size, socket.MSG_WAITALL)
    part = ProduceResponse_v3.decode(resp[4:]).topics[0][1][0]
    return part[1], part[2]  # error code, base offset


def test_sequence_rules_over_the_wire(engine_broker: Broker) -> None:
    broker = engine_broker
    topic = create_topic(broker.bootstrap)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        assert _produce(s, topic, _batch(0, 3), 1) == (0, 0)
        assert _produce(s, topic, _batch(3, 2), 2) == (0, 3)
        assert _produce(s, topic, _batch(0, 3), 3) == (0, 0)  # duplicate: original offset
        assert _produce(s, topic, _batch(3, 2), 4) == (0, 3)
        assert _produce(s, topic, _batch(9, 1), 5)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(s, topic, _batch(0, 1, epoch=1), 6) == (0, 5)  # new epoch from 0
        assert _produce(s, topic, _batch(5, 1, epoch=0), 7)[0] == 47  # INVALID_PRODUCER_EPOCH
    got = confluent_consume(broker.bootstrap, topic, {0: 6})
    assert [r.value for r in got] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v0"]


def test_a_partition_refuses_a_producer_it_never_saw_past_its_first_sequence(
    engine_broker_factory: Callable[..., Broker],
) -> None:
    """A partition that knows every producer that wrote to it (its state built from
    offset 0 or from snapshots, none expired) answers OUT_OF_ORDER_SEQUENCE_NUMBER to a
    producer it never saw whose first batch is past sequence 0, before and after a
    restart: that producer's earlier batches never landed, and taking the later one lets
    librdkafka acknowledge them without an offset (the lost write of etcd chaos seed
    731502)."""
    broker = engine_broker_factory()
    topic = create_topic(broker.bootstrap)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        assert _produce(s, topic, _batch(23, 2), 1)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(s, topic, _batch(0, 3), 2) == (0, 0)
    broker.restart()
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        assert _produce(s, topic, _batch(5, 1, pid=PID + 1), 3)[0] == 45
        assert _produce(s, topic, _batch(3, 1), 4) == (0, 3)
    got = confluent_consume(broker.bootstrap, topic, {0: 4})
    assert [r.value for r in got] == [b"v0", b"v1", b"v2", b"v3"]


def test_once_producers_expired_an_unknown_one_is_taken_at_any_sequence(
    engine_broker_factory: Callable[..., Broker],
) -> None:
    """Once a partition has forgotten idle producers (``producer.id.expiration.ms``), a
    producer it does not know may be one of them, back with its next sequence: it is
    taken at any sequence, as Kafka 2.5+ does (KIP-360)."""
    broker = engine_broker_factory(
        {"producer.id.expiration.ms": "1000", "log.retention.check.interval.ms": "300"}
    )
    topic = create_topic(broker.bootstrap)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        assert _produce(s, topic, _batch(0, 2), 1) == (0, 0)
        deadline = time.monotonic() + 30
        while (answer := _produce(s, topic, _batch(5, 1, pid=PID + 1), 2))[0] == 45:
            assert time.monotonic() < deadline, "the idle producer was never expired"
            time.sleep(0.3)
        assert answer == (0, 2)
        assert _produce(s, topic, _batch(9, 1), 3) == (0, 3)  # forgotten, back past a gap
    got = confluent_consume(broker.bootstrap, topic, {0: 4})
    assert [r.value for r in got] == [b"v0", b"v1", b"v5", b"v9"]
