"""Load generator: confluent-kafka (librdkafka) producers and consumers.

Every function here runs inside a separate worker process (see ``benchmarks.broker``)
so the client's CPU time never mixes with the broker's. Each takes a frozen spec and
returns a frozen result; both are plain dataclasses so they pickle across processes.

Clocks: ``time.perf_counter`` for wall time, ``time.process_time`` for the worker's own
CPU (all threads, so librdkafka's I/O threads are included).
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VALUE_BYTES = 1024
"""Default size of a record value (workloads may choose another, e.g. 100 bytes)."""

PAYLOAD_POOL = 1024
"""Distinct values cycled through; 1 MiB in all, far beyond lz4's 64 KiB window."""

PRODUCER_CONFIG: dict[str, str | int] = {
    "acks": "all",
    "enable.idempotence": "false",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "max.in.flight.requests.per.connection": 5,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 262_144,
    "message.max.bytes": 1_000_000,
}
"""Producer settings for the throughput runs (plus ``compression.type`` per workload)."""

LATENCY_PRODUCER_CONFIG: dict[str, str | int] = {
    **PRODUCER_CONFIG,
    "linger.ms": 1,
}
"""Producer settings for the fixed-rate latency run: a short linger, as a latency-minded
application would choose."""

CONSUMER_CONFIG: dict[str, str | int] = {
    "group.id": "floe-bench-unused",
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 500,
    "queued.max.messages.kbytes": 65_536,
    "fetch.queue.backoff.ms": 10,
}
"""Consumer settings (``assign()`` from offset 0; the group id is never used).

``fetch.queue.backoff.ms`` defaults to 1000 in librdkafka 2.16: whenever the local queue
passes ``queued.max.messages.kbytes`` the fetcher sleeps a full second even if the
application drains the queue at once. With the default, a 1.5 GB read showed one or two
idle 1 s gaps per run and throughput swung between ~240 and ~1000 MB/s."""

E2E_CONSUMER_CONFIG: dict[str, str | int] = {
    **CONSUMER_CONFIG,
    "fetch.wait.max.ms": 100,
}
"""Consumer settings of the end-to-end latency run: the long-poll bound is shortened
(librdkafka default 500 ms) so a broker that does not wake parked fetches when data
arrives costs at most 100 ms per record instead of 500."""

_ADMIN_CONFIG: dict[str, str | int] = {"broker.address.family": "v4", "log_level": 4}
"""Admin clients log at warning level: their info lines ("Purging 1 unserved events
from background queue" on every close) would clutter the progress output."""

_TEXT = b"Floe benchmark record: the quick brown fox jumps over the lazy dog. "
_BUFFER_FULL_WAIT_S = 0.005
_POLL_BATCH = 10_000
_TICK_S = 0.001


