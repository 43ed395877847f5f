"""Table topics coordinated on every broker of a cluster that shares partitions.

Three ``floe up`` brokers on SeaweedFS (the log and an Iceberg REST catalog) and etcd,
each running its own Spark (``local[*]``) or all submitting to one Spark standalone
cluster (``spark.master``). Six Avro table topics (``by_schema_id``) of two partitions
each are spread over the brokers like any topic; each one's coordinator (its rounds and
its Spark job) runs on the leader of its partition 0, and reads the partition another
broker leads from that broker (read_committed: an aborted transaction over every
broker's partitions never lands); a member's coordinators read the schemas from its copy
of the writer's registry. ``floe cluster status`` names each topic's coordinator, on at
least two brokers, and rounds commit on at least two. Then a member that committed
rounds is killed (``kill -9``): its partitions and coordinators move, and every table
still holds exactly its topic's records, those acknowledged before and after the kill,
each once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from floe.config import load_config
from floe.tabletopic.catalog import CatalogSettings, load_catalog, load_table
from floe.tabletopic.convert import table_identifier
from helpers.admin import admin, create_topic
from helpers.broker import Broker
from helpers.cluster import crash, leaders_as_answered_by, wait_for
from helpers.cluster_etcd import EtcdServer
from helpers.cluster_groups import start_three
from helpers.seaweed import SeaweedServer, seaweed_server
from helpers.spark_cluster import SparkCluster
from helpers.table_failover import places

pytestmark = [pytest.mark.timeout(900), pytest.mark.filterwarnings("ignore::ResourceWarning")]

BUCKET = "floe-table-coordinators"
TABLE_BUCKET = "coordinated-tables"
TOPICS = 6
PARTITIONS = 2
CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
}
TABLE = {"table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"}


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        server.s3_client("s3tables").create_table_bucket(name=TABLE_BUCKET)
        yield server


def committed_rows(b: Broker) -> int:
    """Rows the rounds of ``b`` committed, as its log says."""
    return sum(int(n) for n in re.findall(r"tabletopic\.committed .* rows=(\d+)", b.stderr_text()))


class Topics:
    """The six table topics and what was acknowledged to each, by value."""

    def __init__(self, writer: Broker, catalog: dict[str, str]) -> None:
        self.writer = writer
        self.names = [create_topic(writer.bootstrap, partitions=PARTITIONS) for _ in range(TOPICS)]
        self.acked: dict[str, list[str]] = {t: [] for t in self.names}
        self.settings = CatalogSettings.from_config(load_config(None, catalog, environ={}))

    def zeros(self) -> dict[str, int]:
        """Each topic's partition 0 leader, as the writer answers Metadata."""
        return {t: leaders_as_answered_by(self.writer.bootstrap, t)[0] for t in self.names}

    def enable(self) -> None:
        """Make every topic a table topic of Avro values."""
        resources = []
        for topic in self.names:
            configs = {**TABLE, "table.topic.convert.value.type": "by_schema_id"}
            entries = [
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()
            ]
            resources.append(ConfigResource("topic", topic, incremental_configs=entries))
        for future in admin(self.writer.bootstrap).incremental_alter_configs(resources).values():
            future.result(timeout=30)

    def produce(self, bootstrap: str, tag: str, n: int) -> None:
        """``n`` Avro records to each topic over both partitions, acks=all, idempotent."""
        registry = SchemaRegistryClient({"url": self.writer.registry_url})
        serialize = AvroSerializer(registry, json.dumps(CLICK))
        producer = ck.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        for topic in self.names:
            ctx = SerializationContext(topic, MessageField.VALUE)
            for i in range(n):
                user = f"{tag}{i}"

                def done(err: Any, msg: Any, topic: str = topic, user: str = user) -> None:
                    assert err is None, err
                    self.acked[topic].append(user)

                value = serialize({"user": user, "n": i}, ctx)
                producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=done)
                producer.poll(0)
        assert producer.flush(60) == 0

    def transaction(self, bootstrap: str, tag: str, n: int, *, commit: bool) -> None:
        """``n`` Avro records to each topic over both partitions in one transaction,
        committed (acknowledged, so expected in the tables) or aborted."""
        registry = SchemaRegistryClient({"url": self.writer.registry_url})
        serialize = AvroSerializer(registry, json.dumps(CLICK))
        producer = ck.Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{tag}-{time.time_ns()}"}
        )
        producer.init_transactions(60)
        producer.begin_transaction()
        sent: dict[str, list[str]] = {t: [] for t in self.names}
        for topic in self.names:
            ctx = SerializationContext(topic, MessageField.VALUE)
            for i in range(n):
                value = serialize({"user": f"{tag}{i}", "n": i}, ctx)
                producer.produce(topic, value, partition=i % PARTITIONS)
                sent[topic].append(f"{tag}{i}")
        producer.flush(60)
        if commit:
            producer.commit_transaction(60)
            for topic, users in sent.items():
                self.acked[topic] += users
        else:
            producer.abort_transaction(60)

    def rows(self, topic: str) -> list[str]:
        table = table_identifier("default", topic)
        try:
            found = load_table(load_catalog(self.settings), *table).scan().to_arrow()
        except (NoSuchNamespaceError, NoSuchTableError):
            return []
        return [str(v["user"]) for v in found.column("_kafka_value").to_pylist()]

    def wait_tables(self, timeout_s: float) -> None:
        """Every table holds exactly its topic's acknowledged records, each once."""
        for topic in self.names:
            want = len(self.acked[topic])

            def full(t: str = topic, w: int = want) -> bool:
                return len(self.rows(t)) >= w

            wait_for(f"the table of {topic} holds its records", full, timeout_s)
            assert sorted(self.rows(topic)) == sorted(self.acked[topic]), topic


