"""A broker whose internal journals hold garbage still starts and serves.

A real broker gets committed group offsets, a completed transaction and a registered
schema, is killed, and each internal topic's last segment then gets what an older
version or a disk fault could leave: a batch with a valid CRC around records that do
not decode, well-framed records of the wrong version, shape or type (some overwriting
good keys), a batch with an unknown codec, and a torn tail that log recovery cuts. The
broker must start, the good state must be intact for real clients, the log must say
what was skipped, and the state must survive another restart.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka as ck
import crc32c
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.coordinator.group import partition_for
from floe.coordinator.group.records import GroupKey, OffsetKey, encode_key
from floe.protocol.batch import HEADER_SIZE, scan
from floe.protocol.records import Record as WireRecord
from floe.protocol.records import encode_batch
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_config, confluent_produce
from helpers.records import Record
from helpers.registry import avro_record
from helpers.txn import consume_values, txn_producer

GROUP = "g-garbage"
OFFSETS_PARTITIONS = 50
"""``offsets.topic.num.partitions``, Kafka's default."""
TXN_PARTITIONS = 50
"""``transaction.state.log.num.partitions``, Kafka's default."""
TXN_ID = "tx-garbage"
SCHEMA = avro_record("Garbage", {"name": "n", "type": "long"})
_HEADER = struct.Struct(">qiiBIhiqqqhii")


def forge(base_offset: int, payload: bytes, *, count: int, attributes: int = 0) -> bytes:
    """A v2 batch with a valid CRC around an arbitrary records section."""
    now = int(time.time() * 1000)
    head = _HEADER.pack(
        base_offset, HEADER_SIZE - 12 + len(payload), 0, 2, 0, attributes, count - 1,
        now, now, -1, -1, -1, count,
    )  # fmt: skip
    buf = bytearray(head + payload)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def bad_records(topic: str, data_topic: str) -> list[tuple[bytes, bytes | None]]:
    """Well-framed records each journal's reader must refuse, some on good keys."""
    if topic == "__consumer_offsets":
        return [
            (encode_key(OffsetKey(GROUP, data_topic, 0)), b"\x00\x00"),  # truncated
            (encode_key(OffsetKey(GROUP, data_topic, 1)), b"\x07" + bytes(40)),  # version 7
            (encode_key(GroupKey(GROUP)), b"\x00\xff"),
            (b"\x09\x01\x00\x01x", b"\x00"),  # unknown key version
        ]
    if topic == "__transaction_state":
        return [
            (b"\x01" + TXN_ID.encode(), b"not json"),
            (b"\x01" + TXN_ID.encode(), b'{"producer_id": "zero", "state": "Sideways"}'),
            (b"\x00producer-id-block", b'{"end": "never"}'),
        ]
    return [
        (b'{"keytype":"SCHEMA","subject":"garbage-value","version":1}', b'{"subject": 5}'),
        (b'{"keytype":"SCHEMA","subject":7,"version":1}', b'{"subject": 7, "version": 1}'),
        (b"\xff\xfe", b"\xff"),
    ]


def corrupt_journal(data_dir: Path, topic: str, data_topic: str) -> int:
    """Append garbage to the last segment of ``topic``; returns how many well-framed bad
    records it holds (besides two undecodable batches and a torn tail)."""
    # the group's (transactional id's) partition: its coordinator's journal
    partition = {
        "__consumer_offsets": partition_for(GROUP, OFFSETS_PARTITIONS),
        "__transaction_state": partition_for(TXN_ID, TXN_PARTITIONS),
    }.get(topic, 0)
    segment = sorted((data_dir / "logs" / f"{topic}-{partition}").glob("*.log"))[-1]
    headers = scan(segment.read_bytes())
    next_offset = headers[-1].next_offset
    records = bad_records(topic, data_topic)
    now = int(time.time() * 1000)
    wire = [WireRecord(next_offset + 3 + i, now, k, v) for i, (k, v) in enumerate(records)]
    with segment.open("ab") as f:
        f.write(forge(next_offset, b"\xfe\xed" * 30, count=3))  # records do not decode
        f.write(encode_batch(wire, base_offset=next_offset + 3))
        f.write(forge(next_offset + 3 + len(records), bytes(24), count=2, attributes=7))
        f.write(b"\x00" * 8 + b"\x00\x00\x7f\xff" + b"\xab" * 80)  # torn tail
    return len(records)


def committed(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = ck.Consumer(
        confluent_config(bootstrap, **{"group.id": GROUP, "enable.auto.commit": False})
    )
    try:
        got = consumer.committed([ck.TopicPartition(topic, p) for p in (0, 1)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def commit(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = ck.Consumer(
        confluent_config(bootstrap, **{"group.id": GROUP, "enable.auto.commit": False})
    )
    try:
        consumer.commit(
            offsets=[ck.TopicPartition(topic, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def run_transaction(bootstrap: str, topic: str, value: bytes) -> None:
    producer = txn_producer(bootstrap, TXN_ID)
    producer.begin_transaction()
    producer.produce(topic, value=value, partition=1)
    producer.commit_transaction(30)


def test_broker_starts_and_serves_over_garbage_in_its_journals(
    broker_factory: Callable[..., Broker],
) -> None:
    b = broker_factory()
    topic = create_topic(b.bootstrap, partitions=2)
    confluent_produce(
        b.bootstrap, topic, [Record(None, b"v%d" % i, partition=i % 2) for i in range(20)]
    )
    commit(b.bootstrap, topic, {0: 4, 1: 7})
    run_transaction(b.bootstrap, topic, b"txn-1")
    ctx = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": b.registry_url}) as client:
        encoded = AvroSerializer(client, SCHEMA)({"n": 42}, ctx)
    assert encoded is not None
    schema_id = int.from_bytes(encoded[1:5], "big")

    b.kill()  # every write above was acknowledged, hence fsynced
    bad = {
        t: corrupt_journal(b.data_dir, t, topic)
        for t in ("__consumer_offsets", "__transaction_state", "_schemas")
    }
    b.start()

    assert committed(b.bootstrap, topic) == {0: 4, 1: 7}
    with SchemaRegistryClient({"url": b.registry_url}) as client:
        assert client.get_schema(schema_id).schema_str == SCHEMA
        assert AvroDeserializer(client)(encoded, ctx) == {"n": 42}
        assert client.get_latest_version(f"{topic}-value").schema_id == schema_id
    run_transaction(b.bootstrap, topic, b"txn-2")  # InitProducerId fences, commits
    values = consume_values(b.bootstrap, topic, 2, "read_committed", 22)
    assert {v for p, v in values if p == 1 and v.startswith(b"txn")} == {b"txn-1", b"txn-2"}

    log = b.stderr_text().split("floe test harness: start #2")[1]
    for t, n in bad.items():
        lines = [
            line
            for line in log.splitlines()
            if f"journal.batch.skipped topic={t} " in line
            or f"journal.record.skipped topic={t} " in line
        ]
        # the garbage batch and the unknown-codec batch, then each bad record
        assert len(lines) == 2 + n, (t, lines)
        assert all(" offset=" in line and " reason=" in line for line in lines)
    assert "log.recovery.truncated topic=__consumer_offsets" in log

    # the good state and what was written after the garbage survive a restart
    commit(b.bootstrap, topic, {0: 9})
    b.restart()
    assert committed(b.bootstrap, topic) == {0: 9, 1: 7}
    with SchemaRegistryClient({"url": b.registry_url}) as client:
        assert client.get_schema(schema_id).schema_str == SCHEMA
    run_transaction(b.bootstrap, topic, b"txn-3")
