"""Table topics in the test process: real LocalStores, the real table-topic manager and
coordinators, real Spark (one session for a whole module: it costs ~5 s to start) and a
real Iceberg catalog (embedded SQLite).

Used where a test must reach inside a round (block it between its Spark job and its
commit, delete records while it runs) or run two writers against one catalog. Records
are appended to the store directly, as the broker's Produce handler does. Every
:class:`Node` is one broker's worth of table topics: a data dir, a cluster id, a
manager and a Kafka listener on 127.0.0.1 (a real :class:`~floe.server.kafka.KafkaServer`
on the node's store, serving the Fetch requests of the rounds' Spark tasks); all share
:class:`Lake` (the catalog, the warehouse and Spark).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from floe.broker.core import Broker
from floe.config import BrokerConfig, load_config
from floe.config import broker as keys
from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.server.kafka import KafkaServer
from floe.storage.local import LocalStore
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from floe.tabletopic.coordinator import TableCoordinator
from floe.tabletopic.manager import TableTopicManager
from floe.tabletopic.spark import SparkManager
from floe.types import PartitionId, TopicName
from helpers.broker import free_port

DEADLINE_S = 90.0


class SharedSpark(SparkManager):
    """The module's Spark: a manager stopping does not stop it (the lake does)."""

    async def stop(self) -> None:
        pass


class Lake:
    """The catalog, warehouse and Spark session every node of a test module shares."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.config = load_config(None, {"data.dir": str(base / "lake")}, environ={})
        self.settings = cat.CatalogSettings.from_config(self.config)
        cat.bootstrap(self.settings)
        self.spark = SharedSpark.from_config(self.config)

    def node(self, name: str, cluster_id: str = "cluster-a", **settings: str) -> Node:
        values = {
            "data.dir": str(self.base / name),
            "host": "127.0.0.1",
            "kafka.port": str(free_port()),
            "catalog.uri": self.settings.uri,
            "catalog.warehouse": self.settings.warehouse,
            **settings,
        }
        return Node(load_config(None, values, environ={}), self, cluster_id)

    def sql(self, statement: str) -> list[Any]:
        rows: list[Any] = self.spark.session().sql(statement).collect()
        return rows

    def close(self) -> None:
        SparkManager.stop_sync(self.spark)


class Node:
    """One broker's table topics: a store, a cluster id, a manager and a Kafka listener
    (started by :meth:`start`, or the listener alone by :meth:`listen`, on the running
    loop; both stopped by :meth:`stop`; :meth:`close` closes the store)."""

    def __init__(self, config: BrokerConfig, lake: Lake, cluster_id: str) -> None:
        self.config = config
        self.lake = lake
        self.store = LocalStore(Path(config.values["data.dir"]), config)
        self.manager = TableTopicManager(
            self.store, config, spark_factory=lambda: lake.spark, cluster_id=cluster_id
        )
        self.cluster_id = cluster_id
        self.server: KafkaServer | None = None

    def create(
        self, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        """A table topic in string mode with a 1 s commit interval, unless ``configs``
        say otherwise."""
        values = {
            "table.topic.enable": "true",
            "table.topic.convert.value.type": "string",
            "table.topic.commit.interval.ms": "1000",
            **(configs or {}),
        }
        self.store.create_topic(TopicName(topic), partitions, values)

    def alter(self, topic: str, configs: dict[str, str]) -> None:
        meta = self.store.topic(TopicName(topic))
        assert meta is not None
        self.store.set_topic_configs(TopicName(topic), {**meta.configs, **configs})

    def produce(self, topic: str, partition: int, values: list[bytes | None]) -> list[int]:
        """Append one batch; returns the offsets the records got."""
        plog = self.store.partition(TopicName(topic), PartitionId(partition))
        base = plog.log_end_offset
        now = int(time.time() * 1000)
        records = [Record(base + i, now, None, v) for i, v in enumerate(values)]
        buf = bytearray(encode_batch(records, base_offset=base))
        plog.append(buf, scan(buf), now)
        return list(range(base, base + len(values)))

    async def listen(self) -> None:
        """Serve Kafka on the node's ``host:kafka.port`` (the address its manager gives
        the Spark tasks), unless already serving."""
        if self.server is not None:
            return
        host, port = self.config.values["host"], int(self.config.values["kafka.port"])
        broker = Broker(self.store, self.config, self.cluster_id, host, port)
        self.server = KafkaServer(broker, host, port, self.config[keys.SOCKET_REQUEST_MAX_BYTES])
        await self.server.start()

    async def start(self) -> None:
        await self.listen()
        await self.manager.start()

    async def stop(self) -> None:
        await self.manager.stop()
        if self.server is not None:
            await self.server.stop(grace_s=1.0)
            self.server = None

    def close(self) -> None:
        self.store.close()

    def coordinator(self, topic: str) -> TableCoordinator:
        return self.manager.coordinators[TopicName(topic)]

    def table_name(self, topic: str) -> tuple[str, str]:
        return table_identifier(self.config.values["table.topic.namespace"], topic)

    def table(self, topic: str) -> Any:
        return cat.load_table(cat.load_catalog(self.lake.settings), *self.table_name(topic))

    def rows(self, topic: str) -> list[tuple[int, int, str | None]]:
        """(partition, offset, value) of every row, sorted; [] before the table exists."""
        try:
            arrow = self.table(topic).scan().to_arrow()
        except Exception:  # not created yet
            return []
        meta = arrow.column("_kafka_metadata").to_pylist()
        values = arrow.column("_kafka_value").to_pylist()
        return sorted((m["partition"], m["offset"], v) for m, v in zip(meta, values, strict=True))

    async def wait_rows(self, topic: str, n: int, deadline_s: float = DEADLINE_S) -> list[Any]:
        """Poll the table until it holds at least ``n`` rows (or the deadline)."""
        deadline = time.monotonic() + deadline_s
        while True:
            rows = await asyncio.to_thread(self.rows, topic)
            if len(rows) >= n or time.monotonic() > deadline:
                return rows
            await asyncio.sleep(0.3)

    async def wait_for(self, check: Any, deadline_s: float = DEADLINE_S) -> None:
        """Poll ``check()`` (on the loop) until it is true; fail at the deadline."""
        deadline = time.monotonic() + deadline_s
        while not check():
            assert time.monotonic() < deadline, "condition not reached in time"
            await asyncio.sleep(0.2)


def unique(rows: list[tuple[int, int, Any]]) -> bool:
    """No (partition, offset) twice."""
    keys = [(p, o) for p, o, _ in rows]
    return len(keys) == len(set(keys))


@contextmanager
def lake_at(base: Path) -> Iterator[Lake]:
    lake = Lake(base)
    try:
        yield lake
    finally:
        lake.close()
