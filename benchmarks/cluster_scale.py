"""The ``cluster`` suite's scale measures: 1 vs 3 brokers, and how soon a new broker joins.

- Throughput (:func:`throughput`): the broker suite's method (``benchmarks.broker.Runner``),
  one case of 1 KiB records, acks=all, 3 partitions, produced then consumed back,
  repetitions alternating between the clusters; clients get the full bootstrap list.
  After every produce repetition the suite waits until the writer has turned every WAL
  object into partition objects, so the next repetition does not share the machine with
  that upload.
- Joins (:func:`joins`), on the cluster with standbys under the failover load: a broker
  with a new node id is started, timed until it logs ``cluster.standby`` (ready to take
  over) and until the writer's Metadata lists it, then stopped cleanly.
- Share joins (:func:`share_joins`), on the cluster whose brokers share partitions: a new
  broker timed until it leads its share, then stopped, and timed until the others lead
  its partitions again.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from benchmarks import broker, loadgen
from benchmarks.cluster_base import (
    BUCKET,
    PARTITIONS,
    SHARED,
    THREE,
    Cluster,
    Member,
    Settings,
    brokers_listed,
    led,
)
from benchmarks.harness import Progress, SuiteResult, Workload, worker_pool
from floe.testing.seaweed import SeaweedServer

CASE = broker.ProduceCase(1024, "none", "all", PARTITIONS, consume=True)
SHARE_KEY = "share-join"
SHARE_TOPIC = "bench-share"
SHARE_PARTITIONS = 8
"""Partitions of the share-join topic: 3, 3, 2 over three brokers, 2 each over four."""
JOIN_KEY = "join"
_SETTLE_TIMEOUT_S = 120.0


def throughput(
    clusters: dict[str, Cluster], server: SeaweedServer, s: Settings, prog: Progress,
    result: SuiteResult,
) -> None:  # fmt: skip
    """The throughput case on every cluster (see the module docstring)."""
    with worker_pool() as pool:
        runner = _ClusterRunner(clusters, server, pool=pool, prog=prog, result=result,
                                s=s.runner_settings())  # fmt: skip
        runner.produce_case(CASE)


class _ClusterRunner(broker.Runner):
    """The broker suite's runner, waiting after every produce repetition until the
    writer's uploader left no WAL object in the bucket. Owned by the suite's thread."""

    def __init__(self, clusters: dict[str, Cluster], server: SeaweedServer, **kw: Any) -> None:
        super().__init__(dict(clusters), **kw)
        self.clusters = clusters
        self._bucket = server.s3_client()

    def repeat(
        self,
        workloads: dict[str, Workload],
        blocked: dict[str, str],
        run_once: Callable[[str, int], dict[str, float]],
    ) -> None:
        def settled(name: str, rep: int) -> dict[str, float]:
            metrics: dict[str, float] = run_once(name, rep)
            if workloads[name].group == "produce":
                self._settle(self.clusters[name].sets["storage.s3.prefix"])
            return metrics

        super().repeat(workloads, blocked, settled)

    def create(self, topic: str, partitions: int) -> dict[str, str]:
        """Create ``topic`` through each cluster's writer, up to three tries: right after
        start-up a cluster's CreateTopics failed once in the smoke test (librdkafka's
        admin client given the standbys' refusing addresses too)."""
        blocked = {}
        for name, c in self.clusters.items():
            spec = [loadgen.TopicSpec(topic, partitions)]
            for _ in range(3):
                err = self.admin(name, loadgen.create_topics, c.writer().bootstrap, spec)
                if err is None:
                    break
                time.sleep(1.0)
            if err is not None:
                blocked[name] = f"create topic failed: {err}"
                self.prog.log(f"{name}: {blocked[name]}")
        return blocked

    def _settle(self, prefix: str) -> None:
        deadline = time.monotonic() + _SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            listed = self._bucket.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/wal/", MaxKeys=1)
            if int(listed["KeyCount"]) == 0:
                return
            time.sleep(0.5)
        self.note(f"`{prefix}`: WAL objects still in the bucket after {_SETTLE_TIMEOUT_S:g} s.")


