"""Exactly-once for a table topic in a cluster whose writer dies in every phase of a
commit round.

Two brokers share one bucket prefix and an etcd metadata store: the writer (the only
broker that runs the table-topic coordinator and its Spark) and a standby. The table
lives in SeaweedFS's Iceberg REST catalog (a table bucket: the warehouse on S3). An
idempotent acks=all producer, bootstrapped with both brokers, streams keyed records with
a header into a 3-partition table topic (``string`` values, 1 s commit interval) for the
whole test, while the writer is SIGKILLed (its whole process group: the broker and its
Spark, as when the machine dies) ``KILLS`` times. Each time the standby takes over and
resumes from the table's committed offsets, and the killed broker comes back as the new
standby. Each kill is aimed at one phase of a round (``helpers.table_failover``: a data
file written, a commit taken by the catalog, a commit logged, a random moment). After
the last kill the producer stops, the table catches up with the log end offsets, and
the test proves: the table's (partition, offset) pairs are exactly the topic's, each
once; each row's key, value, header and timestamp equal the topic's record; every
acknowledged record is in the topic at its acknowledged offset.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from floe.tabletopic.model import COMMIT_ID_PROP, OFFSETS_PROP
from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consume
from helpers.cluster import crash, the_writer, wait_for, wait_writer
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
    places,
    seeded,
)

BUCKET = "floe-table-failover"
KILLS = int(os.environ.get("FLOE_TABLE_FAILOVER_KILLS", "4"))
"""``make test`` kills the writer once in each phase; ``make crash`` three times."""

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


def test_table_topic_exactly_once_across_writer_kills(
    start_broker: Callable[..., Broker], s3: SeaweedServer
) -> None:
    seed, phases = seeded(KILLS)
    rng = random.Random(seed)

    def standing_by(b: Broker, seen: int) -> Callable[[], bool]:
        return lambda: b.stderr_text().count("cluster.standby") > seen

    writer = wait_writer(start_broker(1))
    standby = start_broker(2)
    wait_for("a standby", standing_by(standby, 0), 60)
    brokers = [writer, standby]
    create_topic(
        writer.bootstrap,
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

    def catalog_table() -> Any:
        return cat.load_table(cat.load_catalog(settings), *table)

    def table_offsets() -> dict[int, int]:
        """The committed ends the table records (empty before its first commit)."""
        try:
            recorded = cat.read_recorded(catalog_table())
        except (NoSuchNamespaceError, NoSuchTableError):
            return {}
        return {int(p): int(o) for p, o in recorded.committed.items()}

    kills: list[Kill] = []
    stream = KeyedStream(
        ",".join(b.bootstrap for b in brokers), TOPIC, PARTITIONS, per_second=PER_SECOND
    )
    stream.thread.start()
    try:
        armed_at = time.monotonic()
        for phase in phases:
            landed, logged = objects.commits(), committed_lines(writer)
            due = arm(phase, writer, objects, rng)
            wait_event(due, writer, stream, f"seed {seed}: {phase}", POLL_S)
            killed_at = time.monotonic()
            crash(writer)
            landed_n, logged_n = len(objects.commits() - landed), committed_lines(writer) - logged
            new = the_writer([standby], TAKEOVER_DEADLINE_S)
            serving_s = time.monotonic() - killed_at
            kills.append(
                Kill(phase, round(killed_at - armed_at, 2), landed_n, logged_n, round(serving_s, 2))
            )
            armed_at = time.monotonic()
            seen = writer.stderr_text().count("cluster.standby")
            writer.start(wait=False)  # back, as the standby now
            writer, standby = new, writer
            wait_for("the killed broker standing by", standing_by(standby, seen), 60)
        wait_for(
            "an acknowledgement after the last kill",
            lambda: stream.acked_at > armed_at,
            TAKEOVER_DEADLINE_S,
        )
    finally:
        stream.stop.set()
        stream.thread.join(150)
    print("kills: phase, s since armed, commits landed/logged, kill -> new writer serving s")
    for k in kills:
        print(f"  {k.phase:<10} {k.after_s:6.2f} {k.landed:3d}/{k.logged:<3d} {k.serving_s:6.2f}")
    assert len(kills) == KILLS
    assert not stream.thread.is_alive(), "producer did not finish flushing"
    assert stream.unflushed == 0 and not stream.failed, list(stream.failed.items())[:3]
    assert len(stream.acked) == stream.produced

    # the table's rounds run on the controller, wherever it is now (floe cluster status)
    assert places(writer) == {TOPIC: int(writer.settings["node.id"])}

    # the new writer's coordinator catches the table up with the log end offsets
    ends = {p: high for p, (_, high) in watermarks(writer.bootstrap, TOPIC, PARTITIONS).items()}
    wait_caught_up(table_offsets, ends, writer, f"seed {seed}: ")

    log = {(r.partition, r.offset): r for r in confluent_consume(writer.bootstrap, TOPIC, ends)}
    assert len(log) == sum(ends.values())
    assert_acked_in_topic(stream, log)

    t = catalog_table()
    assert t.location() == f"s3://{TABLE_BUCKET}/{objects.prefix.rstrip('/')}"  # as watched
    rows = t.scan().to_arrow().to_pylist()
    try:
        assert_table_is_topic(rows, log)
    except AssertionError as exc:
        snapshots = [
            f"{s.snapshot_id} {s.operation} added={s.summary.get('added-records')} "
            f"commit={s.summary.get(COMMIT_ID_PROP)} offsets={s.summary.get(OFFSETS_PROP)}"
            for s in cat.snapshots(t)
        ]
        raise AssertionError(
            f"seed {seed}, kills {kills}: {exc}\nsnapshots, newest first:\n" + "\n".join(snapshots)
        ) from None
    print(f"{len(rows)} rows, {len(stream.acked)} acked, ends {ends}")
