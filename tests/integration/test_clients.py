"""Produce and consume through every real client and codec, and across clients.

Invariants: what a consumer reads equals what was acknowledged, byte for byte (keys,
values, headers, CreateTime timestamps), at dense offsets from 0; records with one key
land in one partition, in production order.
"""

from __future__ import annotations

import pytest

from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import CLIENTS, CONSUMERS, PRODUCERS, codecs_for
from helpers.records import Record, assert_same_records, sample_records

CLIENT_CODECS = [(client, codec) for client in CLIENTS for codec in codecs_for(client)]


@pytest.mark.parametrize(("client", "codec"), CLIENT_CODECS)
def test_round_trip_per_client_and_codec(broker: Broker, client: str, codec: str) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    records = sample_records(60, text=client == "kcat", null_header_values=client != "kafka-python")
    acked = PRODUCERS[client](broker.bootstrap, topic, records, codec)
    if client != "kcat":
        assert [(r.partition, r.offset) for r in acked] == [(0, i) for i in range(60)]

    assert watermarks(broker.bootstrap, topic, 1) == {0: (0, 60)}
    got = CONSUMERS[client](broker.bootstrap, topic, {0: 60})
    assert [r.offset for r in got] == list(range(60))
    assert_same_records(got, records, client)
    # kcat sets no timestamps: the broker must still hand back a real CreateTime.
    bad = [r for r in got if r.timestamp is None or r.timestamp <= 0]
    assert not bad, bad[:3]


@pytest.mark.parametrize("client", CLIENTS)
def test_keyed_records_keep_partition_and_order(broker: Broker, client: str) -> None:
    partitions = 4
    topic = create_topic(broker.bootstrap, partitions=partitions)
    keys = [f"user-{k}".encode() for k in range(12)]
    records = [Record(keys[i % len(keys)], f"{i}".encode(), partition=None) for i in range(240)]
    PRODUCERS[client](broker.bootstrap, topic, records)

    marks = watermarks(broker.bootstrap, topic, partitions)
    assert sum(high for _, high in marks.values()) == len(records)
    assert sum(1 for _, high in marks.values() if high > 0) > 1, f"one partition used: {marks}"
    got = CONSUMERS[client](broker.bootstrap, topic, {p: hi for p, (_, hi) in marks.items()})
    assert len(got) == len(records)

    partition_of: dict[bytes, int] = {}
    seqs: dict[bytes, list[int]] = {}
    for p in range(partitions):
        in_p = sorted((r for r in got if r.partition == p), key=lambda r: r.offset or 0)
        assert [r.offset for r in in_p] == list(range(marks[p][1])), f"partition {p} not dense"
        for r in in_p:
            assert r.key is not None and r.value is not None
            assert partition_of.setdefault(r.key, p) == p, f"{r.key!r} in two partitions"
            seqs.setdefault(r.key, []).append(int(r.value))
    for key, seq in seqs.items():
        assert seq == sorted(seq) and len(seq) == 20, f"{key!r} out of order: {seq}"


CROSS = [(p, c) for p in CLIENTS for c in CLIENTS if p != c]


@pytest.mark.parametrize(("producer", "consumer"), CROSS)
def test_cross_client_byte_for_byte(broker: Broker, producer: str, consumer: str) -> None:
    """Records one client wrote read by another equal what a third (confluent) reads."""
    text = "kcat" in (producer, consumer)
    topic = create_topic(broker.bootstrap, partitions=2)
    records = sample_records(
        40, text=text, partition=1, null_header_values=producer != "kafka-python"
    )
    codec = next(
        c
        for c in ("zstd", "lz4", "snappy", "gzip")
        if c in codecs_for(producer) and c in codecs_for(consumer)
    )
    PRODUCERS[producer](broker.bootstrap, topic, records, codec)

    ends = {0: 0, 1: len(records)}
    got = CONSUMERS[consumer](broker.bootstrap, topic, ends)
    assert_same_records(got, records, f"{producer} -> {consumer}")
    assert {r.partition for r in got} == {1}
    reference = CONSUMERS["confluent" if consumer != "confluent" else "aiokafka"](
        broker.bootstrap, topic, ends
    )
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp, r.offset) for r in reference
    ]
