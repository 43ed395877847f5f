"""A producer that streams numbered records from its own thread, for crash tests.

Values are ``seq-NNNNNNNN`` and record ``seq`` goes to partition ``seq % partitions``,
so the log alone says which record is where. The test bumps ``generation`` once each
crash has happened (the broker's process is dead: a record produced before that may
have reached it); each record remembers the generation it was produced in and the one
its acknowledgement arrived in.
"""

from __future__ import annotations

import threading
import time

import confluent_kafka as ck

from helpers.admin import watermarks
from helpers.clients import confluent_config, confluent_consume

PROGRESS_DEADLINE_S = 30.0


class SequenceStream:
    """Owns one confluent-kafka producer (acks=all) and the maps its callbacks fill."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        idempotent: bool,
        codec: str = "none",
        message_timeout_ms: int = 60000,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = ck.Producer(
            confluent_config(
                bootstrap,
                **{
                    "acks": "all",
                    "enable.idempotence": idempotent,
                    "linger.ms": 2,
                    "message.timeout.ms": message_timeout_ms,
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
        self.thread = threading.Thread(target=self._run, name="sequence-stream", daemon=True)

    @property
    def produced(self) -> int:
        return len(self.produced_gen)

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


def read_sequences(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    """Every partition's sequence numbers in offset order, asserting the log starts at
    0, its offsets are dense and each record sits in the partition its number names."""
    marks = watermarks(bootstrap, topic, partitions)
    assert all(low == 0 for low, _ in marks.values()), marks
    log = confluent_consume(bootstrap, topic, {p: high for p, (_, high) in marks.items()})
    seqs: dict[int, list[int]] = {p: [] for p in marks}
    for r in sorted(log, key=lambda r: (r.partition or 0, r.offset or 0)):
        assert r.partition is not None and r.value is not None and r.value.startswith(b"seq-")
        assert r.offset == len(seqs[r.partition]), f"partition {r.partition}: offsets not dense"
        seq = int(r.value[4:])
        assert seq % partitions == r.partition, f"seq {seq} in partition {r.partition}"
        seqs[r.partition].append(seq)
    for p, (_, high) in marks.items():
        assert len(seqs[p]) == high, f"partition {p}: {len(seqs[p])} records, high {high}"
    return seqs
