"""``kill -9`` the broker repeatedly under an acks=all producer; nothing acknowledged is lost.

Invariants checked after the last restart:
- the log is dense: offsets 0..high-1, each holding a record this test produced;
- every acknowledged record is at the offset its acknowledgement named;
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

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
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
                },
            )
        )
        self.generation = 0
        self.produced_gen: dict[int, int] = {}
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (offset, ack generation)
        self.failed: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="crash-producer", daemon=True)

    def _on_delivery(self, seq: int, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            self.acked[seq] = (int(msg.offset()), self.generation)
        else:
            self.failed[seq] = str(err)

    def _run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    value=b"seq-%08d" % seq,
                    partition=0,
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
def test_acknowledged_records_survive_repeated_kill9(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory({"log.segment.bytes": "65536"})
    topic = create_topic(b.bootstrap)
    rng = random.Random(20260501)
    stream = StreamingProducer(b.bootstrap, topic)
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

    low, high = watermarks(b.bootstrap, topic, 1)[0]
    assert low == 0
    log = confluent_consume(b.bootstrap, topic, {0: high})
    assert [r.offset for r in log] == list(range(high)), "offsets are not dense and in order"
    seqs = []
    for r in log:
        assert r.value is not None and r.value.startswith(b"seq-"), r
        seqs.append(int(r.value[4:]))
    assert set(seqs) <= set(stream.produced_gen), "the log holds records nobody produced"

    for seq, (offset, _) in stream.acked.items():
        assert offset < high, f"seq {seq} acked at {offset}, log ends at {high}"
        assert seqs[offset] == seq, f"acked seq {seq} at {offset}, log has {seqs[offset]}"

    counts = Counter(seqs)
    duplicated = {s: n for s, n in counts.items() if n > 1}
    for seq in duplicated:
        ack = stream.acked.get(seq)
        assert ack is None or ack[1] != stream.produced_gen[seq], (
            f"seq {seq} appears {counts[seq]} times but no crash fell between its send "
            f"and its acknowledgement"
        )
    lost_unacked = len(stream.produced_gen) - len(stream.acked) - len(stream.failed)
    print(
        f"crash test: {len(stream.produced_gen)} produced, {len(stream.acked)} acked, "
        f"{len(stream.failed)} failed, {lost_unacked} unresolved, log {high} records, "
        f"{len(duplicated)} duplicated records ({sum(duplicated.values()) - len(duplicated)}"
        f" extra copies)"
    )
    b.stop()
