"""Group coordinators where Kafka puts them, in a cluster whose brokers share
partitions: a group's coordinator is the leader of its ``__consumer_offsets``
partition, those partitions are spread over the brokers like any other, and when a
broker dies its groups move with their partitions (their state replayed from the
bucket) and go on with their committed offsets. Real ``floe up`` processes on a real
S3 server (SeaweedFS) and etcd, judged by confluent-kafka clients.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest

from floe.coordinator.group import partition_for
from helpers.admin import admin, create_topic
from helpers.broker import Broker, floe_bin
from helpers.cluster import crash, produce_round_robin, wait_for
from helpers.cluster_etcd import EtcdServer
from helpers.cluster_groups import OFFSETS_PARTITIONS, group_led_by, offsets_leaders, start_three
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-groups"
PARTITIONS = 6
RECORDS = 600


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def cluster_status(b: Broker) -> list[list[str]]:
    """``floe cluster status`` as ``b``'s admin API answers it: the brokers' rows."""
    done = subprocess.run(
        [floe_bin(), "cluster", "status", "--admin", b.admin_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [line.split() for line in done.stdout.splitlines() if line[:1].strip().isdigit()]


def api(b: Broker, path: str) -> Any:
    with urllib.request.urlopen(f"{b.admin_url}{path}", timeout=30) as answer:
        return json.load(answer)


def coordinator_of(bootstrap: str, group: str) -> int:
    """The coordinator's node id, as the Admin API of confluent-kafka finds it."""
    client = admin(bootstrap)  # kept alive until the answer (see helpers.admin.admin)
    found = client.describe_consumer_groups([group])
    return int(found[group].result(timeout=30).coordinator.id)


def consume(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    """``count`` records by a consumer of ``group`` from its committed offsets (the
    earliest without), committed synchronously before it leaves."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(
            f"{count} records for {group}",
            lambda: (
                got.extend(
                    m.value() or b""
                    for m in consumer.consume(count - len(got), 1.0)
                    if not m.error()
                )
                or len(got) >= count
            ),
            timeout_s=90,
        )
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_groups_are_coordinated_by_their_partitions_leaders_and_move_with_them(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    brokers = start_three(broker_factory, s3, BUCKET, etcd)
    writer, _, doomed = brokers
    every = ",".join(b.bootstrap for b in brokers)
    topic = create_topic(writer.bootstrap, partitions=PARTITIONS)
    values = [f"v{i}".encode() for i in range(RECORDS)]
    assert sorted(produce_round_robin(every, topic, values, PARTITIONS)) == sorted(values)
    leaders = offsets_leaders(writer)
    groups = {node: group_led_by(node, leaders, "plain") for node in (1, 2, 3)}
    # NODE HOST PORT RACK PARTITIONS GROUP-PARTITIONS: every broker coordinates groups
    rows = cluster_status(writer)
    assert {int(r[0]): int(r[5]) for r in rows} == Counter(leaders.values()), rows

    first: dict[int, list[bytes]] = {}
    for node, group in groups.items():
        first[node] = consume(every, topic, group, RECORDS // 2)
        for b in brokers:  # FindCoordinator names the leader, whichever broker is asked
            assert coordinator_of(b.bootstrap, group) == node, (group, b.bootstrap)
    assert f"group.shard.loaded partition={partition_for(groups[3], OFFSETS_PARTITIONS)}" in (
        doomed.stderr_text()
    )
    # Kafka's admin clients ask every broker (ListGroups): each lists those it coordinates
    client = admin(every)
    listed_by_kafka = client.list_consumer_groups().result(timeout=30)
    assert set(groups.values()) <= {g.group_id for g in listed_by_kafka.valid}
    # the writer's admin API (and console) gathers every broker's groups
    listed = {g["group"]: g for g in api(writer, "/api/v1/groups")["groups"]}
    assert set(groups.values()) <= set(listed), listed
    for node, group in groups.items():
        detail = api(writer, f"/api/v1/groups/{group}")
        committed = sum(p["committed_offset"] or 0 for p in detail["partitions"])
        assert committed == len(first[node]), (node, detail)

    crash(doomed)
    survivors = ",".join(b.bootstrap for b in brokers[:2])
    wait_for(
        "the dead member's __consumer_offsets partitions are led again",
        lambda: set(offsets_leaders(writer).values()) == {1, 2},
        timeout_s=60,
    )
    for node, group in groups.items():
        rest = consume(survivors, topic, group, RECORDS - len(first[node]))
        # none lost, none twice: each group goes on from the offsets it committed
        assert sorted(first[node] + rest) == sorted(values), group
    moved = coordinator_of(writer.bootstrap, groups[3])
    assert moved in (1, 2)
    print(f"group {groups[3]} moved from broker 3 to broker {moved} with its offsets")
