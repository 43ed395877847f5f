"""A table topic's exactly-once across kills of the broker running its rounds: what the
cluster crash tests share (tests/crash/test_cluster_table_topic.py: a writer and a
standby; tests/crash/test_cluster_table_coordinator.py: brokers sharing partitions).

Each kill is aimed at one phase of a round, in an order shuffled by a logged seed
(``FLOE_TABLE_FAILOVER_SEED`` replays one):

* ``writing``: a round's Spark job has written its first Parquet object to the table's
  ``data/`` (before the Iceberg commit);
* ``committing``: a new ``v<N>.metadata.json`` object appeared (the REST catalog took
  the commit; the coordinator has not read it back yet);
* ``committed``: the broker logged ``tabletopic.committed``;
* ``random``: a random delay after the takeover (Spark start-up, planning, idle waits).

The object-store events count the k-th new one after arming (k in 1..2), so both a new
coordinator's cold first round and its warm rounds are hit.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from helpers.broker import Broker, floe_bin
from helpers.cluster import cluster_settings, crash
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer
from helpers.table_eos import committed_lines

TABLE_BUCKET = "table-failover"
TOPIC = "eos_cluster"
PARTITIONS = 3
PHASES = ("writing", "committing", "committed", "random")
PER_SECOND = 300
"""The producer's pace: a new coordinator's first round takes the backlog its
predecessor's death left, so a faster stream only makes rounds longer on a slow machine."""
TAKEOVER_DEADLINE_S = 120.0
POLL_S = 0.002
"""Between polls for a phase's event. A new metadata version precedes the broker's
``tabletopic.committed`` line by only ~20 ms (a listing takes ~2-3 ms), so the
``committing`` kill needs a tight poll to land in between."""

_WRITE_JOB = re.compile(r"^\d+-\d+-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-")
"""A Spark data file name: ``<task partition>-<task id>-<write id>-<file>.parquet``."""


class TableObjects:
    """The table's objects in the table bucket, listed through the S3 API: the REST
    catalog keeps a table at ``s3://<table bucket>/<namespace>/<table>/``."""

    def __init__(self, s3: SeaweedServer, table: tuple[str, str]) -> None:
        self.client = s3.s3_client()
        self.prefix = "/".join(table) + "/"

    def _keys(self, under: str) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=TABLE_BUCKET, Prefix=self.prefix + under
        )
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def write_ids(self) -> set[str]:
        """The Spark writes seen so far (distinct write ids in the data files' names)."""
        names = (Path(k).name for k in self._keys("data/") if k.endswith(".parquet"))
        return {m[1] for n in names if (m := _WRITE_JOB.match(n))}

    def commits(self) -> set[str]:
        """The metadata versions after the table's creation (``v1``): one per commit."""
        return {k for k in self._keys("metadata/v") if k.endswith(".metadata.json")} - {
            f"{self.prefix}metadata/v1.metadata.json"
        }


def arm(
    phase: str, writer: Broker, objects: TableObjects, rng: random.Random
) -> Callable[[], bool]:
    """A predicate that turns true at the moment to kill ``writer`` for ``phase``: the
    k-th new event (k in 1..2), or a random delay."""
    if phase == "random":
        at = time.monotonic() + rng.uniform(0.2, 12.0)
        return lambda: time.monotonic() >= at
    k = rng.randint(1, 2)
    if phase == "committed":
        seen = committed_lines(writer)
        return lambda: committed_lines(writer) >= seen + k
    events = objects.write_ids if phase == "writing" else objects.commits
    before = events()
    return lambda: len(events() - before) >= k


@dataclass(frozen=True)
class Kill:
    """One kill: the phase it aimed at, the killed writer's commits since it was armed
    (``landed`` in the catalog, ``logged`` as committed: a commit that landed but was
    not logged is one the new writer must find in the table), and how long the cluster
    took to recover."""

    phase: str
    after_s: float  # since arming (a takeover, or the topic's creation)
    landed: int
    logged: int
    serving_s: float  # kill -> the standby serves as the new writer


class Brokers:
    """Starts cluster member ``node`` under one new prefix of ``bucket`` (not waiting for
    it; ``share``: in a cluster whose brokers share partitions); :meth:`kill_all` (the
    fixtures call it at teardown) kills every one still running with its process
    group, so no Spark outlives the test."""

    def __init__(
        self, factory: Callable[..., Broker], s3: SeaweedServer, bucket: str, etcd: EtcdServer
    ) -> None:
        self._factory = factory
        self._s3 = s3
        self._bucket = bucket
        self._etcd = etcd
        self._prefix = f"t-{uuid.uuid4().hex[:8]}"
        self.started: list[Broker] = []

    def start(self, node: int, share: bool = False) -> Broker:
        settings = cluster_settings(
            self._s3,
            self._bucket,
            self._prefix,
            f"etcd://{self._etcd.endpoint}",
            **{
                "node.id": str(node),
                "spark.sql.shuffle.partitions": "2",
                "cluster.share.partitions": "true" if share else "false",
                **self._s3.catalog_settings(TABLE_BUCKET),
            },
        )
        self.started.append(self._factory(settings, wait=False))
        return self.started[-1]

    def kill_all(self) -> None:
        for b in self.started:
            if b.running:
                crash(b)


def places(b: Broker) -> dict[str, int | None]:
    """Each table topic's coordinator, as ``floe cluster status`` shows ``b``'s view."""
    done = subprocess.run(
        [floe_bin(), "cluster", "status", "-o", "json", "--admin", b.admin_url],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return {p["topic"]: p["coordinator"] for p in json.loads(done.stdout)["table_coordinators"]}


def move_zero(controller: Broker, node: int) -> None:
    """Move partition 0 of the topic to broker ``node`` with Kafka's reassignment API."""
    client = KafkaAdminClient(bootstrap_servers=controller.bootstrap)
    try:
        answer = client.alter_partition_reassignments({KafkaTopicPartition(TOPIC, 0): [node]})
    finally:
        client.close()
    assert all(error is None for error in answer.values()), answer


def seeded(kills: int) -> tuple[int, list[str]]:
    """The run's seed (``FLOE_TABLE_FAILOVER_SEED`` replays one) and its ``kills`` phases,
    each phase as often, shuffled."""
    seed = int(os.environ.get("FLOE_TABLE_FAILOVER_SEED") or random.randrange(2**32))
    print(f"seed {seed} (FLOE_TABLE_FAILOVER_SEED replays it)")
    phases = list(PHASES) * max(1, kills // len(PHASES))
    random.Random(seed).shuffle(phases)
    return seed, phases[:kills]
