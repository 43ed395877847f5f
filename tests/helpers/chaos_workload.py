"""The chaos suite's clients and what they saw: idempotent acks=all producers
(confluent-kafka, and Apache's Java client), a consumer group committing its offsets,
and a transactional producer whose transactions a checker later reads back with
read_committed.

Every client runs on its own daemon thread (the Java one in its own JVM) and records
into one :class:`History`, the only shared state (appends under its lock). Values are
unique per client (``<client>-<n>``), so a value names one send. :class:`Workload`
starts them all and stops them all (:meth:`Workload.stop`, idempotent): no thread or
JVM outlives a test.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import confluent_kafka as ck

from helpers.java import FloeJava, JavaClient, events

PRODUCE_PAUSE_S = 0.01
"""Pacing of each Python producer (a few hundred records/s each: enough records per
fault, little CPU on a 2-core machine)."""


class Op(NamedTuple):
    """One record as a client saw it: acknowledged by a producer, or read by a
    consumer, at ``t`` (time.monotonic())."""

    client: str
    partition: int
    offset: int
    value: str
    t: float


@dataclass
class Txn:
    """One transaction of the transactional producer: its values by partition, how it
    ended (``committed``, ``aborted`` or ``unknown``: the outcome was never learned), and
    where the broker said it wrote each value it acknowledged (whatever the outcome, the
    record stays in the log at that offset)."""

    name: str
    values: dict[int, list[str]]
    outcome: str = "unknown"
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)

    def delivered(self, err: ck.KafkaError | None, msg: ck.Message) -> None:
        partition, offset = msg.partition(), msg.offset()
        if err is None and partition is not None and offset is not None and offset >= 0:
            self.acked[(msg.value() or b"").decode()] = (partition, offset)


@dataclass
class History:
    """Everything every client saw; appended to under ``lock`` only."""

    acks: list[Op] = field(default_factory=list)
    reads: list[Op] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    fatal: list[tuple[float, str]] = field(default_factory=list)
    """Client errors worth reading (not findings): when, and what."""
    txns: list[Txn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, op: Op) -> None:
        with self.lock:
            self.acks.append(op)

    def read(self, op: Op) -> None:
        with self.lock:
            self.reads.append(op)

    def fail(self, client: str, why: str = "") -> None:
        with self.lock:
            self.failed[client] = self.failed.get(client, 0) + 1
            if why:
                self.fatal.append((time.monotonic(), f"{client}: {why}"))

    def ack_times(self, client: str) -> list[float]:
        with self.lock:
            return [op.t for op in self.acks if op.client == client]

    def producers(self) -> list[str]:
        with self.lock:
            return sorted({op.client for op in self.acks})


def _confluent_producer(
    *, bootstrap: str, topic: str, name: str, stop: threading.Event, history: History
) -> None:
    """Idempotent acks=all sends until ``stop``; a producer that hits a fatal error is
    replaced by a new one (a new producer id) under the same client name."""
    i = 0
    while not stop.is_set():
        producer = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "broker.address.family": "v4",
                # producer id and epoch changes, sequence errors and drains with their
                # reasons, on stderr: what a duplicate's evidence needs from the client
                "debug": "eos",
            }
        )
        fatal: list[str] = []

        def done(err: ck.KafkaError | None, msg: ck.Message, fatal: list[str] = fatal) -> None:
            if err is None:
                value = (msg.value() or b"").decode()
                offset = msg.offset()
                offset = -1 if offset is None else offset
                history.ack(Op(name, msg.partition(), offset, value, time.monotonic()))
            else:
                history.fail(name)
                if err.fatal():
                    fatal.append(str(err))

        while not stop.is_set() and not fatal:
            try:
                producer.produce(topic, f"{name}-{i}".encode(), on_delivery=done)
                i += 1
            except BufferError:
                pass
            except ck.KafkaException as e:
                fatal.append(str(e))
            producer.poll(PRODUCE_PAUSE_S)
        producer.flush(150)
        if fatal:
            history.fail(name, f"fatal, producer replaced: {fatal[0]}")


def _group_consumer(
    *, bootstrap: str, topic: str, group: str, name: str, stop: threading.Event,
    history: History,
) -> None:  # fmt: skip
    """A member of ``group`` reading from the start, committing what it read (async,
    after each record it got, at most every 0.5 s) until ``stop``."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "broker.address.family": "v4",
        }
    )
    consumer.subscribe([topic])
    last_commit = 0.0
    try:
        while not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                continue
            value = (msg.value() or b"").decode()
            history.read(Op(name, msg.partition(), msg.offset(), value, time.monotonic()))
            if time.monotonic() - last_commit > 0.5:
                last_commit = time.monotonic()
                with contextlib.suppress(ck.KafkaException):
                    consumer.commit(asynchronous=True)
    finally:
        consumer.close()


