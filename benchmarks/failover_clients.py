"""The cluster suite's failover load: four real Kafka producers at once, and the checker.

Each producer is idempotent with ``acks=all`` and ``linger.ms=5`` (:data:`PRODUCER_CONFIG`),
the client's defaults otherwise (retries, backoffs, timeouts), as an application that did
not tune for failover would run it:

- ``confluent-kafka`` (librdkafka), ``kafka-python`` and ``aiokafka``, each in a thread
  of the suite's process, sending ``rate`` records/s of 1 KiB with at most
  :data:`WINDOW_S` seconds' worth unacknowledged (no burst of catch-up records after a
  failover, whose flush would outlast the series on a busy machine);
- Apache's Java ``kafka-clients``: ``tests/java/FloeClients.java stream-produce`` in a
  child JVM, paced by itself (one send every 20 ms, at most 100 unacknowledged); its
  value prefix is padded so that its records are 1 KiB too (the Java client's sticky
  partitioner moves on after 16 KiB to a partition: small values would keep it on one
  partition for many seconds).

Values start with ``<client>-<n>`` (no spaces; the Python clients add a space and
padding), so one read of the topic tells every client's records apart
(:func:`read_back`). Each client keeps, in arrival order, the time and partition of
every acknowledgement (``time.monotonic()`` when its callback ran or, for Java, when its
``ACK`` line was read), appended by one thread only (its callback thread or stdout
reader) under its lock; the suite's thread reads them through :meth:`Client.next_ack`.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import os
import subprocess
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks import loadgen
from benchmarks.harness import REPO
from floe.testing.java import compile_java, java_command, kafka_client_classpath

PRODUCER_CONFIG: dict[str, str | int] = {"acks": "all", "enable.idempotence": "true",
                                         "linger.ms": 5}  # fmt: skip
"""What every failover producer sets (in each client's own spelling)."""
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "java")
"""Every client, in report order; ``java`` is Apache's kafka-clients 3.9.1."""
IN_FLIGHT_S = 0.5
"""Acknowledgements read within this long of a kill were on their way when the broker
died (no broker can take its partitions over before its lease lapses: at least two
thirds of the session timeout, >= 1.3 s); the next acknowledgement is the first after."""
JAVA_SOURCE_DIR = REPO / "tests" / "java"
JAVA_MAIN_CLASS = "FloeClients"
JAVA_PREFIX_BYTES = 1000
"""Padding of the Java client's value prefix: its values are then about 1 KiB."""
WINDOW_S = 2.0
"""A Python client has at most this many seconds of its records unacknowledged (the
Java client: 100 records, two seconds at its pace)."""
FINISH_TIMEOUT_S = 150.0
"""Waiting for a producer's last acknowledgements (flush) at the end of a series."""
VALUE_BYTES = 1024
_PAD_POOL = 64
_READ_TIMEOUT_S = 300.0


def client_key(client: str) -> str:
    """``client`` as a metric name: ``kafka-python`` -> ``kafka_python``."""
    return client.replace("-", "_")


@dataclass(frozen=True)
class JavaSetup:
    """Compiled ``FloeClients`` and how to run it."""

    classpath: str
    tmp_dir: Path


def prepare_java(workdir: Path) -> JavaSetup:
    """Fetch the Kafka client jars and compile ``FloeClients`` into ``workdir``.

    Raises:
        JavaError: no JDK (``javac``/``java``), the jars could not be fetched, or javac
            failed.
    """
    classes = compile_java(JAVA_SOURCE_DIR, workdir / "classes")
    tmp_dir = workdir / "jvm-tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    return JavaSetup(os.pathsep.join([str(classes), kafka_client_classpath()]), tmp_dir)


@dataclass(frozen=True)
class Load:
    """How a series' producers run: each Python client's records/s and payload seed, the
    compiled Java client (None: it does not run), and where its JVM's stderr goes."""

    rate: int
    seed: int
    java: JavaSetup | None
    workdir: Path