@pytest.fixture(params=["local", "standalone"])
def spark(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Where the brokers run their Spark jobs: each in its own local Spark, or all on one
    standalone cluster (a master and a worker with a core and 512 MiB of executor for
    each broker's application)."""
    confs = {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "512m"}
    if request.param == "local":
        yield confs
        return
    cluster = SparkCluster(tmp_path / "spark", cores=3, memory="1536m")
    try:
        cluster.start()
        yield {**confs, **cluster.app_confs(), "spark.cores.max": "1"}
    finally:
        cluster.stop()


def test_table_topics_are_coordinated_on_every_broker_and_move_when_one_dies(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    spark: dict[str, str],
) -> None:
    catalog = s3.catalog_settings(TABLE_BUCKET)
    brokers = start_three(broker_factory, s3, BUCKET, etcd, **catalog, **spark)
    writer, members = brokers[0], brokers[1:]
    topics = Topics(writer, catalog)
    seen: list[dict[str, int]] = []

    def settled() -> bool:  # the same leaders at five looks in a row, a second apart
        time.sleep(1)
        seen.append(topics.zeros())
        return len(seen) >= 5 and all(z == seen[-1] for z in seen[-5:])

    wait_for("the new topics' leaders settle", settled, timeout_s=120)
    topics.enable()
    every = ",".join(b.bootstrap for b in brokers)
    topics.produce(every, "a", 200)
    # over every broker's partitions: the rounds' tasks read them read_committed from
    # their leaders, so the aborted records never land and the committed ones do
    topics.transaction(every, "x", 20, commit=False)
    topics.transaction(every, "t", 20, commit=True)
    topics.wait_tables(300)

    wait_for(  # a move may be in flight: the view follows it within a renewal
        "floe cluster status names the leaders of partitions 0 as coordinators",
        lambda: places(writer) == topics.zeros() == places(members[0]),
    )
    placed = places(writer)
    assert len(set(placed.values())) >= 2, placed
    ran = {int(b.settings["node.id"]): committed_rows(b) for b in brokers}
    assert sum(1 for rows in ran.values() if rows) >= 2, ran  # rounds on two brokers or more
    victim = max(members, key=committed_rows)  # a member that ran rounds (Avro: its
    assert committed_rows(victim) > 0, ran  # registry copy gave them their schemas)

    crash(victim)
    dead = int(victim.settings["node.id"])
    live = [b for b in brokers if b is not victim]
    wait_for(
        "the dead member's coordinators moved",
        lambda: dead not in places(writer).values() and None not in places(writer).values(),
        timeout_s=120,
    )
    topics.produce(",".join(b.bootstrap for b in live), "b", 200)
    topics.wait_tables(300)
    for b in live:
        assert "records_lost" not in b.stderr_text()
    print(f"coordinators before the kill: {placed}; after: {places(writer)}; rows by broker {ran}")
