"""Exactly-once for a table topic in a cluster whose brokers share partitions, across
kills of the broker running its rounds in every phase of a round.

Three brokers share one bucket prefix and an etcd metadata store; the table lives in
SeaweedFS's Iceberg REST catalog. The table topic's three partitions are spread over the
brokers and its coordinator runs on the leader of partition 0. An idempotent acks=all
producer streams keyed records with a header into it for the whole test, while the
coordinating broker is SIGKILLed (with its Spark) ``KILLS`` times, each kill aimed at a
phase of a round (``helpers.table_failover``), every other one a member's. After the
last kill the producer stops, the table catches up with the log end offsets, and the
test proves what the writer-kill test proves: the table is the topic, each record once,
every acknowledged record at its acknowledged offset.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consume
from helpers.cluster import crash, wait_for, wait_writer, writing
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer, seaweed_server
from helpers.table_eos import (
    KeyedStream,
    assert_acked_in_topic,
    assert_table_is_topic,
    committed_lines,
    wait_caught_up,
    wait_event,
)
from helpers.table_failover import (
    PARTITIONS,
    PER_SECOND,
    POLL_S,
    TABLE_BUCKET,
    TAKEOVER_DEADLINE_S,
    TOPIC,
    Brokers,
    Kill,
    TableObjects,
    arm,
    move_zero,
    places,
    seeded,
)

BUCKET = "floe-table-coordinator"
KILLS = int(os.environ.get("FLOE_TABLE_COORDINATOR_KILLS", "2"))
"""``make test`` kills the controller once and a member once; ``make crash`` eight
times."""

pytestmark = [pytest.mark.crash, pytest.mark.timeout(300 * KILLS)]


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        server.s3_client("s3tables").create_table_bucket(name=TABLE_BUCKET)
        yield server


@pytest.fixture
def start_broker(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> Iterator[Callable[..., Broker]]:
    brokers = Brokers(broker_factory, s3, BUCKET, etcd)
    yield brokers.start
    brokers.kill_all()


def test_table_topic_exactly_once_across_coordinator_kills_when_brokers_share(
    start_broker: Callable[..., Broker], s3: SeaweedServer
) -> None:
    """Three brokers sharing partitions: the table topic's partitions are spread over
    them and its coordinator runs on the leader of partition 0. Each kill is aimed at a
    phase of a round of the broker coordinating the topic: every other kill a member's
    (partition 0 moved to a member first with Kafka's reassignment API, kafka-python's
    ``alter_partition_reassignments``), the others whichever broker coordinates it (a
    controller's death moves its partitions to the new controller). Its partitions and
    the coordinator move, the killed broker comes back as a member, and the table ends
    equal to the topic, each record once."""
    seed, phases = seeded(KILLS)
    rng = random.Random(seed)

    def listening(b: Broker, seen: int) -> Callable[[], bool]:
        return lambda: b.stderr_text().count("member.listening") > seen

    first = wait_writer(start_broker(1, share=True))
    brokers = {1: first, **{n: start_broker(n, share=True) for n in (2, 3)}}
    for n in (2, 3):
        wait_for(f"broker {n} leads partitions", listening(brokers[n], 0), 60)
    create_topic(
        first.bootstrap,
        TOPIC,
        PARTITIONS,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "string",
        },
    )
    table = table_identifier("default", TOPIC)
    objects = TableObjects(s3, table)
    settings = cat.CatalogSettings.from_config(
        load_config(None, s3.catalog_settings(TABLE_BUCKET), environ={})
    )

    def table_offsets() -> dict[int, int]:
        try:
            recorded = cat.read_recorded(cat.load_table(cat.load_catalog(settings), *table))
        except (NoSuchNamespaceError, NoSuchTableError):
            return {}
        return {int(p): int(o) for p, o in recorded.committed.items()}

    def coordinator(dead: int | None = None) -> Broker:
        """The live broker coordinating the topic, as a live broker's view says."""
        found: list[Broker] = []

        def named() -> bool:
            for b in (b for n, b in brokers.items() if n != dead and b.running):
                try:  # a broker becoming the writer serves no admin API for a moment
                    node = places(b).get(TOPIC)
                except subprocess.CalledProcessError:
                    continue
                if node is None or node == dead or not brokers[node].running:
                    return False
                found.append(brokers[node])
                return True
            return False

        wait_for("a live coordinator of the topic", named, TAKEOVER_DEADLINE_S)
        return found[-1]

    kills: list[Kill] = []
    victims: list[str] = []  # node:c (the controller) or node:m (a member)
    stream = KeyedStream(
        ",".join(b.bootstrap for b in brokers.values()), TOPIC, PARTITIONS, per_second=PER_SECOND
    )
    stream.thread.start()
    try:
        armed_at = time.monotonic()
        for i, phase in enumerate(phases):
            victim = coordinator()
            if i % 2 and writing(victim):  # a member's turn: partition 0 goes to one
                node = next(n for n, b in brokers.items() if b.running and not writing(b))
                move_zero(victim, node)
                wait_for("a member coordinates", lambda n=node: coordinator() is brokers[n])
                victim = brokers[node]
            victims.append(f"{int(victim.settings['node.id'])}:{'c' if writing(victim) else 'm'}")
            landed, logged = objects.commits(), committed_lines(victim)
            due = arm(phase, victim, objects, rng)
            wait_event(due, victim, stream, f"seed {seed}: {phase}", POLL_S)
            killed_at = time.monotonic()
            crash(victim)
            landed_n, logged_n = len(objects.commits() - landed), committed_lines(victim) - logged
            dead = int(victim.settings["node.id"])
            coordinator(dead)
            moved_s = time.monotonic() - killed_at
            kills.append(
                Kill(phase, round(killed_at - armed_at, 2), landed_n, logged_n, round(moved_s, 2))
            )
            armed_at = time.monotonic()
            seen = victim.stderr_text().count("member.listening")
            victim.start(wait=False)  # back, as a member now
            wait_for("the killed broker leading partitions again", listening(victim, seen), 90)
        wait_for(
            "an acknowledgement after the last kill",
            lambda: stream.acked_at > armed_at,
            TAKEOVER_DEADLINE_S,
        )
    finally:
        stream.stop.set()
        stream.thread.join(150)
    print("kills: broker, phase, s since armed, commits landed/logged, -> coordinator moved s")
    for v, k in zip(victims, kills, strict=True):
        print(
            f"  {v} {k.phase:<10} {k.after_s:6.2f} {k.landed:3d}/{k.logged:<3d} {k.serving_s:6.2f}"
        )
    assert len(kills) == KILLS
    assert any(v.endswith(":m") for v in victims), victims
    assert not stream.thread.is_alive(), "producer did not finish flushing"
    assert stream.unflushed == 0 and not stream.failed, list(stream.failed.items())[:3]
    assert len(stream.acked) == stream.produced

    last = coordinator()
    ends = {p: high for p, (_, high) in watermarks(last.bootstrap, TOPIC, PARTITIONS).items()}
    wait_caught_up(table_offsets, ends, last, f"seed {seed}: ")
    log = {(r.partition, r.offset): r for r in confluent_consume(last.bootstrap, TOPIC, ends)}
    assert len(log) == sum(ends.values())
    assert_acked_in_topic(stream, log)
    rows = cat.load_table(cat.load_catalog(settings), *table).scan().to_arrow().to_pylist()
    assert_table_is_topic(rows, log)
    print(f"{len(rows)} rows, {len(stream.acked)} acked, ends {ends}, kills {kills}")
