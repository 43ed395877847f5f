"""Produce and consume through each real client, with one record type for all of them.

Every function here starts and closes its own client, so a test can mix clients freely
and nothing outlives the call. Consumers use manual assignment and no group: the broker
has no group coordinator yet. Producers use ``acks=all`` and no idempotence.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import confluent_kafka as ck

from helpers.records import Record

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its protocol schemas at import time through
    # importlib.resources.read_text/open_text, deprecated since Python 3.11. Import it once here,
    # under a filter for exactly that message, so `filterwarnings = error` keeps
    # guarding everything else.
    warnings.filterwarnings(
        "ignore", r"\w+ is deprecated\. Use files\(\) instead", DeprecationWarning
    )
    import kafka
    import kafka.admin  # noqa: F401

CONSUME_DEADLINE_S = 30.0
PRODUCE_DEADLINE_S = 30.0
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def kcat_path() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    assert path, "kcat is not installed: `make test` installs it (scripts/ensure-system-deps.sh)"
    return path


# --------------------------------------------------------------------------- confluent-kafka


def confluent_config(bootstrap: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", **extra}


def confluent_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    compression: str = "none",
    **extra: object,
) -> list[Record]:
    """Produce and return the records as acknowledged (with partition and offset).

    Raises:
        ck.KafkaException: the first delivery error.
    """
    producer = ck.Producer(
        confluent_config(
            bootstrap,
            **{
                "compression.type": compression,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
                **extra,
            },
        )
    )
    acked: dict[int, Record] = {}
    errors: list[ck.KafkaError] = []

    def on_delivery(index: int, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[index] = replace(records[index], partition=msg.partition(), offset=msg.offset())

    for i, r in enumerate(records):
        kwargs: dict[str, object] = {}
        if r.timestamp is not None:
            kwargs["timestamp"] = r.timestamp
        if r.headers:
            kwargs["headers"] = list(r.headers)
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=-1 if r.partition is None else r.partition,
            on_delivery=lambda e, m, i=i: on_delivery(i, e, m),
            **kwargs,
        )
        producer.poll(0)
    left = producer.flush(PRODUCE_DEADLINE_S)
    if errors:
        raise ck.KafkaException(errors[0])
    assert left == 0, f"{left} records not delivered within {PRODUCE_DEADLINE_S} s"
    return [acked[i] for i in range(len(records))]


def _from_confluent(msg: ck.Message) -> Record:
    headers = tuple((k, v) for k, v in (msg.headers() or []))
    return Record(
        msg.key(), msg.value(), headers, msg.timestamp()[1], msg.partition(), msg.offset()
    )


def confluent_consumer(bootstrap: str, **extra: object) -> ck.Consumer:
    """A consumer for ``assign()`` only: the broker has no group coordinator yet.

    librdkafka needs a ``group.id`` even then; with auto-commit on, ``close()`` would
    wait ~45 s for a coordinator to commit to, so commits and offset stores are off.
    """
    return ck.Consumer(
        confluent_config(
            bootstrap,
            **{
                "group.id": "floe-tests-unused",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                **extra,
            },
        )
    )


def confluent_consume(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    **extra: object,
) -> list[Record]:
    consumer = confluent_consumer(bootstrap, **extra)
    try:
        starts = starts or {}
        consumer.assign([ck.TopicPartition(topic, p, starts.get(p, 0)) for p in ends])
        return _collect(ends, starts, lambda: _confluent_poll(consumer))
    finally:
        consumer.close()


def _confluent_poll(consumer: ck.Consumer) -> list[Record]:
    out = []
    for msg in consumer.consume(500, 0.5):
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                continue
            raise ck.KafkaException(msg.error())
        out.append(_from_confluent(msg))
    return out


def _collect(
    ends: dict[int, int], starts: dict[int, int], poll: Callable[[], list[Record]]
) -> list[Record]:
    """Poll until every partition's position reaches its end offset, or fail."""
    got: list[Record] = []
    nxt = {p: starts.get(p, 0) for p in ends}
    deadline = time.monotonic() + CONSUME_DEADLINE_S
    while any(nxt[p] < ends[p] for p in ends):
        if time.monotonic() > deadline:
            raise AssertionError(f"consumed {len(got)} records; positions {nxt}, wanted {ends}")
        for r in poll():
            got.append(r)
            assert r.offset is not None
            nxt[r.partition] = max(nxt[r.partition], r.offset + 1)
    return got


# --------------------------------------------------------------------------- kafka-python


def kafka_python_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    compression: str = "none",
    **extra: object,
) -> list[Record]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=False,
        acks="all",
        linger_ms=5,
        compression_type=None if compression == "none" else compression,
        **extra,
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in records
        ]
        producer.flush(PRODUCE_DEADLINE_S)
        out = []
        for r, f in zip(records, futures, strict=True):
            md = f.get(timeout=PRODUCE_DEADLINE_S)
            out.append(replace(r, partition=md.partition, offset=md.offset))
        return out
    finally:
        producer.close(timeout=10)


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    **extra: object,
) -> list[Record]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **extra,
    )
    try:
        starts = starts or {}
        tps = {p: TopicPartition(topic, p) for p in ends}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, starts.get(p, 0))

        def poll() -> list[Record]:
            batches = consumer.poll(timeout_ms=500)
            return [
                Record(m.key, m.value, tuple(m.headers or ()), m.timestamp, m.partition, m.offset)
                for msgs in batches.values()
                for m in msgs
            ]

        return _collect(ends, starts, poll)
    finally:
        consumer.close()