def _transactions(
    *, bootstrap: str, topic: str, partitions: int, seed: int, stop: threading.Event,
    history: History,
) -> None:  # fmt: skip
    """Transactions of 2-6 records over random partitions, one in four aborted, one
    after another until ``stop``; a producer that cannot go on is replaced (its
    transactional id fences the old one)."""
    rng = random.Random(seed)
    tid = f"chaos-tx-{uuid.uuid4().hex[:6]}"
    n = 0
    while not stop.is_set():
        producer = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": tid,
                "transaction.timeout.ms": 30_000,
                "message.timeout.ms": 30_000,
                "broker.address.family": "v4",
            }
        )
        try:
            producer.init_transactions(60)
        except ck.KafkaException as e:
            history.fail("txn", f"init_transactions: {e}")
            time.sleep(1)
            continue
        while not stop.is_set():
            txn = Txn(f"tx{n}", {})
            n += 1
            for j in range(rng.randint(2, 6)):
                p = rng.randrange(partitions)
                txn.values.setdefault(p, []).append(f"{txn.name}-{j}")
            commit = rng.random() >= 0.25
            with history.lock:
                history.txns.append(txn)
            try:
                producer.begin_transaction()
                for p, values in txn.values.items():
                    for v in values:
                        producer.produce(topic, v.encode(), partition=p, on_delivery=txn.delivered)
                if commit:
                    producer.commit_transaction(60)
                    txn.outcome = "committed"
                else:
                    producer.abort_transaction(60)
                    txn.outcome = "aborted"
            except ck.KafkaException as e:
                err = e.args[0]
                if err.txn_requires_abort():
                    try:
                        producer.abort_transaction(60)
                        txn.outcome = "aborted"
                        continue
                    except ck.KafkaException:
                        pass
                history.fail("txn", f"{txn.name}: {err}")
                break  # a new producer: fences this one, aborts what it left open
            time.sleep(0.2)
        try:
            producer.flush(10)
        except ck.KafkaException as e:
            history.fail("txn", f"flush: {e}")


@dataclass
class JavaProducer:
    """Apache's Java client (``FloeClients stream-produce``): its ACK lines carry
    partition and offset but no time, so a sampler thread stamps each new one."""

    client: JavaClient
    name: str
    stamps: list[float] = field(default_factory=list)

    def sample(self, *, stop: threading.Event) -> None:
        while not stop.is_set():
            lines = self.client.lines
            now = time.monotonic()
            self.stamps.extend([now] * (len(lines) - len(self.stamps)))
            time.sleep(0.05)

    def finish(self, history: History) -> None:
        lines = self.client.stop(180)
        now = time.monotonic()
        stamps = self.stamps + [now] * (len(lines) - len(self.stamps))
        for line, t in zip(lines, stamps, strict=True):
            for e in events([line], "ACK"):
                history.ack(Op(self.name, e.partition, e.offset, e.value, t))
            if line.startswith("ERR "):
                history.fail(self.name)


@dataclass
class Workload:
    """Every client of a run, started by :meth:`start` and stopped by :meth:`stop`."""

    bootstrap: str
    topic: str
    txn_topic: str
    partitions: int
    seed: int
    java: FloeJava | None
    history: History = field(default_factory=History)
    _stop_producing: threading.Event = field(default_factory=threading.Event)
    _stop_consuming: threading.Event = field(default_factory=threading.Event)
    _producers: list[threading.Thread] = field(default_factory=list)
    _consumers: list[threading.Thread] = field(default_factory=list)
    _java: JavaProducer | None = None
    group: str = field(default_factory=lambda: f"chaos-g-{uuid.uuid4().hex[:6]}")

    def start(self) -> None:
        def thread(target: Callable[..., None], **kwargs: object) -> threading.Thread:
            t = threading.Thread(target=target, kwargs=kwargs, daemon=True)
            t.start()
            return t

        common = {"bootstrap": self.bootstrap, "history": self.history}
        producing, consuming = self._stop_producing, self._stop_consuming
        for name in ("ck0", "ck1"):
            self._producers.append(
                thread(_confluent_producer, **common, topic=self.topic, name=name, stop=producing)
            )
        self._producers.append(
            thread(_transactions, **common, topic=self.txn_topic, partitions=self.partitions,
                   seed=self.seed, stop=producing)
        )  # fmt: skip
        for name in ("group0", "group1"):
            self._consumers.append(
                thread(_group_consumer, **common, topic=self.topic, group=self.group, name=name,
                       stop=consuming)
            )  # fmt: skip
        if self.java is not None:
            client = self.java.start("stream-produce", self.bootstrap, self.topic, "jv")
            self._java = JavaProducer(client, "jv")
            self._producers.append(thread(self._java.sample, stop=producing))

    def stop_producers(self, timeout_s: float = 200.0) -> None:
        self._stop_producing.set()
        for t in self._producers:
            t.join(timeout_s)
        if self._java is not None:
            java, self._java = self._java, None
            try:
                java.finish(self.history)
            finally:
                java.client.kill()
        stuck = [t for t in self._producers if t.is_alive()]
        assert not stuck, f"{len(stuck)} producers did not finish"

    def stop(self) -> None:
        """Stop every client (idempotent)."""
        self._stop_producing.set()
        self._stop_consuming.set()
        if self._java is not None:
            self._java.client.kill()
        for t in self._producers + self._consumers:
            t.join(200)