class Client:
    """One producer's bookkeeping: records sent, acknowledged (index -> partition, and
    times in arrival order), delivery errors, and the error that stopped it if one did.

    Subclasses start the producer (:meth:`start`) and stop it after a flush
    (:meth:`finish`); their one callback thread calls :meth:`_acked` and :meth:`_failed`.
    """

    def __init__(self, name: str, bootstrap: str, topic: str) -> None:
        self.name, self.bootstrap, self.topic = name, bootstrap, topic
        self.lock = threading.Lock()
        self.sent = 0
        self.acked: dict[int, int] = {}
        """Each acknowledged record's partition, by record number."""
        self._ack_times: list[float] = []
        self._ack_partitions: list[int] = []
        self.errors = 0
        self.error: str | None = None

    def start(self) -> None:
        """Start producing."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop sending (at once; the outstanding records are still flushed)."""
        raise NotImplementedError

    def finish(self) -> None:
        """:meth:`stop`, then wait for every outstanding acknowledgement; ``error`` says
        why if that failed."""
        raise NotImplementedError

    def _acked(self, i: int, partition: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.acked[i] = partition
            self._ack_times.append(now)
            self._ack_partitions.append(partition)

    def _failed(self) -> None:
        with self.lock:
            self.errors += 1

    def next_ack(self, killed: float, partitions: Collection[int] | None = None) -> float | None:
        """The time of the first acknowledgement read more than :data:`IN_FLIGHT_S` after
        ``killed`` (to one of ``partitions`` if given), or None yet."""
        with self.lock:
            i = bisect.bisect_left(self._ack_times, killed + IN_FLIGHT_S)
            for at, p in zip(self._ack_times[i:], self._ack_partitions[i:], strict=True):
                if partitions is None or p in partitions:
                    return at
        return None


class _ThreadClient(Client):
    """A Python client sending ``rate`` records/s from its own thread until ``finish``;
    record ``i``'s value is ``<name>-<i> `` and padding up to :data:`VALUE_BYTES`."""

    def __init__(self, name: str, bootstrap: str, topic: str, load: Load) -> None:
        super().__init__(name, bootstrap, topic)
        self.rate = load.rate
        self._pads = loadgen.payloads(load.seed, _PAD_POOL, VALUE_BYTES)
        self._stop = threading.Event()
        self._next_at = 0.0
        """When the next record is due (monotonic); set as the thread starts."""
        self._thread = threading.Thread(target=self._main, name=f"failover-{name}", daemon=True)

    def value(self, i: int) -> bytes:
        head = b"%s-%d " % (self.name.encode(), i)
        return head + self._pads[i % _PAD_POOL][len(head) :]

    def ready(self) -> int:
        """How many records to send now: ``rate``/s on a schedule, with at most
        :data:`WINDOW_S` seconds' worth unacknowledged; time spent at that bound is not
        made up afterwards (the application waits, as the Java client's does), so a
        failover ends without a burst of everything that was due meanwhile."""
        now = time.monotonic()
        with self.lock:
            room = int(WINDOW_S * self.rate) - (self.sent - len(self.acked) - self.errors)
        if room <= 0:
            self._next_at = max(self._next_at, now)
            return 0
        due = int((now - self._next_at) * self.rate) + 1 if now >= self._next_at else 0
        count = min(due, room)
        self._next_at += count / self.rate
        return count

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def finish(self) -> None:
        self.stop()
        self._thread.join(FINISH_TIMEOUT_S)
        if self._thread.is_alive() and self.error is None:
            self.error = f"no flush within {FINISH_TIMEOUT_S:g} s"

    def _main(self) -> None:
        self._next_at = time.monotonic()
        try:
            self._produce()
        except Exception as exc:  # reported by the suite, which then fails the series
            self.error = f"{type(exc).__name__}: {exc}"

    def _produce(self) -> None:
        raise NotImplementedError


class ConfluentClient(_ThreadClient):
    """confluent-kafka (librdkafka); ``log_level`` 2: its "connection refused" lines for
    every standby and the dead writer would flood the progress output."""

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "broker.address.family": "v4",
                             "log_level": 2, **PRODUCER_CONFIG})  # fmt: skip
        while not self._stop.is_set():
            for _ in range(self.ready()):
                i = self.sent
                producer.produce(self.topic, self.value(i), on_delivery=self._delivered(i))
                self.sent += 1
            producer.poll(0.005)
        if producer.flush(FINISH_TIMEOUT_S - 30):
            raise RuntimeError("records left unacknowledged after the flush")

    def _delivered(self, i: int) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self._acked(i, msg.partition())
            else:
                self._failed()

        return report


class KafkaPythonClient(_ThreadClient):
    """kafka-python (idempotent by default); its callbacks run in its sender thread."""

    def _produce(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all",
                                 enable_idempotence=True, linger_ms=5)  # fmt: skip
        try:
            while not self._stop.is_set():
                for _ in range(self.ready()):
                    i = self.sent
                    future = producer.send(self.topic, self.value(i))
                    future.add_callback(lambda md, i=i: self._acked(i, md.partition))
                    future.add_errback(lambda _exc: self._failed())
                    self.sent += 1
                time.sleep(0.005)
            producer.flush(FINISH_TIMEOUT_S - 30)
        finally:
            producer.close(timeout=10)