def payloads(seed: int, count: int = PAYLOAD_POOL, size: int = VALUE_BYTES) -> list[bytes]:
    """Build ``count`` distinct ``size``-byte values: half seeded random bytes, half text.

    The text half compresses well and the random half not at all, so lz4 gets a
    realistic ratio of roughly 2:1 instead of the absurd ratio of a constant value.
    """
    rng = random.Random(seed)
    half = size // 2
    out = []
    for i in range(count):
        text = (f"{i:08d} ".encode() + _TEXT * (half // len(_TEXT) + 1))[:half]
        out.append(rng.randbytes(size - half) + text)
    return out


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create before the workloads."""

    name: str
    partitions: int


@dataclass(frozen=True)
class ProduceSpec:
    """Send ``records`` values as fast as the producer allows."""

    bootstrap: str
    topic: str
    partitions: int
    records: int
    compression: str
    seed: int
    timeout_s: float
    value_bytes: int = VALUE_BYTES
    acks: str = "all"
    client: dict[str, str] = field(default_factory=dict)
    """Extra client settings (e.g. ``security.protocol``, ``ssl.ca.location``), merged
    over ``PRODUCER_CONFIG``."""


@dataclass(frozen=True)
class LatencySpec:
    """Send ``records`` values at a fixed ``rate`` per second and time each delivery.

    For ``end_to_end`` the time runs until a consumer of the same topic receives it.
    """

    bootstrap: str
    topic: str
    records: int
    rate: int
    seed: int
    timeout_s: float
    value_bytes: int = VALUE_BYTES


@dataclass(frozen=True)
class ConsumeSpec:
    """Read every partition of ``topic`` from offset 0.

    ``expected`` is the number of records the harness wrote; without it the consumer
    reads up to the high watermarks the broker reports (ListOffsets).
    """

    bootstrap: str
    topic: str
    partitions: int
    timeout_s: float
    expected: int | None = None
    client: dict[str, str] = field(default_factory=dict)
    """Extra client settings, merged over ``CONSUMER_CONFIG`` (as in ``ProduceSpec``)."""


@dataclass(frozen=True)
class TransferResult:
    """Outcome of a produce or consume run.

    Attributes:
        records: records delivered (produce) or received (consume).
        value_bytes: bytes of record values moved; keys and headers are empty.
        seconds: wall time from the first send (or the assign) to the last delivery.
        client_cpu_s: CPU seconds of the load-generator process during the run.
        errors: failed deliveries (produce) or error events (consume).
    """

    records: int
    value_bytes: int
    seconds: float
    client_cpu_s: float
    errors: int


@dataclass(frozen=True)
class LatencyResult:
    """Delivery latencies of a fixed-rate run, in milliseconds, in send order."""

    latencies_ms: list[float]
    seconds: float
    client_cpu_s: float
    errors: int


def _config(
    bootstrap: str,
    base: dict[str, str | int],
    client: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Merge connection settings, a base config, a spec's client settings (security)
    and per-workload extras, later ones winning."""
    return {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        **base,
        **(client or {}),
        **extra,
    }


def create_topics(bootstrap: str, topics: list[TopicSpec], timeout_s: float) -> None:
    """Create ``topics`` (replication factor 1) and wait until each exists.

    Raises:
        confluent_kafka.KafkaException: a topic could not be created.
    """
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(_ADMIN_CONFIG | {"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t.name, t.partitions, 1) for t in topics], request_timeout=timeout_s
    )
    for future in futures.values():
        future.result(timeout=timeout_s)


def delete_topics(bootstrap: str, names: list[str], timeout_s: float) -> None:
    """Delete ``names`` so their files (and page cache) stop weighing on later workloads.

    Raises:
        confluent_kafka.KafkaException: a topic could not be deleted.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(_ADMIN_CONFIG | {"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(names, request_timeout=timeout_s).values():
        future.result(timeout=timeout_s)


def _send(
    producer: Any,
    topic: str,
    value: bytes,
    *,
    partition: int,
    deadline: float,
    on_delivery: Callable[[Any, Any], None] | None = None,
) -> None:
    """``produce()`` one record, serving callbacks while the local queue is full.

    Raises:
        TimeoutError: the queue stayed full until ``deadline``.
    """
    while True:
        try:
            if on_delivery is None:
                producer.produce(topic, value, partition=partition)
            else:
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:
            if time.perf_counter() > deadline:
                raise TimeoutError("producer queue stayed full") from None
            producer.poll(_BUFFER_FULL_WAIT_S)


def produce(spec: ProduceSpec) -> TransferResult:
    """Produce ``spec.records`` values round-robin over the partitions, then flush.

    Raises:
        TimeoutError: the run did not finish within ``spec.timeout_s``.
    """
    from confluent_kafka import Producer

    outcome = {"ok": 0, "errors": 0}

    def delivered(err: Any, _msg: Any) -> None:
        outcome["errors" if err is not None else "ok"] += 1

    producer = Producer(
        _config(
            spec.bootstrap,
            PRODUCER_CONFIG,
            spec.client,
            **{"compression.type": spec.compression, "acks": spec.acks, "on_delivery": delivered},
        )
    )
    producer.list_topics(spec.topic, timeout=spec.timeout_s)  # connect before the clock
    values = payloads(spec.seed, size=spec.value_bytes)
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + spec.timeout_s
    for i in range(spec.records):
        _send(
            producer,
            spec.topic,
            values[i % len(values)],
            partition=i % spec.partitions,
            deadline=deadline,
        )
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(0.0, deadline - time.perf_counter()))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if remaining:
        raise TimeoutError(f"{remaining} records still undelivered after {spec.timeout_s}s")
    return TransferResult(
        records=outcome["ok"],
        value_bytes=outcome["ok"] * spec.value_bytes,
        seconds=seconds,
        client_cpu_s=cpu,
        errors=outcome["errors"],
    )


def produce_at_rate(spec: LatencySpec) -> LatencyResult:
    """Produce at a fixed rate; time each record from ``produce()`` to its callback.

    Records are released on a schedule (record ``i`` at ``i / rate`` seconds), checked
    every millisecond, so the producer is never driven faster than the target rate;
    between releases ``poll()`` serves delivery callbacks as they arrive.

    Raises:
        TimeoutError: the run did not finish within ``spec.timeout_s``.
    """
    from confluent_kafka import Producer

    producer = Producer(_config(spec.bootstrap, LATENCY_PRODUCER_CONFIG))
    producer.list_topics(spec.topic, timeout=spec.timeout_s)
    values = payloads(spec.seed, size=spec.value_bytes)
    latencies: list[float] = [0.0] * spec.records
    errors = 0

    def on_delivery_for(index: int, sent_at: float) -> Callable[[Any, Any], None]:
        def delivered(err: Any, _msg: Any) -> None:
            nonlocal errors
            latencies[index] = (time.perf_counter() - sent_at) * 1000.0
            errors += err is not None

        return delivered

    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + spec.timeout_s
    sent = 0
    while sent < spec.records:
        now = time.perf_counter()
        if now > deadline:
            raise TimeoutError(f"only {sent} of {spec.records} records sent in time")
        due = min(spec.records, int((now - t0) * spec.rate) + 1)
        for i in range(sent, due):
            sent_at = time.perf_counter()
            _send(
                producer,
                spec.topic,
                values[i % len(values)],
                partition=0,
                deadline=deadline,
                on_delivery=on_delivery_for(i, sent_at),
            )
        sent = due
        producer.poll(_TICK_S)
    remaining = producer.flush(max(0.0, deadline - time.perf_counter()))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if remaining:
        raise TimeoutError(f"{remaining} records still undelivered after {spec.timeout_s}s")
    return LatencyResult(latencies_ms=latencies, seconds=seconds, client_cpu_s=cpu, errors=errors)


def consume(spec: ConsumeSpec) -> TransferResult:
    """Read all partitions of ``spec.topic`` from offset 0 up to their high watermarks.

    Raises:
        TimeoutError: the run did not finish within ``spec.timeout_s``.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_config(spec.bootstrap, CONSUMER_CONFIG, spec.client))
    try:
        ends = {
            p: consumer.get_watermark_offsets(
                TopicPartition(spec.topic, p), timeout=spec.timeout_s, cached=False
            )[1]
            for p in range(spec.partitions)
        }
        expected = sum(ends.values()) if spec.expected is None else spec.expected
        records = value_bytes = errors = 0
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + spec.timeout_s
        consumer.assign([TopicPartition(spec.topic, p, 0) for p in range(spec.partitions)])
        while records < expected:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"only {records} of {expected} records read in time")
            # consume() waits for num_messages or the timeout: never ask for more than
            # remain, or the last batch would idle out the timeout.
            batch = min(_POLL_BATCH, expected - records)
            for msg in consumer.consume(num_messages=batch, timeout=0.5):
                if msg.error() is not None:
                    errors += 1
                    continue
                records += 1
                value_bytes += len(msg.value() or b"")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        consumer.close()
    return TransferResult(
        records=records, value_bytes=value_bytes, seconds=seconds, client_cpu_s=cpu, errors=errors
    )


def end_to_end(spec: LatencySpec) -> LatencyResult:
    """Produce at a fixed rate while consuming the topic; time ``produce()`` to receipt.

    One thread drives both clients (so neither steals the GIL from the other's
    callbacks): each tick releases the records that are due, serves producer
    callbacks, then drains what the consumer has received. The first 8 bytes of each
    value carry the run's tag (the seed) and the record's index, so the consumer can
    look up its send time and ignore records of earlier runs on the same topic.

    Raises:
        TimeoutError: not every record was received within ``spec.timeout_s``.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(_config(spec.bootstrap, LATENCY_PRODUCER_CONFIG))
    consumer = Consumer(_config(spec.bootstrap, E2E_CONSUMER_CONFIG))
    try:
        producer.list_topics(spec.topic, timeout=spec.timeout_s)
        start = consumer.get_watermark_offsets(
            TopicPartition(spec.topic, 0), timeout=spec.timeout_s, cached=False
        )[1]
        # Tansu 0.6 may report a high watermark below the last record: records of
        # earlier runs are then read too and skipped by their tag.
        consumer.assign([TopicPartition(spec.topic, 0, start)])
        values = payloads(spec.seed, size=max(spec.value_bytes, 8))
        tag = spec.seed & 0xFFFFFFFF
        sent_at = [0.0] * spec.records
        latencies: list[float] = [0.0] * spec.records
        received = errors = 0
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + spec.timeout_s
        sent = 0
        while received < spec.records:
            now = time.perf_counter()
            if now > deadline:
                raise TimeoutError(f"only {received} of {spec.records} records received")
            due = min(spec.records, int((now - t0) * spec.rate) + 1)
            for i in range(sent, due):
                value = struct.pack(">II", tag, i) + values[i % len(values)][8:]
                sent_at[i] = time.perf_counter()
                _send(producer, spec.topic, value, partition=0, deadline=deadline)
            sent = due
            producer.poll(0)
            msg = consumer.poll(_TICK_S)
            while msg is not None:
                arrived = time.perf_counter()
                raw = msg.value()
                if msg.error() is not None or raw is None or len(raw) < 8:
                    errors += msg.error() is not None
                else:
                    run, index = struct.unpack_from(">II", raw)
                    if run == tag and index < spec.records and latencies[index] == 0.0:
                        latencies[index] = (arrived - sent_at[index]) * 1000.0
                        received += 1
                msg = consumer.poll(0)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        producer.flush(max(0.0, deadline - time.perf_counter()))
    finally:
        consumer.close()
    return LatencyResult(latencies_ms=latencies, seconds=seconds, client_cpu_s=cpu, errors=errors)


def high_watermarks(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> int:
    """Sum of the high watermarks the broker reports (ListOffsets latest) for ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(_config(bootstrap, CONSUMER_CONFIG))
    try:
        return sum(
            consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()
