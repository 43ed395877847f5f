"""Kafka's reassignment API on a cluster sharing partitions, judged by the unmodified Java
Admin (kafka-clients 3.9.1): ``alterPartitionReassignments`` moves partitions between
brokers, the writer's balancing then leaves them where they were put
(``cluster.reassignment.hold.ms``), and producers of all four clients follow the move
without losing or repeating a record; ``listPartitionReassignments`` shows a move in
flight as Kafka does (replicas, adding, removing) and a cancel undoes it; a request
Floe cannot carry out gets Kafka's exception. Real ``floe up`` processes on SeaweedFS
and etcd.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

import helpers.cluster
from helpers.admin import watermarks
from helpers.broker import Broker
from helpers.clients import (
    aiokafka_produce,
    confluent_consume,
    kafka_python_produce,
)
from helpers.cluster import leaders_as_answered_by as leaders
from helpers.cluster import wait_for
from helpers.cluster_etcd import EtcdServer
from helpers.java import FloeJava, events, floe_clients
from helpers.records import Record
from helpers.seaweed import SeaweedServer
from helpers.streaming import SequenceStream

BUCKET = "floe-reassign"
PARTITIONS = 4
HOLD_S = 5.0
"""How long the test watches the balancing leave the placed partitions alone: five of
its passes (one a second at the tests' 3 s session timeout); without the hold it moves
two back at the first pass that sees 4 against 0."""


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> FloeJava:
    return floe_clients(tmp_path_factory)


def _steps(lines: list[str], kind: str) -> list[list[str]]:
    return [line.split(" ")[1:] for line in lines if line.startswith(kind + " ")]


def _everything(bootstrap: str, topic: str) -> Counter[bytes]:
    """How many times each value is in the topic."""
    ends = {p: high for p, (_, high) in watermarks(bootstrap, topic, PARTITIONS).items()}
    return Counter(r.value or b"" for r in confluent_consume(bootstrap, topic, ends))


def test_the_java_admin_moves_partitions_and_the_balancing_leaves_them(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, java: FloeJava
) -> None:
    writer, member, topic = helpers.cluster.start_sharing_pair(
        broker_factory, s3, BUCKET, etcd.endpoint, PARTITIONS
    )
    theirs = sorted(p for p, b in leaders(writer.bootstrap, topic).items() if b == 2)
    stream = SequenceStream(member.bootstrap, topic, PARTITIONS, idempotent=True)
    stream.thread.start()
    try:
        java_acked = _move_under_load(
            java, writer, member, topic=topic, theirs=theirs, stream=stream
        )
    finally:
        stream.stop.set()
        stream.thread.join(180)
    assert not stream.failed, list(stream.failed.items())[:3]
    # clients that never saw the old leaders write to the moved partitions too
    for client, produce in (("kp", kafka_python_produce), ("ak", aiokafka_produce)):
        records = [
            Record(None, f"{client}-{i}".encode(), partition=theirs[i % 2]) for i in range(50)
        ]
        acked = produce(member.bootstrap, topic, records)
        assert {r.partition for r in acked} == set(theirs)

    seen = _everything(writer.bootstrap, topic)
    expected = [b"seq-%08d" % seq for seq in stream.acked] + java_acked
    expected += [f"{c}-{i}".encode() for c in ("kp", "ak") for i in range(50)]
    assert [v for v in expected if seen[v] != 1] == []
    assert "cluster.reassignment broker=1" in writer.stderr_text()


def _move_under_load(
    java: FloeJava,
    writer: Broker,
    member: Broker,
    *,
    topic: str,
    theirs: list[int],
    stream: SequenceStream,
) -> list[bytes]:
    """Move the member's partitions to the writer with the Java Admin while ``stream``
    and a Java producer write to every partition; check the placement holds; returns
    the values the Java producer had acknowledged."""
    with java.start("stream-produce", member.bootstrap, topic, "jv") as java_producer:
        java_producer.wait_for(lambda lines: bool(events(lines, "ACK")), 60, "a first ACK")
        stream.wait_for_acks(200)
        # the Admin bootstraps from the member, which names the writer as controller
        steps = [f"{p}=1" for p in theirs]
        lines = java.run("reassign", member.bootstrap, topic, *steps, "settled")
        assert _steps(lines, "REASSIGN") == [[str(p), "1", "OK"] for p in theirs]
        # the balancing evens the counts out with the partitions nobody placed
        placed = {p: 1 if p in theirs else 2 for p in range(PARTITIONS)}
        wait_for(
            "the placed partitions on the writer, the others on the member, as both say",
            lambda: (
                leaders(writer.bootstrap, topic) == placed
                and leaders(member.bootstrap, topic) == placed
            ),
        )
        time.sleep(HOLD_S)
        assert leaders(writer.bootstrap, topic) == placed
        stream.wait_for_acks(len(stream.acked) + 200)  # it goes on after the moves
        before = len(events(java_producer.lines, "ACK"))
        java_producer.wait_for(
            lambda lines: len(events(lines, "ACK")) > before, 60, "ACKs after the moves"
        )
        produced = java_producer.stop()
    return [e.value.encode() for e in events(produced, "ACK")]


def test_an_ongoing_reassignment_is_listed_and_cancelled(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, java: FloeJava
) -> None:
    """The member is stopped (SIGSTOP) so that a move away from it stays in flight while
    the Admin looks at it; its session (15 s) outlasts the Admin's run."""
    writer, member, topic = helpers.cluster.start_sharing_pair(
        broker_factory, s3, BUCKET, etcd.endpoint, PARTITIONS,
        **{"cluster.session.timeout.ms": "15000"},
    )  # fmt: skip
    before = leaders(writer.bootstrap, topic)
    p = min(q for q, b in before.items() if b == 2)
    mine = min(q for q, b in before.items() if b == 1)
    assert member.proc is not None
    os.killpg(member.proc.pid, signal.SIGSTOP)
    try:
        lines = java.run(
            "reassign", writer.bootstrap, topic,
            f"{p}=1", "list", f"{p}=cancel", "list", f"{p}=cancel",
            f"{mine}=9", f"{mine}=1,2", f"{mine}=1", f"{PARTITIONS}=1",
        )  # fmt: skip
    finally:
        os.killpg(member.proc.pid, signal.SIGCONT)
    assert _steps(lines, "REASSIGN") == [
        [str(p), "1", "OK"],
        [str(p), "cancel", "OK"],
        [str(p), "cancel", "NoReassignmentInProgressException"],
        [str(mine), "9", "InvalidReplicaAssignmentException"],
        [str(mine), "1,2", "InvalidReplicaAssignmentException"],
        [str(mine), "1", "OK"],  # where it is already: done at once
        [str(PARTITIONS), "1", "UnknownTopicOrPartitionException"],
    ]
    # the first list: the move in flight, as Kafka shows one; the second: none
    assert _steps(lines, "ONGOING") == [[str(p), "1,2", "1", "2"]]
    assert _steps(lines, "REASSIGNING") == [["1"], ["0"]]
    # the cancelled move left the partition with the member, which serves it again
    wait_for("the member serves again", lambda: helpers.cluster.takes_connections(member))
    assert leaders(writer.bootstrap, topic) == before
    records = [Record(None, f"after-{i}".encode(), partition=p) for i in range(20)]
    assert {r.partition for r in kafka_python_produce(member.bootstrap, topic, records)} == {p}