def joins(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> None:
    """Start brokers with new node ids one at a time on ``cluster``, time their joining."""
    from confluent_kafka.admin import AdminClient

    w = Workload(
        key=JOIN_KEY, group="join", target=THREE,
        title="A new broker starts, registers and stands by (under the failover load)",
        params={"brokers": s.new_brokers},
    )  # fmt: skip
    result.workloads.append(w)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 2})
    for i in range(s.new_brokers):
        prog.step(f"join: new broker {i + 1}/{s.new_brokers}")
        m = cluster.member(len(cluster.members) + len(cluster.extra) + 1)
        cluster.extra.append(m)
        m.launch()  # timed from here: the interpreter's start-up counts
        try:
            standby_s = m.wait("stand by", m.standing_by)
            listed_s = standby_s + m.wait(
                "be listed in Metadata", functools.partial(_listed, admin, m)
            )
        except RuntimeError as exc:
            w.failures.append(str(exc))
            prog.log(f"join {i + 1} FAILED: {exc}")
            continue
        finally:
            m.stop()
        w.reps.append({"standby_s": standby_s, "metadata_s": listed_s})
        prog.log(f"new broker {m.node_id}: a standby after {standby_s:.2f} s, in Metadata "
                 f"after {listed_s:.2f} s")  # fmt: skip


def _listed(admin: Any, m: Member) -> bool:
    """Whether the writer's Metadata names ``m`` (False while it does not answer)."""
    return m.node_id in brokers_listed(admin)


def _leads_share(admin: Any, node_id: int) -> bool:
    """Whether ``node_id`` leads its share (two) of the share-join topic's partitions."""
    return led(admin, SHARE_TOPIC)[node_id] >= 2


def _let_go(admin: Any, node_id: int) -> bool:
    """Whether every partition of the share-join topic is led, none by ``node_id``."""
    leading = led(admin, SHARE_TOPIC)
    return node_id not in leading and -1 not in leading


def share_joins(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> None:
    """Brokers sharing partitions: a topic of :data:`SHARE_PARTITIONS` spread over the
    three; per new broker, the seconds from its start until it leads its share (two
    partitions, handed over by their owners), then, once stopped (SIGTERM), until the
    three lead all of it again."""
    from confluent_kafka.admin import AdminClient

    w = Workload(
        key=SHARE_KEY, group="join", target=SHARED,
        title=f"A new broker starts and leads its share of a {SHARE_PARTITIONS}-partition topic",
        params={"brokers": s.new_brokers, "partitions": SHARE_PARTITIONS},
    )  # fmt: skip
    result.workloads.append(w)
    writer = cluster.writer()
    admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
    loadgen.create_topics(writer.bootstrap, [loadgen.TopicSpec(SHARE_TOPIC, SHARE_PARTITIONS)], 30)
    three = {m.node_id for m in cluster.members}
    balanced = [3, 3, 2]
    for i in range(s.new_brokers):
        prog.step(f"share join: new broker {i + 1}/{s.new_brokers}")
        try:
            writer.wait(
                "spread the topic over the three",
                lambda: (
                    sorted(led(admin, SHARE_TOPIC).values(), reverse=True) == balanced
                    and set(led(admin, SHARE_TOPIC)) == three
                ),
            )
        except RuntimeError as exc:
            w.failures.append(str(exc))
            return
        m = cluster.member(len(cluster.members) + len(cluster.extra) + 1)
        cluster.extra.append(m)
        m.launch()  # timed from here: the interpreter's start-up counts
        try:
            share_s = m.wait("lead its share", functools.partial(_leads_share, admin, m.node_id))
        except RuntimeError as exc:
            w.failures.append(str(exc))
            prog.log(f"share join {i + 1} FAILED: {exc}")
            m.stop()
            continue
        m.stop()
        t0 = time.monotonic()
        try:
            writer.wait(
                "lead the leaver's partitions again",
                functools.partial(_let_go, admin, m.node_id),
            )
        except RuntimeError as exc:
            w.failures.append(str(exc))
            continue
        back_s = time.monotonic() - t0
        w.reps.append({"share_s": share_s, "back_s": back_s})
        prog.log(f"new broker {m.node_id}: led its share after {share_s:.2f} s; its "
                 f"partitions led again {back_s:.2f} s after its stop")  # fmt: skip