# --------------------------------------------------------------------------- aiokafka


def aiokafka_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    compression: str = "none",
    **extra: object,
) -> list[Record]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[Record]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            compression_type=None if compression == "none" else compression,
            **extra,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers) or None,
                )
                for r in records
            ]
            mds = await asyncio.wait_for(asyncio.gather(*futures), PRODUCE_DEADLINE_S)
        finally:
            await producer.stop()
        return [
            replace(r, partition=md.partition, offset=md.offset)
            for r, md in zip(records, mds, strict=True)
        ]

    return asyncio.run(run())


def aiokafka_consume(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    **extra: object,
) -> list[Record]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Record]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **extra,
        )
        await consumer.start()
        try:
            tps = {p: TopicPartition(topic, p) for p in ends}
            consumer.assign(list(tps.values()))
            for p, tp in tps.items():
                consumer.seek(tp, (starts or {}).get(p, 0))
            got: list[Record] = []
            nxt = {p: (starts or {}).get(p, 0) for p in ends}
            deadline = time.monotonic() + CONSUME_DEADLINE_S
            while any(nxt[p] < ends[p] for p in ends):
                if time.monotonic() > deadline:
                    raise AssertionError(f"consumed {len(got)}; positions {nxt}, wanted {ends}")
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    for m in msgs:
                        got.append(
                            Record(
                                m.key,
                                m.value,
                                tuple(m.headers or ()),
                                m.timestamp,
                                m.partition,
                                m.offset,
                            )
                        )
                        nxt[m.partition] = max(nxt[m.partition], m.offset + 1)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


# --------------------------------------------------------------------------- kcat

KCAT_KEY_DELIM = b"\x1f"
KCAT_MSG_DELIM = b"\x1e"


def kcat_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    compression: str = "none",
    **extra: object,
) -> list[Record]:
    """Produce with ``kcat -P``: one partition and one header set for all records.

    kcat cannot set per-record timestamps or headers and does not print offsets, so the
    records come back unchanged: the consumer side checks what was stored.
    """
    partitions = {r.partition for r in records}
    header_sets = {r.headers for r in records}
    assert len(partitions) == 1 and len(header_sets) == 1, "kcat: one partition/header set"
    assert all(r.timestamp is None for r in records), "kcat cannot set timestamps"
    (partition,) = partitions
    (headers,) = header_sets
    cmd = [
        kcat_path(),
        "-P",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-z",
        compression,
        "-K",
        "\\x1f",
        "-D",
        "\\x1e",
        "-Z",
        "-X",
        "acks=all",
        "-X",
        "enable.idempotence=false",
        *_kcat_settings(extra),
    ]
    if partition is not None:
        cmd += ["-p", str(partition)]
    for k, v in headers:
        assert v is not None, "kcat cannot send null header values"
        cmd += ["-H", f"{k}={v.decode()}"]
    payload = bytearray()
    for r in records:
        for part in (r.key or b"", r.value or b""):
            assert KCAT_KEY_DELIM not in part and KCAT_MSG_DELIM not in part
        assert r.key is not None, "kcat -K sends an empty key, never a null one"
        payload += r.key + KCAT_KEY_DELIM + (r.value or b"") + KCAT_MSG_DELIM
    proc = subprocess.run(
        cmd, input=bytes(payload), capture_output=True, timeout=PRODUCE_DEADLINE_S + 30, check=False
    )
    assert proc.returncode == 0, f"kcat -P failed ({proc.returncode}): {proc.stderr.decode()}"
    return list(records)


def _kcat_settings(extra: dict[str, object]) -> list[str]:
    """librdkafka properties as kcat ``-X key=value`` arguments."""
    return [arg for k, v in extra.items() for arg in ("-X", f"{k}={v}")]


def kcat_consume(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    **extra: object,
) -> list[Record]:
    """Consume with ``kcat -C -J`` (values must be UTF-8: kcat's JSON output is text)."""
    out: list[Record] = []
    for p, end in ends.items():
        start = (starts or {}).get(p, 0)
        if end <= start:
            continue
        cmd = [
            kcat_path(),
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(p),
            "-o",
            str(start),
            "-c",
            str(end - start),
            "-J",
            "-Z",
            "-q",
            *_kcat_settings(extra),
        ]
        proc = subprocess.run(
            cmd, capture_output=True, timeout=CONSUME_DEADLINE_S + 30, check=False
        )
        assert proc.returncode == 0, f"kcat -C failed ({proc.returncode}): {proc.stderr.decode()}"
        for line in proc.stdout.decode().splitlines():
            m = json.loads(line)
            flat = m.get("headers") or []
            headers = tuple(
                (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
                for i in range(0, len(flat), 2)
            )
            out.append(
                Record(
                    None if m["key"] is None else m["key"].encode(),
                    None if m["payload"] is None else m["payload"].encode(),
                    headers,
                    m["ts"],
                    m["partition"],
                    m["offset"],
                )
            )
    return out


PRODUCERS = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
    "kcat": kcat_produce,
}
CONSUMERS = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
    "kcat": kcat_consume,
}


def codecs_for(client: str) -> list[str]:
    """Codecs a client can use in this environment (kafka-python needs extra libraries)."""
    if client != "kafka-python":
        return list(CODECS)
    from kafka import codec

    have = {
        "none": True,
        "gzip": True,
        "snappy": codec.has_snappy(),
        "lz4": codec.has_lz4(),
        "zstd": codec.has_zstd(),
    }
    return [c for c in CODECS if have[c]]
