"""Exactly-once consume-transform-produce in a cluster, across ``kill -9`` of the
broker that coordinates the application's group, of the one that coordinates its
transactional id, and of the controller.

Three brokers share partitions on a real S3 server (SeaweedFS) and etcd. The
application (``helpers/eos_worker.py``, confluent-kafka transactions committing its
consumed offsets inside each transaction) uses a transactional id whose
``__transaction_state`` partition member 2 leads and a group whose
``__consumer_offsets`` partition member 3 leads, so every commit crosses brokers: the
transaction's coordinator writes markers to the output's partitions on every broker
and completes the group on member 3 with WriteTxnMarkers. The test kills member 3
mid-stream, then member 2, then the controller, restarting each once every partition
is led by the others; the application is restarted whenever it exits (a client that
gives up, or hangs past its timeout, is restarted by its operator, as after a kill). A
read_committed reader of the output then sees every input record exactly once.

The application is a static member with a 45 s session: a static member's session
must outlast its coordinator's failover, or the client forgets its member id and the
new coordinator fences it (FENCED_INSTANCE_ID, as Kafka does), which librdkafka treats
as fatal. docs/operations.md says so.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import confluent_kafka as ck
import pytest

from floe.coordinator.group import partition_for
from helpers.admin import create_topic, unique_topic
from helpers.broker import Broker
from helpers.cluster import crash, the_writer, wait_for
from helpers.cluster_etcd import EtcdServer
from helpers.cluster_groups import (
    OFFSETS_PARTITIONS,
    group_led_by,
    offsets_leaders,
    start_three,
    txn_leaders,
)
from helpers.seaweed import SeaweedServer, seaweed_server
from helpers.txn import consume_values

WORKER = Path(__file__).parents[1] / "helpers" / "eos_worker.py"
BUCKET = "floe-cluster-eos"
PARTITIONS = 3
RECORDS = 3000
SESSION_MS = 45_000


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


class Application:
    """The eos_worker child, started again whenever it exited."""

    def __init__(self, argv: list[str], err: BinaryIO) -> None:
        self.argv = argv
        self.err = err
        self.exits: list[int] = []
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), *self.argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.err,
        )

    def keep_running(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            self.exits.append(rc)
            self.proc = self._start()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offsets ``group`` committed on ``topic`` (summed), as a consumer that does not
    join finds them; 0 while no coordinator answers."""
    probe = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        found = probe.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], 5)
        return sum(max(tp.offset, 0) for tp in found)
    except ck.KafkaException:
        return 0
    finally:
        probe.close()


def wait_led_elsewhere(victim: Broker, brokers: list[Broker]) -> None:
    """Until the surviving brokers' writer names one of them as the leader of every
    ``__consumer_offsets`` and ``__transaction_state`` partition (those the dead
    ``victim`` led included)."""
    others = [b for b in brokers if b is not victim]
    live = {int(b.settings["node.id"]) for b in others}

    def led_by_the_others() -> bool:
        writer = the_writer(others)
        named = {*offsets_leaders(writer).values(), *txn_leaders(writer).values()}
        return named <= live

    wait_for(f"every coordinator partition is led by brokers {sorted(live)}", led_by_the_others)


@pytest.mark.crash
def test_exactly_once_across_kills_of_the_group_coordinator_and_the_controller(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, tmp_path: Path
) -> None:
    brokers = start_three(
        broker_factory, s3, BUCKET, etcd, **{"group.initial.rebalance.delay.ms": "0"}
    )
    writer, txn_coordinator, group_coordinator = brokers
    every = ",".join(b.bootstrap for b in brokers)
    source = create_topic(writer.bootstrap, partitions=PARTITIONS)
    sink = create_topic(writer.bootstrap, partitions=PARTITIONS)
    group = group_led_by(3, offsets_leaders(writer), "eos")
    tid = group_led_by(2, txn_leaders(writer), unique_topic("eos-app"))
    producer = ck.Producer({"bootstrap.servers": every, "enable.idempotence": True})
    log = tmp_path / "application.stderr"
    err = log.open("ab")
    app = Application([every, source, sink, group, tid, "600", str(SESSION_MS)], err)
    victims = [group_coordinator, txn_coordinator, writer]
    try:
        for chunk in range(len(victims) + 1):
            start = committed(every, group, source)
            share = RECORDS // (len(victims) + 1)
            for i in range(chunk * share, (chunk + 1) * share):
                producer.produce(source, value=b"%06d" % i, partition=i % PARTITIONS)
            assert producer.flush(60) == 0
            if chunk == len(victims):
                break
            deadline = time.monotonic() + 90
            while committed(every, group, source) < start + 300:  # mid-stream
                app.keep_running()
                assert time.monotonic() < deadline, f"no progress:\n{log.read_text()[-3000:]}"
                time.sleep(0.1)
            victim = victims[chunk]
            if victim is group_coordinator:
                marker = f"txn.group_marker partition={partition_for(group, OFFSETS_PARTITIONS)} "
                assert marker in victim.stderr_text()
            if victim is txn_coordinator:
                assert f"txn.producer_initialized transactional_id={tid} " in victim.stderr_text()
            crash(victim)
            wait_led_elsewhere(victim, brokers)
            victim.start(wait=False)

        def all_committed() -> bool:
            app.keep_running()
            return committed(every, group, source) == RECORDS

        wait_for("the application committed every input record", all_committed, timeout_s=180)
    finally:
        app.kill()
        err.close()

    out = consume_values(every, sink, PARTITIONS, "read_committed", RECORDS, deadline_s=60)
    counts = Counter(v for _, v in out)
    assert set(counts) == {b"out-%06d" % i for i in range(RECORDS)}
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
    for p, v in out:
        assert int(v[4:]) % PARTITIONS == p
    print(f"application exits (restarted): {app.exits}")