class AiokafkaClient(_ThreadClient):
    """aiokafka, on an event loop of its own in the client's thread."""

    def _produce(self) -> None:
        asyncio.run(self._produce_async())

    async def _produce_async(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all",
                                    enable_idempotence=True, linger_ms=5)  # fmt: skip
        await producer.start()
        try:
            while not self._stop.is_set():
                for _ in range(self.ready()):
                    i = self.sent
                    delivery = await producer.send(self.topic, self.value(i))
                    delivery.add_done_callback(lambda f, i=i: self._delivered(i, f))
                    self.sent += 1
                await asyncio.sleep(0.005)
            await asyncio.wait_for(producer.flush(), FINISH_TIMEOUT_S - 30)
        finally:
            await producer.stop()

    def _delivered(self, i: int, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            self._failed()
        else:
            self._acked(i, delivery.result().partition)


class JavaClient(Client):
    """Apache's kafka-clients: ``FloeClients stream-produce`` in a child JVM, values
    ``<name><padding>-<n>``; one thread reads its ``ACK``/``ERR``/``DONE`` lines, its
    stderr goes to ``log``. ``finish`` writes ``stop`` to its stdin (the JVM flushes,
    prints ``DONE ... sent=N`` and exits)."""

    def __init__(self, name: str, bootstrap: str, topic: str, java: JavaSetup, log: Path) -> None:
        super().__init__(name, bootstrap, topic)
        self.prefix = name + "." * JAVA_PREFIX_BYTES
        self._argv = java_command(java.classpath, java.tmp_dir, JAVA_MAIN_CLASS,
                                  "stream-produce", bootstrap, topic, self.prefix)  # fmt: skip
        self._log = log
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        with self._log.open("a") as log:
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True, encoding="utf-8", start_new_session=True,
            )  # fmt: skip
        assert self._proc.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout,), name="failover-java", daemon=True
        )
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "ACK":
                partition, _offset, value = rest.split(" ")
                self._acked(int(value.rpartition("-")[2]), int(partition))
            elif kind == "ERR":
                self._failed()
            elif kind == "DONE":
                fields = dict(f.split("=", 1) for f in rest.split(" "))
                self.sent = int(fields["sent"])

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            return
        try:
            proc.stdin.write("stop\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited meanwhile: the exit code says how

    def finish(self) -> None:
        proc = self._proc
        if proc is None or self._reader is None:
            return
        self.stop()
        try:
            code = proc.wait(FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        self._reader.join()
        if code != 0 and self.error is None:
            self.error = f"the JVM exited with {code} (stderr in {self._log})"


def start_clients(load: Load, bootstrap: str, topic: str) -> list[Client]:
    """Start the four producers (three when ``load.java`` is None) on ``topic``.

    Raises:
        OSError: the JVM could not be started.
    """
    quiet = ("kafka", "aiokafka")  # their connection errors during a failover, per try
    for name in quiet:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    python: list[tuple[type[_ThreadClient], str]] = [
        (ConfluentClient, "confluent-kafka"),
        (KafkaPythonClient, "kafka-python"),
        (AiokafkaClient, "aiokafka"),
    ]
    clients: list[Client] = [cls(name, bootstrap, topic, load) for cls, name in python]
    if load.java is not None:
        load.workdir.mkdir(parents=True, exist_ok=True)
        log = load.workdir / f"java-{topic}.log"
        clients.append(JavaClient("java", bootstrap, topic, load.java, log))
    for c in clients:
        c.start()
    return clients


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    """How many times each (client, record number) is in ``topic`` (offset 0 to the end;
    a value of no known shape counts under client ``?``).

    Raises:
        RuntimeError: the end was not reached within ``_READ_TIMEOUT_S``.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "floe-bench-unused",
                         "log_level": 2,
                         "enable.auto.commit": False, "broker.address.family": "v4"})  # fmt: skip
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p]])
        left = sum(ends.values())
        seen: collections.Counter[tuple[str, int]] = collections.Counter()
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while left > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back: {left:,} records short")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    seen[_record_id(msg.value() or b"")] += 1
                    left -= 1
        return dict(seen)
    finally:
        consumer.close()


def _record_id(value: bytes) -> tuple[str, int]:
    """(client, record number) of a value ``<client>[.padding]-<n>[ padding]``."""
    head, _, number = value.split(b" ", 1)[0].rpartition(b"-")
    if not number.isdigit():
        return ("?", 0)
    return (head.rstrip(b".").decode(errors="replace"), int(number))
