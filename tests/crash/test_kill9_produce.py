"""``kill -9`` the broker repeatedly under an acks=all producer; nothing acknowledged is lost.

Invariants checked after the last restart:
- each partition's log is dense: offsets 0..high-1, each holding a record this test
  produced to that partition;
- every acknowledged record is at the partition and offset its acknowledgement named;
- a record appears more than once only if a crash fell between its produce() call and
  its acknowledgement (a retried batch whose first attempt was written: the producer is
  not idempotent, so that duplicate is allowed; its count is reported).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_config, confluent_consume

CRASHES = 8
PROGRESS_DEADLINE_S = 30.0


class StreamingProducer:
    """Produces ``seq-N`` values from its own thread until stopped; owns the producer.

    ``generation`` is bumped by the test before each crash; each record remembers the
    generation it was produced in and the one its acknowledgement arrived in.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, codec: str) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = ck.Producer(
            confluent_config(
                bootstrap,
                **{
                    "acks": "all",
                    "enable.idempotence": False,
                    "linger.ms": 2,
                    "message.timeout.ms": 60000,
                    "reconnect.backoff.ms": 50,
                    "reconnect.backoff.max.ms": 500,
                    "queue.buffering.max.messages": 20000,
                    "compression.type": codec,
                },
            )
        )
        self.generation = 0
        self.produced_gen: dict[int, int] = {}
        self.acked: dict[int, tuple[int, int, int]] = {}  # seq -> (partition, offset, ack gen)
        self.failed: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="crash-producer", daemon=True)

    def _on_delivery(self, seq: int, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            self.acked[seq] = (int(msg.partition()), int(msg.offset()), self.generation)
        else:
            self.failed[seq] = str(err)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    value=b"seq-%08d" % seq,
                    partition=seq % self.partitions,
                    on_delivery=lambda e, m, s=seq: self._on_delivery(s, e, m),
                )
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.produced_gen[seq] = self.generation
            seq += 1
            if seq % 20 == 0:
                self.producer.poll(0.005)  # paces the stream; serves delivery callbacks
        self.producer.flush(90)

    def wait_for_acks(self, at_least: int) -> None:
        deadline = time.monotonic() + PROGRESS_DEADLINE_S
        while len(self.acked) < at_least:
            assert self.thread.is_alive(), "producer thread died"
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {len(self.acked)} acks after {PROGRESS_DEADLINE_S} s"
                    f" (wanted {at_least}); failures: {len(self.failed)}"
                )
            time.sleep(0.02)


@pytest.mark.crash
@pytest.mark.parametrize(("partitions", "codec"), [(1, "none"), (3, "lz4")])
def test_acknowledged_records_survive_repeated_kill9(
    broker_factory: Callable[..., Broker], partitions: int, codec: str
) -> None:
    b = broker_factory({"log.segment.bytes": "65536"})
    topic = create_topic(b.bootstrap, partitions=partitions)
    rng = random.Random(20260501 + partitions)
    stream = StreamingProducer(b.bootstrap, topic, partitions, codec)
    stream.thread.start()
    try:
        for _ in range(CRASHES):
            stream.wait_for_acks(len(stream.acked) + 200)  # it is really streaming
            time.sleep(rng.uniform(0.05, 1.5))  # a random moment, not synchronization
            stream.generation += 1
            b.kill()
            b.start()
        stream.wait_for_acks(len(stream.acked) + 500)
    finally:
        stream.stop.set()
        stream.thread.join(120)
    assert not stream.thread.is_alive(), "producer did not finish flushing"

    marks = watermarks(b.bootstrap, topic, partitions)
    assert all(low == 0 for low, _ in marks.values()), marks
    log = confluent_consume(b.bootstrap, topic, {p: high for p, (_, high) in marks.items()})
    seqs: dict[int, list[int]] = {p: [] for p in marks}
    for r in sorted(log, key=lambda r: (r.partition or 0, r.offset or 0)):
        assert r.partition is not None and r.value is not None and r.value.startswith(b"seq-")
        assert r.offset == len(seqs[r.partition]), f"partition {r.partition}: offsets not dense"
        seq = int(r.value[4:])
        assert seq % partitions == r.partition, f"seq {seq} in partition {r.partition}"
        seqs[r.partition].append(seq)
    for p, (_, high) in marks.items():
        assert len(seqs[p]) == high, f"partition {p}: {len(seqs[p])} records, high {high}"
    produced = set(stream.produced_gen)
    assert all(set(s) <= produced for s in seqs.values()), "records nobody produced"

    for seq, (p, offset, _) in stream.acked.items():
        assert offset < len(seqs[p]), f"seq {seq} acked at {p}/{offset}, log ends earlier"
        assert seqs[p][offset] == seq, f"acked seq {seq} at {p}/{offset}, log has {seqs[p][offset]}"

    counts = Counter(s for ss in seqs.values() for s in ss)
    duplicated = {s: n for s, n in counts.items() if n > 1}
    for seq in duplicated:
        ack = stream.acked.get(seq)
        assert ack is None or ack[2] != stream.produced_gen[seq], (
            f"seq {seq} appears {counts[seq]} times but no crash fell between its send "
            f"and its acknowledgement"
        )
    unresolved = len(stream.produced_gen) - len(stream.acked) - len(stream.failed)
    print(
        f"crash test ({partitions} partitions, {codec}): {len(stream.produced_gen)} produced, "
        f"{len(stream.acked)} acked, {len(stream.failed)} failed, {unresolved} unresolved, "
        f"log {len(log)} records, {len(duplicated)} duplicated records "
        f"({sum(duplicated.values()) - len(duplicated)} extra copies)"
    )
    b.stop()
