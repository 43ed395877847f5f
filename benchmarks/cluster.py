"""The ``cluster`` suite: failover time, 1 vs 3 brokers, and how soon a new broker joins.

A cluster here is what ``floe dev cluster`` starts: brokers sharing one bucket prefix
(``storage.type=s3`` on SeaweedFS) and one SQLite metadata store file. One broker holds
the ``storage-writer`` lease and serves every partition; the others are standbys that
answer only Metadata until they take over, and whose admin API says so until then
(docs/architecture.md, "A broker in the cluster"). The brokers are started here rather
than through ``floe.cli.dev``: nothing imports ``floe.cli``, and the suite needs
per-member control (kill one process group, restart it, time each step) that the
command does not expose.

Layout of one run:

1. start SeaweedFS (``floe.testing.seaweed``), then two clusters side by side, each on
   its own prefix and metadata file: ``1-broker`` (one ``floe up`` with
   ``cluster.metadata.url``, alone) and ``3-brokers`` (three, node ids 1..3);
2. throughput: the broker suite's method (``benchmarks.broker.Runner``), one case of
   1 KiB records, acks=all, 3 partitions, produced then consumed back, repetitions
   alternating between the clusters; clients get the full bootstrap list. After every
   produce repetition the suite waits until the writer has turned every WAL object into
   partition objects, so the next repetition does not share the machine with that upload;
3. stop ``1-broker``; on ``3-shared`` (brokers sharing partitions): joins (a new
   broker timed until it leads its share, then stopped) and member kills (kill -9 of a
   member leading partitions under the failover load: the seconds until the writer
   leads them and until a record sent to them after the kill is acknowledged; the
   topic read back at the end); stop ``3-shared``; failover on ``3-brokers``: an
   idempotent acks=all producer (its own thread, all brokers' addresses) sends
   ``rate`` records/s of 1 KiB throughout. Per kill: ``steady_s`` of load, SIGKILL to
   the writer's process group, then the seconds until a standby serves (its admin API
   answers as the writer's) and until the first record sent after the kill is
   acknowledged; the killed broker is started again once a standby serves and the next
   kill waits until it is a standby again;
4. joins, under the same load: a broker with a new node id is started, timed until it
   logs ``cluster.standby`` (ready to take over) and until the writer's Metadata lists
   it, then stopped cleanly; ``new_brokers`` times;
5. stop the producer (flush), read the topic back from the writer and check that every
   acknowledged record is in it (lost, duplicated); always stop every broker, then
   SeaweedFS.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import broker, cluster_report, loadgen, procfs
from benchmarks.harness import (
    Progress,
    SuiteResult,
    Workload,
    floe_version_label,
    free_port,
    loadavg,
    machine_info,
    worker_pool,
)
from benchmarks.targets import Target
from floe.testing.seaweed import SeaweedServer, seaweed_server

NAME = "cluster"
TITLE = "Cluster: failover and 1 vs 3 brokers"
render = cluster_report.render
"""The suite's Markdown section (``benchmarks.harness`` lists what a suite provides)."""
charts = cluster_report.charts
"""The suite's PNG charts (none: the numbers fit in two tables)."""

ONE = "1-broker"
THREE = "3-brokers"
SHARED = "3-shared"
"""Three brokers with ``cluster.share.partitions``: each leads its share."""
SHARE_KEY = "share-join"
SHARE_TOPIC = "bench-share"
SHARE_PARTITIONS = 8
"""Partitions of the share-join topic: 3, 3, 2 over three brokers, 2 each over four."""
MEMBER_KILL_KEY = "member-kill"
MEMBER_TOPIC = "bench-member-kill"
MEMBER_PARTITIONS = 6
"""Partitions of the member-kill topic: two per broker of the sharing cluster."""
BUCKET = "floe-bench-cluster"
PARTITIONS = 3
CASE = broker.ProduceCase(1024, "none", "all", PARTITIONS, consume=True)
FAILOVER_KEY = "failover"
JOIN_KEY = "join"
FAILOVER_TOPIC = "bench-failover"
STANDBY_EVENT = b"cluster.standby"
FAILOVER_PRODUCER_CONFIG: dict[str, str | int] = {
    "acks": "all",
    "enable.idempotence": "true",
    "linger.ms": 5,
}
"""The failover producer: librdkafka defaults otherwise (retries, backoffs, 300 s
delivery timeout), as an application that did not tune for failover would run it."""

