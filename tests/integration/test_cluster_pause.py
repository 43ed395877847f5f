"""A broker paused past its lease (SIGSTOP, as a long GC or a stalled VM does), then
woken: real ``floe up`` processes sharing partitions on SeaweedFS and etcd, judged by
confluent-kafka clients.

While it sleeps, the writer takes its partitions over. When it wakes it is fenced: it
must leave the cluster at once (a fenced broker that stayed registered kept partitions
nobody served, and the balancer sent it more) and rejoin through a clean open, after
which the cluster serves every partition again and nothing acknowledged is lost.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import helpers.cluster
from helpers.broker import Broker
from helpers.cluster import consume_values, wait_for
from helpers.cluster import leaders_as_answered_by as leaders
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer

BUCKET = "floe-pause"
PARTITIONS = 4
SESSION_S = helpers.cluster.SESSION_MS / 1000


def settings(s3: SeaweedServer, prefix: str, etcd: EtcdServer, node: int) -> dict[str, str]:
    return helpers.cluster.sharing_settings(s3, BUCKET, prefix, etcd.endpoint, node)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    return helpers.cluster.produce_round_robin(bootstrap, topic, values, PARTITIONS)


def pause(b: Broker, seconds: float) -> None:
    """SIGSTOP the broker's process group for ``seconds``, then SIGCONT."""
    assert b.proc is not None
    os.killpg(b.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.killpg(b.proc.pid, signal.SIGCONT)


def start_pair(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> tuple[Broker, Broker, str]:
    return helpers.cluster.start_sharing_pair(broker_factory, s3, BUCKET, etcd.endpoint, PARTITIONS)


def test_a_member_paused_past_its_lease_leaves_rejoins_and_every_partition_serves(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    first = [f"a{i}".encode() for i in range(200)]
    assert sorted(produce(writer.bootstrap, topic, first)) == sorted(first)

    pause(member, 3 * SESSION_S)  # the writer takes its partitions over meanwhile
    second = [f"b{i}".encode() for i in range(200)]
    assert sorted(produce(writer.bootstrap, topic, second)) == sorted(second)
    wait_for(  # the balancer gives the rejoined member its share again
        "the rejoined member leads partitions again",
        lambda: 2 in set(leaders(writer.bootstrap, topic).values()),
        timeout_s=60,
    )
    third = [f"c{i}".encode() for i in range(200)]
    assert sorted(produce(writer.bootstrap, topic, third)) == sorted(third)
    every = first + second + third
    assert sorted(consume_values(writer.bootstrap, topic, len(every))) == sorted(every)
    log = member.stderr_text()
    assert "cluster.fenced broker=2" in log and "cluster.rejoining" in log
    assert log.count("member.listening") >= 2  # a clean open, in the same process


def test_a_writer_paused_past_its_lease_rejoins_as_a_member_and_nothing_is_lost(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    both = f"{writer.bootstrap},{member.bootstrap}"
    first = [f"a{i}".encode() for i in range(200)]
    assert sorted(produce(both, topic, first)) == sorted(first)

    pause(writer, 3 * SESSION_S)  # the member takes the writer lease meanwhile
    wait_for(
        "the member became the writer", lambda: "cluster.writer broker=2" in member.stderr_text()
    )
    second = [f"b{i}".encode() for i in range(200)]
    assert sorted(produce(both, topic, second)) == sorted(second)
    wait_for(  # the old writer rejoined as a member and got its share back
        "the old writer leads partitions again, as a member",
        lambda: 1 in set(leaders(member.bootstrap, topic).values()),
        timeout_s=60,
    )
    third = [f"c{i}".encode() for i in range(200)]
    assert sorted(produce(both, topic, third)) == sorted(third)
    every = first + second + third
    assert sorted(consume_values(both, topic, len(every))) == sorted(every)
    log = writer.stderr_text()
    assert "cluster.fenced broker=1" in log and "cluster.rejoining" in log
