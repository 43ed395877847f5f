"""Exactly-once consume-transform-produce across ``kill -9`` of the application.

A child process (``helpers/eos_worker.py``) copies an input topic to an output topic
with confluent-kafka transactions, committing its consumed offsets inside each
transaction. The test kills it with SIGKILL several times mid-stream and restarts it
with the same transactional id (which fences and aborts the dead instance's open
transaction). A read_committed reader of the output then sees every input record
exactly once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, unique_topic
from helpers.broker import Broker
from helpers.txn import consume_values

WORKER = Path(__file__).parents[1] / "helpers" / "eos_worker.py"
PARTITIONS = 2
RECORDS = 3000
KILLS = 3
Worker = subprocess.Popen[bytes]


def start_worker(b: Broker, topics: tuple[str, str], group: str, err: BinaryIO) -> Worker:
    source, sink = topics
    return subprocess.Popen(
        [sys.executable, str(WORKER), b.bootstrap, source, sink, group, "eos-app", "4"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )


def output_count(b: Broker, sink: str) -> int:
    consumer = ck.Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "probe", "enable.auto.commit": False}
    )
    try:
        return sum(
            consumer.get_watermark_offsets(ck.TopicPartition(sink, p), 10)[1]
            for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


@pytest.mark.crash
def test_consume_transform_produce_exactly_once_across_kill9(
    engine_broker_factory: Callable[..., Broker], tmp_path: Path
) -> None:
    b = engine_broker_factory({"group.initial.rebalance.delay.ms": "0"})
    source = create_topic(b.bootstrap, partitions=PARTITIONS)
    sink = create_topic(b.bootstrap, partitions=PARTITIONS)
    group = unique_topic("eos")
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    log = tmp_path / "worker.stderr"
    err = log.open("ab")
    worker = start_worker(b, (source, sink), group, err)
    try:
        for k in range(KILLS + 1):
            start = output_count(b, sink)
            for i in range(k * RECORDS // (KILLS + 1), (k + 1) * RECORDS // (KILLS + 1)):
                producer.produce(source, value=b"%06d" % i, partition=i % PARTITIONS)
            assert producer.flush(30) == 0
            if k == KILLS:
                break
            deadline = time.monotonic() + 60
            while output_count(b, sink) < start + 200:  # mid-stream, output flowing
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"no progress:\n{log.read_text()[-3000:]}"
                time.sleep(0.05)
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            worker = start_worker(b, (source, sink), group, err)
        assert worker.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        err.close()

    out = consume_values(b.bootstrap, sink, PARTITIONS, "read_committed", RECORDS)
    counts = Counter(v for _, v in out)
    assert {v for v in counts} == {b"out-%06d" % i for i in range(RECORDS)}
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
    for p, v in out:
        assert int(v[4:]) % PARTITIONS == p