_UP_TIMEOUT_S = 60.0
_TAKEOVER_TIMEOUT_S = 60.0
_ACK_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 30.0
_POLL_S = 0.02
_SETTLE_TIMEOUT_S = 120.0
_READ_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Settings:
    """What to run; stored in the JSON as a dict."""

    records: int
    reps: int
    kills: int
    session_timeout_ms: int
    rate: int
    steady_s: float
    new_brokers: int
    seed: int
    value_bytes: int = 1024
    partitions: int = PARTITIONS
    quick: bool = False

    def runner_settings(self) -> broker.Settings:
        """The broker suite's settings for the throughput case."""
        return broker.Settings.throughput(
            self.records, self.reps, self.seed, (ONE, THREE, SHARED), self.quick
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options (the common ones live in ``benchmarks.__main__``)."""
    g = parser.add_argument_group("cluster suite")
    g.add_argument("--cluster-records", type=int, help="1 KiB records per produce rep")
    g.add_argument("--cluster-kills", type=int, help="writer kills (default 10, quick 3)")
    g.add_argument(
        "--cluster-session-timeout-ms",
        type=int,
        default=3000,
        help="cluster.session.timeout.ms of every broker (default 3000)",
    )
    g.add_argument(
        "--cluster-rate", type=int, default=2000, help="records/s during failover (2000)"
    )
    g.add_argument(
        "--cluster-steady-seconds", type=float, help="load before each kill (default 5, quick 2)"
    )
    g.add_argument(
        "--cluster-new-brokers", type=int, help="new brokers timed joining (default 3, quick 1)"
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size, count or time is not positive, or the session timeout is
            outside ``cluster.session.timeout.ms``'s bounds.
    """
    quick = bool(args.quick)
    s = Settings(
        records=args.cluster_records or (20_000 if quick else 200_000),
        reps=args.reps or (1 if quick else 3),
        kills=args.cluster_kills or (3 if quick else 10),
        session_timeout_ms=args.cluster_session_timeout_ms,
        rate=args.cluster_rate,
        steady_s=args.cluster_steady_seconds or (2.0 if quick else 5.0),
        new_brokers=args.cluster_new_brokers or (1 if quick else 3),
        seed=args.seed,
        quick=quick,
    )
    if min(s.records, s.reps, s.kills, s.rate, s.new_brokers) < 1 or s.steady_s <= 0:
        raise ValueError("records, reps, kills, rate, new brokers, steady seconds must be >0")
    if not 2000 <= s.session_timeout_ms <= 300_000:
        raise ValueError("--cluster-session-timeout-ms must be 2000..300000")
    return s


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

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float = _UP_TIMEOUT_S) -> float:
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
            time.sleep(_POLL_S)
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

    def writer(self, exclude: Member | None = None, timeout_s: float = _UP_TIMEOUT_S) -> Member:
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
            time.sleep(_POLL_S)
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
        writer.wait("list every broker", lambda: ids <= set(_brokers_listed(admin)))

    def stop(self) -> int | None:
        codes = [m.stop() for m in [*self.extra, *self.members]]
        return next((c for c in codes if c), 0)


