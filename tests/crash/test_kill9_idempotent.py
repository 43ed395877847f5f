"""``kill -9`` the broker repeatedly under an idempotent acks=all producer.

The producer (confluent-kafka, ``enable.idempotence=true``) retries every batch whose
answer was lost in a crash; the broker's producer state, rebuilt from the log on each
start, answers retries of batches it already holds with their original offsets. After
the last restart each partition holds every produced record exactly once, in produce
order, with no gaps, and every acknowledgement names the record's real offset.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_config, confluent_consume

CRASHES = 5
PARTITIONS = 2
PROGRESS_DEADLINE_S = 30.0


class IdempotentStream:
    """Produces ``seq-N`` to partition N % PARTITIONS from its own thread until stopped;
    owns the producer and the acknowledgement maps it fills."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = ck.Producer(
            confluent_config(
                bootstrap,
                **{
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    "message.timeout.ms": 90000,
                    "reconnect.backoff.ms": 50,
                    "reconnect.backoff.max.ms": 500,
                    "queue.buffering.max.messages": 20000,
                },
            )
        )
        self.produced = 0
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.failed: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="idempotent-producer", daemon=True)

    def _on_delivery(self, seq: int, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            self.acked[seq] = (int(msg.partition()), int(msg.offset()))
        else:
            self.failed[seq] = str(err)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    value=b"seq-%08d" % seq,
                    partition=seq % PARTITIONS,
                    on_delivery=lambda e, m, s=seq: self._on_delivery(s, e, m),
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            seq += 1
            self.produced = seq
            if seq % 20 == 0:
                self.producer.poll(0.005)
        self.producer.flush(120)

    def wait_for_acks(self, at_least: int) -> None:
        deadline = time.monotonic() + PROGRESS_DEADLINE_S
        while len(self.acked) < at_least:
            assert self.thread.is_alive(), "producer thread died"
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {len(self.acked)} acks after {PROGRESS_DEADLINE_S} s "
                    f"(wanted {at_least}); failures: {list(self.failed.items())[:3]}"
                )
            time.sleep(0.02)


@pytest.mark.crash
def test_idempotent_producer_exactly_once_across_kill9(
    broker_factory: Callable[..., Broker],
) -> None:
    b = broker_factory({"log.segment.bytes": "65536"})
    topic = create_topic(b.bootstrap, partitions=PARTITIONS)
    rng = random.Random(20261122)
    stream = IdempotentStream(b.bootstrap, topic)
    stream.thread.start()
    try:
        for _ in range(CRASHES):
            stream.wait_for_acks(len(stream.acked) + 200)
            time.sleep(rng.uniform(0.05, 1.0))
            b.kill()
            b.start()
        stream.wait_for_acks(len(stream.acked) + 300)
    finally:
        stream.stop.set()
        stream.thread.join(150)
    assert not stream.thread.is_alive(), "producer did not finish flushing"
    assert not stream.failed, (
        f"{len(stream.failed)} failed, e.g. {next(iter(stream.failed.items()))}"
    )
    assert len(stream.acked) == stream.produced

    marks = watermarks(b.bootstrap, topic, PARTITIONS)
    log = confluent_consume(b.bootstrap, topic, {p: high for p, (_, high) in marks.items()})
    seqs: dict[int, list[int]] = {p: [] for p in marks}
    for r in sorted(log, key=lambda r: (r.partition or 0, r.offset or 0)):
        assert r.partition is not None and r.value is not None
        assert r.offset == len(seqs[r.partition]), "offsets not dense"
        seqs[r.partition].append(int(r.value[4:]))
    for p in range(PARTITIONS):
        expected = list(range(p, stream.produced, PARTITIONS))
        assert seqs[p] == expected, (
            f"partition {p}: {len(seqs[p])} records vs {len(expected)} produced; "
            f"duplicates {len(seqs[p]) - len(set(seqs[p]))}"
        )
    for seq, (p, offset) in stream.acked.items():
        assert seqs[p][offset] == seq, f"seq {seq} acked at {p}/{offset}"
