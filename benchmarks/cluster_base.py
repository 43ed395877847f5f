"""What every part of the ``cluster`` suite shares: its settings, the clusters' names,
one ``floe up`` of a cluster (:class:`Member`) and a cluster of them (:class:`Cluster`).

A cluster here is what ``floe dev cluster`` starts: brokers sharing one bucket prefix
(``storage.type=s3`` on SeaweedFS) and one metadata store: etcd (the default, a
cluster's store in production; each cluster its own namespace of one etcd) or SQLite
(one file per cluster, as ``floe dev cluster``; ``--cluster-metadata``). One broker holds
the ``storage-writer`` lease and serves every partition (unless the brokers share them);
the others are standbys that answer only Metadata until they take over, and whose admin
API says so until then (docs/architecture.md, "A broker in the cluster"). The brokers
are started here rather than through ``floe.cli.dev``: nothing imports ``floe.cli``, and
the suite needs per-member control (kill one process group, restart it, time each step)
that the command does not expose.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import broker, procfs
from benchmarks.harness import free_port
from benchmarks.targets import Target
from floe.config.broker import CLUSTER_SESSION_TIMEOUT_MS
from floe.testing.seaweed import SeaweedServer

ONE = "1-broker"
THREE = "3-brokers"
SHARED = "3-shared"
"""Three brokers with ``cluster.share.partitions``: each leads its share."""
BUCKET = "floe-bench-cluster"
PARTITIONS = 3
STANDBY_EVENT = b"cluster.standby"
SESSION_TIMEOUT_MS = int(CLUSTER_SESSION_TIMEOUT_MS.default)
"""The product's default ``cluster.session.timeout.ms``: the failover series' default."""
METADATA_STORES = ("etcd", "sqlite")
"""The stores ``--cluster-metadata`` takes: etcd (the default) or one SQLite file per
cluster (a single node's store, which three brokers share behind its write lock)."""
KILLS = 15
"""Writer kills, and as many member kills, in a full run (issue 29 asks for 15)."""
RATE = 500
"""Records/s of each Python producer of the failover load."""
STEADY_S = 5.0
"""Seconds of load before each kill in a full run."""
UP_TIMEOUT_S = 60.0
POLL_S = 0.02
_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Settings:
    """What to run; stored in the JSON as a dict."""

    records: int
    reps: int
    kills: int
    session_timeout_ms: int
    rate: int
    """Records/s of each Python producer of the failover load."""
    steady_s: float
    new_brokers: int
    seed: int
    value_bytes: int = 1024
    partitions: int = PARTITIONS
    quick: bool = False
    metadata: str = "etcd"
    """The clusters' metadata store: ``etcd`` or ``sqlite`` (:data:`METADATA_STORES`)."""

    def runner_settings(self) -> broker.Settings:
        """The broker suite's settings for the throughput case."""
        return broker.Settings.throughput(
            self.records, self.reps, self.seed, (ONE, THREE, SHARED), self.quick
        )


class Member(Target):
    """One ``floe up`` of a cluster: a node id, fixed ports (kept across restarts) and one
    log file that every start appends to. Owned by the suite's thread.

    Each start leads its own process group, so ``crash`` reaches everything the broker
    started (as a dying machine would) and ``stop`` leaves nothing behind.
    """

    def __init__(self, name: str, node_id: int, workdir: Path, sets: dict[str, str]) -> None:
        super().__init__(workdir)
        self.name = name
        self.node_id = node_id
        self.sets = {
            **sets,
            "node.id": str(node_id),
            "admin.port": str(free_port()),
            "registry.port": str(free_port()),
        }
        self.log_path = workdir / "broker.log"
        self.stdout_path = self.stderr_path = self.log_path
        self._log_from = 0

    def command(self) -> list[str]:
        exe = Path(sys.executable).with_name("floe")
        cmd = [str(exe) if exe.exists() else "floe", "up", "--data-dir", str(self.workdir / "data")]
        cmd += ["--host", "127.0.0.1", "--kafka-port", str(self.port)]
        for key, value in self.sets.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def launch(self) -> None:
        """Start the process and return at once (it may become the writer or a standby)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command(), cwd=self.workdir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, process_group=0,
            )  # fmt: skip

    def since_start(self) -> bytes:
        """What this start of the broker logged so far."""
        with self.log_path.open("rb") as f:
            f.seek(self._log_from)
            return f.read()

    def standing_by(self) -> bool:
        """Whether this start logged ``cluster.standby``: it waits, ready to take over."""
        return STANDBY_EVENT in self.since_start()

    def serving(self) -> bool:
        """Whether it runs and its admin API answers as the writer's (a standby answers
        Metadata on its Kafka port, and its admin API with its own role)."""
        if not self.alive():
            return False
        url = f"http://127.0.0.1:{self.sets['admin.port']}/api/v1/cluster"
        try:
            with urllib.request.urlopen(url, timeout=0.5) as answer:
                membership = json.load(answer).get("membership") or {}
        except (OSError, ValueError):
            return False
        return bool(membership.get("role") == "writer")

    def tail(self, lines: int = 20) -> str:
        text = self.since_start().decode(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        """Launch and wait until it serves or stands by.

        Raises:
            RuntimeError: it exited or neither served nor stood by in time.
        """
        self.launch()
        self.wait("serve or stand by", lambda: self.serving() or self.standing_by())

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float = UP_TIMEOUT_S) -> float:
        """Poll ``check()`` until true; return the seconds it took.

        Raises:
            RuntimeError: the process exited, or ``check`` stayed false past the timeout.
        """
        t0 = time.monotonic()
        while not check():
            if not self.alive():
                raise RuntimeError(f"{self.name} exited before it would {what}: {self.tail()}")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"{self.name} did not {what} in {timeout_s:g} s: {self.tail()}")
            time.sleep(POLL_S)
        return time.monotonic() - t0

    def crash(self) -> None:
        """SIGKILL to its whole process group, then reap it: the machine died."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def stop(self) -> int | None:
        """SIGTERM (a writer hands its lease over at once), then SIGKILL to the group."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_STOP_TIMEOUT_S)
        code = self._proc.poll()
        self.crash()
        return code


class Cluster(Target):
    """Brokers on one prefix and one metadata store, seen as one target by the broker
    suite's runner: clients get every address; CPU and memory are the members' sums.
    Owned by the suite's thread; ``stop`` stops every member it ever started."""

    def __init__(self, name: str, workdir: Path, size: int, sets: dict[str, str]) -> None:
        super().__init__(workdir)
        self.name = name
        self.sets = sets
        self.members = [self.member(n) for n in range(1, size + 1)]
        self.extra: list[Member] = []

    def member(self, node_id: int) -> Member:
        """A new member object (not started) with this cluster's settings."""
        return Member(f"{self.name}/{node_id}", node_id, self.workdir / f"broker-{node_id}",
                      self.sets)  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return ",".join(m.bootstrap for m in self.members)

    @property
    def pid(self) -> int:
        return self.writer().pid

    def alive(self) -> bool:
        return any(m.alive() for m in self.members)

    def tail(self, lines: int = 20) -> str:
        return "\n".join(f"[{m.name}] {m.tail(lines // len(self.members) + 1)}"
                         for m in self.members)  # fmt: skip

    def sample(self) -> procfs.ProcSample:
        """CPU and RSS summed over the live members (standbys renew leases too)."""
        samples = [m.sample() for m in self.members if m.alive()]
        return procfs.ProcSample(
            cpu_seconds=sum(s.cpu_seconds for s in samples),
            rss_bytes=sum(s.rss_bytes for s in samples),
            peak_rss_bytes=sum(s.peak_rss_bytes for s in samples),
        )

    def writer(self, exclude: Member | None = None, timeout_s: float = UP_TIMEOUT_S) -> Member:
        """The member that serves as the writer (polled every 20 ms).

        Raises:
            RuntimeError: none served within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.members:
                if m is not exclude and m.serving():
                    return m
            if not any(m.alive() for m in self.members if m is not exclude):
                raise RuntimeError(f"{self.name}: every broker exited: {self.tail()}")
            time.sleep(POLL_S)
        raise RuntimeError(f"{self.name}: no broker served within {timeout_s:g} s: {self.tail()}")

    def start(self) -> None:
        """Start every member; wait for a writer and for every other one to stand by.

        Raises:
            RuntimeError: a member exited or did not come up in time.
        """
        for m in self.members:
            m.launch()
        writer = self.writer()
        for m in self.members:
            if m is not writer:
                m.wait("stand by", m.standing_by)
        # the writer places a new topic's partitions over the brokers it sees live
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
        ids = {m.node_id for m in self.members}
        writer.wait("list every broker", lambda: ids <= set(brokers_listed(admin)))

    def stop(self) -> int | None:
        codes = [m.stop() for m in [*self.extra, *self.members]]
        return next((c for c in codes if c), 0)


def prefix(name: str) -> str:
    """The bucket prefix (and metadata namespace) of cluster ``name``: an identifier."""
    return "bench_" + name.replace("-", "_")


def s3_sets(
    server: SeaweedServer,
    prefix: str,
    root: Path,
    s: Settings,
    *,
    share: bool,
    etcd: str | None,
) -> dict[str, str]:
    """What every member of the cluster on ``prefix`` shares (as ``floe dev cluster``):
    the metadata store at etcd endpoint ``etcd`` (its namespace ``prefix``), or with
    None a SQLite file of its own."""
    url = f"etcd://{etcd}" if etcd is not None else f"sqlite://{root / prefix / 'cluster.db'}"
    return {
        **server.log_settings(BUCKET, prefix),
        "cluster.metadata.url": url,
        "cluster.metadata.namespace": prefix,
        "cluster.session.timeout.ms": str(s.session_timeout_ms),
        "cluster.share.partitions": str(share).lower(),
    }


def brokers_listed(admin: Any) -> list[int]:
    """The broker ids the writer's Metadata names (none while it does not answer)."""
    from confluent_kafka import KafkaException

    try:
        return list(admin.list_topics(timeout=10).brokers)
    except KafkaException:
        return []


def led(admin: Any, topic: str) -> collections.Counter[int]:
    """How many partitions of ``topic`` each broker leads in the writer's Metadata."""
    from confluent_kafka import KafkaException

    try:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    except (KafkaException, KeyError):
        return collections.Counter()
    return collections.Counter(p.leader for p in parts)


def leaders(admin: Any, topic: str) -> dict[int, int]:
    """Each partition's leader in the writer's Metadata (none while it does not answer)."""
    from confluent_kafka import KafkaException

    try:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    except (KafkaException, KeyError):
        return {}
    return {p: m.leader for p, m in parts.items()}