class SteadyProducer(threading.Thread):
    """An idempotent acks=all producer sending ``rate`` records/s until ``finish``.

    Record ``i``'s value starts with ``i`` (12 digits); the thread keeps each record's
    send time and acknowledgement time (monotonic). It owns the producer; the suite's
    thread reads the lists under ``lock`` (appends only).
    """

    def __init__(self, bootstrap: str, topic: str, s: Settings) -> None:
        # log_level 2: librdkafka's "connection refused" lines for every standby and the
        # dead writer would flood the progress output; delivery errors are counted.
        super().__init__(name="steady-producer", daemon=True)
        self.bootstrap, self.topic, self.s = bootstrap, topic, s
        self.lock = threading.Lock()
        self.sent: list[float] = []
        self.acked: dict[int, float] = {}
        self.partition: dict[int, int] = {}
        """Each acknowledged record's partition."""
        self.errors = 0
        self.error: str | None = None
        self._stop_event = threading.Event()
        pad = loadgen.payloads(s.seed, 64, s.value_bytes)
        self._pad = [p[12:] for p in pad]

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4",
                 "log_level": 2, **FAILOVER_PRODUCER_CONFIG}
            )  # fmt: skip
            t0 = time.monotonic()
            while not self._stop_event.is_set():
                due = int((time.monotonic() - t0) * self.s.rate)
                while len(self.sent) < due:
                    i = len(self.sent)
                    value = b"%012d" % i + self._pad[i % len(self._pad)]
                    try:
                        producer.produce(self.topic, value, on_delivery=self._delivered)
                    except BufferError:
                        break
                    with self.lock:
                        self.sent.append(time.monotonic())
                producer.poll(0.005)
            producer.flush(_ACK_TIMEOUT_S)
        except Exception as exc:  # reported by the suite, which then fails the run
            self.error = f"{type(exc).__name__}: {exc}"

    def _delivered(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                i = int((msg.value() or b"0")[:12])
                self.acked[i] = now
                self.partition[i] = msg.partition()
            else:
                self.errors += 1

    def finish(self) -> None:
        """Stop sending, wait for every outstanding acknowledgement (flush)."""
        self._stop_event.set()
        self.join(_ACK_TIMEOUT_S + 30)

    def first_ack_after(
        self, t: float, sent_after: bool, partitions: Collection[int] | None = None
    ) -> float | None:
        """The earliest acknowledgement after ``t`` (of a record sent after ``t`` if
        ``sent_after``; to one of ``partitions`` if given), or None yet."""
        with self.lock:
            first = next((i for i, at in enumerate(self.sent) if at >= t), len(self.sent))
            acks = [
                at
                for i, at in self.acked.items()
                if at >= t
                and (not sent_after or i >= first)
                and (partitions is None or self.partition[i] in partitions)
            ]
        return min(acks) if acks else None


def _prefix(name: str) -> str:
    """The bucket prefix (and metadata namespace) of cluster ``name``: an identifier."""
    return "bench_" + name.replace("-", "_")


def _s3_sets(
    server: SeaweedServer, prefix: str, root: Path, s: Settings, share: bool
) -> dict[str, str]:
    """What every member of the cluster on ``prefix`` shares (as ``floe dev cluster``)."""
    return {
        **server.log_settings(BUCKET, prefix),
        "cluster.metadata.url": f"sqlite://{root / prefix / 'cluster.db'}",
        "cluster.metadata.namespace": prefix,
        "cluster.session.timeout.ms": str(s.session_timeout_ms),
        "cluster.share.partitions": str(share).lower(),
    }


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


def _failover(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> SteadyProducer:
    """Step 3 of the module docstring; returns the producer, still running."""
    loadgen.create_topics(
        cluster.writer().bootstrap, [loadgen.TopicSpec(FAILOVER_TOPIC, PARTITIONS)], 30
    )
    producer = SteadyProducer(cluster.bootstrap, FAILOVER_TOPIC, s)
    producer.start()
    w = Workload(
        key=FAILOVER_KEY, group="failover", target=THREE,
        title=f"Kill -9 of the writer under {s.rate:,} records/s (1 KiB, acks=all, idempotent)",
        params={"kills": s.kills, "rate": s.rate, "session_timeout_ms": s.session_timeout_ms,
                "steady_s": s.steady_s, "partitions": PARTITIONS},
    )  # fmt: skip
    result.workloads.append(w)
    for k in range(1, s.kills + 1):
        prog.step(f"failover: kill {k}/{s.kills}")
        time.sleep(s.steady_s)
        if producer.error is not None:
            raise RuntimeError(f"the failover producer failed: {producer.error}")
        writer = cluster.writer()
        killed = time.monotonic()
        writer.crash()
        try:
            new = cluster.writer(exclude=writer, timeout_s=_TAKEOVER_TIMEOUT_S)
            port_s = time.monotonic() - killed
            writer.launch()  # only now: started earlier it could take its lapsed lease back
            produce_s, rejoin_s = _after_kill(producer, writer, killed)
        except RuntimeError as exc:
            w.failures.append(str(exc))
            prog.log(f"kill {k} FAILED: {exc}")
            break
        rep = {
            "port_s": port_s,
            "produce_s": produce_s,
            "first_ack_s": (producer.first_ack_after(killed, sent_after=False) or killed) - killed,
            "rejoin_s": rejoin_s,
        }
        w.reps.append(rep)
        prog.log(
            f"kill {k}: broker {writer.node_id} -> {new.node_id}; port open after "
            f"{port_s:.2f} s, first new record acknowledged after {produce_s:.2f} s, killed "
            f"broker a standby again {rejoin_s:.2f} s after its restart"
        )
    return producer


def _after_kill(producer: SteadyProducer, restarted: Member, killed: float) -> tuple[float, float]:
    """Wait for both ends of a kill, polled together: the first acknowledgement of a
    record sent after ``killed`` (seconds from the kill) and the restarted broker standing
    by (seconds from its launch, which is now).

    Raises:
        RuntimeError: either did not happen within ``_ACK_TIMEOUT_S``, the restarted
            broker exited, or the producer failed.
    """
    launched = time.monotonic()
    acked: float | None = None
    standby: float | None = None
    while acked is None or standby is None:
        now = time.monotonic()
        if acked is None:
            at = producer.first_ack_after(killed, sent_after=True)
            acked = None if at is None else at - killed
        if standby is None and restarted.standing_by():
            standby = now - launched
        if producer.error is not None:
            raise RuntimeError(f"the failover producer failed: {producer.error}")
        if not restarted.alive():
            raise RuntimeError(f"{restarted.name} exited after its restart: {restarted.tail()}")
        if now - killed > _ACK_TIMEOUT_S:
            what = "no record acknowledged" if acked is None else "the restart not a standby"
            raise RuntimeError(f"{what} within {_ACK_TIMEOUT_S:g} s of the kill")
        time.sleep(_POLL_S)
    return acked, standby


def _joins(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> None:
    """Step 4: start brokers with new node ids one at a time, time their joining."""
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


def _brokers_listed(admin: Any) -> list[int]:
    """The broker ids the writer's Metadata names (none while it does not answer)."""
    from confluent_kafka import KafkaException

    try:
        return list(admin.list_topics(timeout=10).brokers)
    except KafkaException:
        return []


def _listed(admin: Any, m: Member) -> bool:
    """Whether the writer's Metadata names ``m`` (False while it does not answer)."""
    return m.node_id in _brokers_listed(admin)


def _led(admin: Any, topic: str) -> collections.Counter[int]:
    """How many partitions of ``topic`` each broker leads in the writer's Metadata."""
    from confluent_kafka import KafkaException

    try:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    except (KafkaException, KeyError):
        return collections.Counter()
    return collections.Counter(p.leader for p in parts)


def _leads_share(admin: Any, node_id: int) -> bool:
    """Whether ``node_id`` leads its share (two) of the share-join topic's partitions."""
    return _led(admin, SHARE_TOPIC)[node_id] >= 2


def _let_go(admin: Any, node_id: int) -> bool:
    """Whether every partition of the share-join topic is led, none by ``node_id``."""
    led = _led(admin, SHARE_TOPIC)
    return node_id not in led and -1 not in led


def _share_joins(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> None:
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
                    sorted(_led(admin, SHARE_TOPIC).values(), reverse=True) == balanced
                    and set(_led(admin, SHARE_TOPIC)) == three
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


def _member_kills(cluster: Cluster, s: Settings, prog: Progress, result: SuiteResult) -> None:
    """Brokers sharing partitions, under the failover load on a topic of
    :data:`MEMBER_PARTITIONS` spread over the three: kill -9 a member (each of the two in
    turn) leading two of them; per kill the seconds until the writer's Metadata names a
    live leader for both, and until the first record sent after the kill to one of them
    is acknowledged. The member starts again at once and gets its share back before the
    next kill. At the end the topic is read back."""
    from confluent_kafka.admin import AdminClient

    w = Workload(
        key=MEMBER_KILL_KEY, group="failover", target=SHARED,
        title=f"Kill -9 of a member leading partitions under {s.rate:,} records/s (1 KiB, "
        "acks=all, idempotent)",
        params={"kills": s.kills, "rate": s.rate, "session_timeout_ms": s.session_timeout_ms,
                "steady_s": s.steady_s, "partitions": MEMBER_PARTITIONS},
    )  # fmt: skip
    result.workloads.append(w)
    writer = cluster.writer()
    admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
    spec = loadgen.TopicSpec(MEMBER_TOPIC, MEMBER_PARTITIONS)
    loadgen.create_topics(writer.bootstrap, [spec], 30)
    producer = SteadyProducer(cluster.bootstrap, MEMBER_TOPIC, s)
    producer.start()
    members = [m for m in cluster.members if m is not writer]
    three = {m.node_id for m in cluster.members}
    try:
        for k in range(1, s.kills + 1):
            prog.step(f"member kill {k}/{s.kills}")
            writer.wait(
                "spread the topic over the three",
                lambda: _led(admin, MEMBER_TOPIC) == dict.fromkeys(three, 2),
            )
            time.sleep(s.steady_s)
            victim = members[k % len(members)]
            parts = {p for p, b in _leaders(admin, MEMBER_TOPIC).items() if b == victim.node_id}
            killed = time.monotonic()
            victim.crash()
            taken_s = writer.wait(
                "lead the dead member's partitions",
                functools.partial(_led_elsewhere, admin, parts, victim.node_id),
            )
            victim.launch()
            deadline = killed + _ACK_TIMEOUT_S
            while (at := producer.first_ack_after(killed, True, parts)) is None:
                if time.monotonic() > deadline or producer.error is not None:
                    raise RuntimeError(
                        f"no record to the dead member's partitions acknowledged within "
                        f"{_ACK_TIMEOUT_S:g} s: {producer.error}"
                    )
                time.sleep(_POLL_S)
            w.reps.append({"taken_s": taken_s, "produce_s": at - killed})
            prog.log(
                f"member kill {k}: broker {victim.node_id}'s partitions "
                f"{sorted(parts)} led again after {taken_s:.2f} s, first new record to them "
                f"acknowledged after {at - killed:.2f} s"
            )
    except RuntimeError as exc:
        w.failures.append(str(exc))
        prog.log(f"member kills FAILED: {exc}")
    finally:
        _tally(w, producer, MEMBER_PARTITIONS, result)


def _leaders(admin: Any, topic: str) -> dict[int, int]:
    """Each partition's leader in the writer's Metadata (none while it does not answer)."""
    from confluent_kafka import KafkaException

    try:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    except (KafkaException, KeyError):
        return {}
    return {p: m.leader for p, m in parts.items()}


def _led_elsewhere(admin: Any, partitions: Collection[int], dead: int) -> bool:
    """Whether the writer's Metadata names a live leader other than ``dead`` for each of
    the member-kill topic's ``partitions``."""
    leaders = _leaders(admin, MEMBER_TOPIC)
    return all(leaders.get(p, -1) not in (-1, dead) for p in partitions)


def _check(cluster: Cluster, producer: SteadyProducer, prog: Progress, result: SuiteResult) -> None:
    """Step 5: flush the producer, read the topic back, count what was lost."""
    prog.step("read back the failover topic")
    w = result.find(FAILOVER_KEY, THREE)
    assert w is not None
    _tally(w, producer, PARTITIONS, result)
    e = w.extra
    prog.log(
        f"read back: {int(e['acked']):,} acknowledged, {int(e['lost']):,} lost, "
        f"{int(e['duplicates']):,} duplicated, {producer.errors:,} delivery errors"
    )


def _tally(w: Workload, producer: SteadyProducer, partitions: int, result: SuiteResult) -> None:
    """Flush ``producer``, read its topic (of ``partitions``) back and record what was
    sent, acknowledged, lost and written twice in ``w``."""
    producer.finish()
    if producer.is_alive() or producer.error is not None:
        raise RuntimeError(f"the {w.key} producer did not finish: {producer.error}")
    seen = _read_back(producer.bootstrap, producer.topic, partitions)
    acked = set(producer.acked)
    lost = len(acked - seen.keys())
    dupes = sum(n - 1 for n in seen.values() if n > 1)
    w.extra.update({
        "sent": float(len(producer.sent)), "acked": float(len(acked)),
        "delivery_errors": float(producer.errors), "in_topic": float(sum(seen.values())),
        "lost": float(lost), "duplicates": float(dupes),
    })  # fmt: skip
    if lost or dupes:
        result.notes.append(
            f"DATA LOSS: {lost:,} acknowledged records missing and {dupes:,} written twice "
            f"in `{producer.topic}` after the kills."
        )


def _read_back(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """How many times each record number is in ``topic`` (read from offset 0 to the end).

    Raises:
        RuntimeError: the end was not reached within ``_READ_TIMEOUT_S``.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "floe-bench-unused",
                         "log_level": 2,
                         "enable.auto.commit": False, "broker.address.family": "v4"})  # fmt: skip
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p]])
        left = sum(ends.values())
        seen: collections.Counter[int] = collections.Counter()
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while left > 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back: {left:,} records short")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    seen[int((msg.value() or b"0")[:12])] += 1
                    left -= 1
        return dict(seen)
    finally:
        consumer.close()


def _facts(s: Settings) -> dict[str, dict[str, str]]:
    version = floe_version_label()
    common = (
        f"storage.type=s3 on SeaweedFS (same host), cluster.metadata.url=sqlite (one file), "
        f"cluster.session.timeout.ms={s.session_timeout_ms}"
    )
    return {
        ONE: {"label": "1 broker", "version": version,
              "description": f"one floe up, {common}: a cluster of one"},
        THREE: {"label": "3 brokers", "version": version,
                "description": f"three floe up on one prefix, {common}: one writer serves "
                "every partition, two standbys; clients get all three addresses"},
        SHARED: {"label": "3 brokers sharing", "version": version,
                 "description": f"three floe up on one prefix, {common}, "
                 "cluster.share.partitions=true: each leads its share of the partitions; "
                 "clients get all three addresses"},
    }  # fmt: skip


def _steps(s: Settings) -> int:
    return 2 * s.reps * 3 + 2 * s.kills + 2 * s.new_brokers + 1


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the throughput case on both clusters, then the kills and joins on three brokers.

    Raises:
        ValueError: bad settings.
        RuntimeError: SeaweedFS or a broker failed to start, a standby did not take over,
            or the failover producer failed.
        TimeoutError: the load generator hung.
    """
    s = settings_from(args)
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="floe-bench-cluster-") as tmp,
        Progress() as prog,
        seaweed_server(BUCKET) as server,
    ):
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME, machine=machine_info(root), settings=asdict(s), command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"), targets=_facts(s),
        )  # fmt: skip
        result.settings["failover_producer"] = dict(FAILOVER_PRODUCER_CONFIG)
        prog.total(_steps(s))
        clusters = {
            name: Cluster(
                name, root / name, size, _s3_sets(server, _prefix(name), root, s, name == SHARED)
            )
            for name, size in ((ONE, 1), (THREE, 3), (SHARED, 3))
        }
        try:
            for name, c in clusters.items():
                c.start()
                prog.log(f"{name} up: {c.bootstrap} (writer {c.writer().node_id})")
            with worker_pool() as pool:
                runner = _ClusterRunner(clusters, server, pool=pool, prog=prog, result=result,
                                        s=s.runner_settings())  # fmt: skip
                runner.produce_case(CASE)
            for name, c in clusters.items():
                result.memory[name] = {"rss_mb_after_throughput": c.sample().rss_bytes / broker.MB}
            prog.log(f"{ONE} stopped (exit code {clusters[ONE].stop()})")
            _share_joins(clusters[SHARED], s, prog, result)
            _member_kills(clusters[SHARED], s, prog, result)
            prog.log(f"{SHARED} stopped (exit code {clusters[SHARED].stop()})")
            result.machine["loadavg_after_throughput"] = loadavg()
            producer = _failover(clusters[THREE], s, prog, result)
            try:
                _joins(clusters[THREE], s, prog, result)
            finally:
                _check(clusters[THREE], producer, prog, result)
            result.machine["loadavg_after_failover"] = loadavg()
        finally:
            for name, c in clusters.items():
                prog.log(f"{name} stopped (exit code {c.stop()})")
    result.duration_s = time.monotonic() - t0
    return result
