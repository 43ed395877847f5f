"""A consumer-group member in its own process, for tests that SIGKILL members.

``python group_worker.py CLIENT BOOTSTRAP TOPIC GROUP LOG [DELAY_MS]`` subscribes to
TOPIC in GROUP with CLIENT (confluent, confluent-cooperative: the incremental
cooperative-sticky assignor, kafka-python or aiokafka) and, for each record,
appends ``P partition offset time_ns`` to LOG, commits ``offset + 1`` synchronously and,
once the commit succeeded, appends ``C partition next_offset time_ns``; records of a
batch fetched before a rebalance are dropped (the rebalance resets positions to the
committed offsets). Polls return one record so that nothing else is ever dropped. SIGTERM closes
the consumer cleanly (leaving the group) and exits 0. Session timeout 6 s.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
import warnings
from typing import Any, TextIO

SESSION_MS = 6000
stopping = False


def _stop(*_: Any) -> None:
    global stopping  # noqa: PLW0603 - a signal flag
    stopping = True


def _log(out: TextIO, kind: str, partition: int, offset: int) -> None:
    out.write(f"{kind} {partition} {offset} {time.time_ns()}\n")
    out.flush()


def run_confluent(
    bootstrap: str, topic: str, group: str, out: TextIO, delay: float, *, assignor: str
) -> None:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "partition.assignment.strategy": assignor,
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
        }
    )
    c.subscribe([topic])
    while not stopping:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        _log(out, "P", m.partition(), m.offset())
        time.sleep(delay)
        try:
            c.commit(
                offsets=[ck.TopicPartition(topic, m.partition(), m.offset() + 1)],
                asynchronous=False,
            )
            _log(out, "C", m.partition(), m.offset() + 1)
        except ck.KafkaException:
            pass
    c.close()


def run_kafka_python(bootstrap: str, topic: str, group: str, out: TextIO, delay: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import kafka
        from kafka.structs import OffsetAndMetadata, TopicPartition

    c = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        max_poll_records=1,  # a rebalance never strands the rest of a polled batch
    )
    while not stopping:
        for tp, msgs in c.poll(timeout_ms=100).items():
            for m in msgs:
                _log(out, "P", tp.partition, m.offset)
                time.sleep(delay)
                try:
                    c.commit(
                        {
                            TopicPartition(topic, tp.partition): OffsetAndMetadata(
                                m.offset + 1, "", -1
                            )
                        }
                    )
                    _log(out, "C", tp.partition, m.offset + 1)
                except kafka.errors.KafkaError:
                    pass
    c.close(autocommit=False)


async def run_aiokafka(bootstrap: str, topic: str, group: str, out: TextIO, delay: float) -> None:
    """aiokafka rebalances in a background task: a listener holding the same lock as
    the process-and-commit step keeps a rebalance from overtaking a record in flight,
    and records of a batch fetched before the rebalance are dropped (the aiokafka
    documentation's pattern)."""
    import aiokafka
    from aiokafka.errors import KafkaError

    lock = asyncio.Lock()
    rebalances = 0

    class Listener(aiokafka.ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            nonlocal rebalances
            async with lock:
                rebalances += 1

        async def on_partitions_assigned(self, assigned: Any) -> None:
            pass

    c = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        max_poll_records=1,
    )
    c.subscribe([topic], listener=Listener())
    await c.start()
    try:
        while not stopping:
            batches = await c.getmany(timeout_ms=100)
            seen = rebalances  # records returned now are of the current assignment
            for tp, msgs in batches.items():
                for m in msgs:
                    async with lock:
                        if stopping or rebalances != seen:
                            break
                        _log(out, "P", tp.partition, m.offset)
                        await asyncio.sleep(delay)
                        try:
                            await c.commit({tp: m.offset + 1})
                            _log(out, "C", tp.partition, m.offset + 1)
                        except KafkaError:
                            pass
    finally:
        await c.stop()


def main() -> None:
    client, bootstrap, topic, group, path = sys.argv[1:6]
    delay = int(sys.argv[6]) / 1000 if len(sys.argv) > 6 else 0.0
    signal.signal(signal.SIGTERM, _stop)
    with open(path, "a") as out:
        if client == "confluent":
            run_confluent(bootstrap, topic, group, out, delay, assignor="range,roundrobin")
        elif client == "confluent-cooperative":
            run_confluent(bootstrap, topic, group, out, delay, assignor="cooperative-sticky")
        elif client == "kafka-python":
            run_kafka_python(bootstrap, topic, group, out, delay)
        else:
            asyncio.run(run_aiokafka(bootstrap, topic, group, out, delay))


if __name__ == "__main__":
    main()
