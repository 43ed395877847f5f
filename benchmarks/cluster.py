"""The ``cluster`` suite: failover time, 1 vs 3 brokers, and how soon a new broker joins.

What a cluster is and how its brokers are started: ``benchmarks.cluster_base``. Layout of
one run (this module wires the steps; each lives in a module of its own):

1. start SeaweedFS (``floe.testing.seaweed``) and one etcd (``benchmarks.etcd_server``;
   ``--cluster-metadata sqlite``: a SQLite file per cluster instead), then three
   clusters side by side, each on its own prefix and metadata namespace: ``1-broker``
   (one ``floe up`` with ``cluster.metadata.url``, alone), ``3-brokers`` (three, node
   ids 1..3: one writer, two standbys) and ``3-shared`` (three with
   ``cluster.share.partitions``); meanwhile, in a thread, the Java client is compiled
   (``benchmarks.failover_clients``);
2. throughput on the three clusters (``benchmarks.cluster_scale``); stop ``1-broker``;
3. on ``3-shared``: share joins (``benchmarks.cluster_scale``), the metadata store's
   load idle (``benchmarks.cluster_store``), then the member-kill series
   (``benchmarks.cluster_failover``, the store's load under it before the first kill),
   topic read back; stop ``3-shared``;
4. on ``3-brokers``: the writer-kill series under four producers
   (``benchmarks.cluster_failover``), then joins under the same load
   (``benchmarks.cluster_scale``), then the producers are flushed and the failover topic
   read back; always stop every broker, then SeaweedFS;
5. the takeover workload (``benchmarks.cluster_takeover``): a member's takeover timed
   on buckets of ~1k and ~50k partition objects, three brokers on etcd (alone with
   ``--cluster-takeover-only``).

``--cluster-failover-only`` runs the two failover series of steps 3 and 4 alone (no
throughput, joins or takeover). The failover series run at the product's default
``cluster.session.timeout.ms`` unless ``--cluster-session-timeout-ms`` says otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks import broker, cluster_report, cluster_store, cluster_takeover
from benchmarks.cluster_base import (
    BUCKET,
    KILLS,
    METADATA_STORES,
    ONE,
    RATE,
    SESSION_TIMEOUT_MS,
    SHARED,
    STEADY_S,
    THREE,
    Cluster,
    Settings,
    prefix,
    s3_sets,
)
from benchmarks.cluster_failover import check, member_kills, writer_kills
from benchmarks.cluster_scale import joins, share_joins, throughput
from benchmarks.etcd_server import Etcd, etcd_server
from benchmarks.failover_clients import CLIENTS, PRODUCER_CONFIG, JavaSetup, Load, prepare_java
from benchmarks.harness import (
    Progress,
    SuiteResult,
    floe_version_label,
    loadavg,
    machine_info,
)
from floe.config.broker import CLUSTER_SESSION_TIMEOUT_MS
from floe.errors import ConfigError
from floe.testing.java import JavaError
from floe.testing.seaweed import seaweed_server

NAME = "cluster"
TITLE = "Cluster: failover and 1 vs 3 brokers"
render = cluster_report.render
"""The suite's Markdown section (``benchmarks.harness`` lists what a suite provides)."""
charts = cluster_report.charts
"""The suite's PNG charts (none: the numbers fit in tables)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options (the common ones live in ``benchmarks.__main__``)."""
    g = parser.add_argument_group("cluster suite")
    g.add_argument("--cluster-records", type=int, help="1 KiB records per produce rep")
    g.add_argument(
        "--cluster-kills",
        type=int,
        help=f"writer kills and member kills (default {KILLS}, quick 2)",
    )
    g.add_argument(
        "--cluster-session-timeout-ms",
        type=int,
        default=SESSION_TIMEOUT_MS,
        help=f"cluster.session.timeout.ms of every broker (default {SESSION_TIMEOUT_MS}, "
        "the product's)",
    )
    g.add_argument(
        "--cluster-metadata",
        choices=METADATA_STORES,
        default=METADATA_STORES[0],
        help="the clusters' metadata store: one etcd (a namespace per cluster, the default) "
        "or a SQLite file per cluster",
    )
    g.add_argument(
        "--cluster-rate",
        type=int,
        default=RATE,
        help=f"records/s of each Python producer during failover ({RATE})",
    )
    g.add_argument(
        "--cluster-steady-seconds",
        type=float,
        help=f"load before each kill (default {STEADY_S:g}, quick 2)",
    )
    g.add_argument(
        "--cluster-new-brokers", type=int, help="new brokers timed joining (default 3, quick 1)"
    )
    sizes = ",".join(map(str, cluster_takeover.OBJECTS))
    quick = ",".join(map(str, cluster_takeover.QUICK_OBJECTS))
    g.add_argument(
        "--cluster-takeover-objects",
        help=f"bucket sizes (partition objects) of the takeover workload (default {sizes}, "
        f"quick {quick})",
    )
    g.add_argument(
        "--cluster-takeover-only", action="store_true", help="run the takeover workload alone"
    )
    g.add_argument(
        "--cluster-failover-only",
        action="store_true",
        help="run the two failover series alone (member kills, then writer kills)",
    )


def takeover_settings_from(args: argparse.Namespace) -> cluster_takeover.TakeoverSettings:
    """The takeover workload's settings, ``--quick`` applied to what was not given.

    Raises:
        ValueError: bad sizes.
    """
    quick = bool(args.quick)
    text = args.cluster_takeover_objects or ",".join(
        map(str, cluster_takeover.QUICK_OBJECTS if quick else cluster_takeover.OBJECTS)
    )
    steady = cluster_takeover.QUICK_STEADY_S if quick else cluster_takeover.STEADY_S
    return cluster_takeover.TakeoverSettings(
        objects=cluster_takeover.parse_objects(text),
        session_timeout_ms=args.cluster_session_timeout_ms,
        steady_s=args.cluster_steady_seconds or steady,
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
        kills=args.cluster_kills or (2 if quick else KILLS),
        session_timeout_ms=args.cluster_session_timeout_ms,
        rate=args.cluster_rate,
        steady_s=args.cluster_steady_seconds or (2.0 if quick else STEADY_S),
        new_brokers=args.cluster_new_brokers or (1 if quick else 3),
        seed=args.seed,
        quick=quick,
        metadata=args.cluster_metadata,
    )
    if min(s.records, s.reps, s.kills, s.rate, s.new_brokers) < 1 or s.steady_s <= 0:
        raise ValueError("records, reps, kills, rate, new brokers, steady seconds must be >0")
    try:
        CLUSTER_SESSION_TIMEOUT_MS.parse(s.session_timeout_ms)
    except ConfigError as exc:
        raise ValueError(f"--cluster-session-timeout-ms: {exc}") from None
    return s


def _facts(s: Settings) -> dict[str, dict[str, str]]:
    version = floe_version_label()
    store = "etcd (one, same host)" if s.metadata == "etcd" else "sqlite (one file)"
    common = (
        f"storage.type=s3 on SeaweedFS (same host), cluster.metadata.url={store}, "
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
    return 2 * s.reps * 3 + 2 * s.kills + 2 * s.new_brokers + 2


def _java(job: concurrent.futures.Future[JavaSetup], prog: Progress, result: SuiteResult
          ) -> JavaSetup | None:  # fmt: skip
    """The compiled Java client, or None (said in the settings, a note and the log) when
    it could not be had: the series then run the three Python clients."""
    try:
        java = job.result()
    except JavaError as exc:
        why = str(exc).splitlines()[0]
        result.settings["java"] = f"absent: {why}"
        result.notes.append(f"The Java client did not run: {why}")
        prog.log(f"no Java client, the failover series run without it: {why}")
        return None
    result.settings["java"] = "kafka-clients 3.9.1"
    return java


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the throughput case on the clusters, then the kills and joins.

    Raises:
        ValueError: bad settings.
        RuntimeError: SeaweedFS or a broker failed to start, or a topic could not be read
            back.
        TimeoutError: the load generator hung.
    """
    s = settings_from(args)
    takeover = takeover_settings_from(args)
    if args.cluster_takeover_only:
        return _takeover_only(s, takeover, command, args.profile)
    failover_only = bool(args.cluster_failover_only)
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="floe-bench-cluster-") as tmp,
        concurrent.futures.ThreadPoolExecutor(1, "java-compile") as compiler,
        Progress() as prog,
        seaweed_server(BUCKET) as server,
        _metadata_store(s, Path(tmp) / "etcd") as etcd,
    ):
        root = Path(tmp)
        java_job = compiler.submit(prepare_java, root / "java")
        result = SuiteResult(
            suite=NAME, machine=machine_info(root), settings=asdict(s), command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"), targets=_facts(s),
        )  # fmt: skip
        result.settings["failover_producer"] = dict(PRODUCER_CONFIG)
        result.settings["failover_clients"] = list(CLIENTS)
        prog.total(2 * s.kills + 2 if failover_only else _steps(s) + 2 * len(takeover.objects))
        sizes = ((THREE, 3), (SHARED, 3)) if failover_only else ((ONE, 1), (THREE, 3), (SHARED, 3))
        clusters = {
            name: Cluster(
                name,
                root / name,
                size,
                s3_sets(
                    server,
                    prefix(name),
                    root,
                    s,
                    share=name == SHARED,
                    etcd=etcd.endpoint if etcd is not None else None,
                ),
            )
            for name, size in sizes
        }
        try:
            for name, c in clusters.items():
                c.start()
                prog.log(f"{name} up: {c.bootstrap} (writer {c.writer().node_id})")
            if not failover_only:
                throughput(clusters, server, s, prog, result)
                for name, c in clusters.items():
                    rss = c.sample().rss_bytes / broker.MB
                    result.memory[name] = {"rss_mb_after_throughput": rss}
                prog.log(f"{ONE} stopped (exit code {clusters[ONE].stop()})")
            load = Load(s.rate, s.seed, _java(java_job, prog, result), root / "clients")
            if not failover_only:
                share_joins(clusters[SHARED], s, prog, result)
                cluster_store.measure(clusters[SHARED], "idle", prog, result)
            member_kills(clusters[SHARED], s, load, prog, result, store=not failover_only)
            prog.log(f"{SHARED} stopped (exit code {clusters[SHARED].stop()})")
            result.machine["loadavg_after_throughput"] = loadavg()
            w, clients = writer_kills(clusters[THREE], s, load, prog, result)
            try:
                if not failover_only:
                    joins(clusters[THREE], s, prog, result)
            finally:
                check(w, clients, s, prog, result)
            result.machine["loadavg_after_failover"] = loadavg()
        finally:
            for name, c in clusters.items():
                prog.log(f"{name} stopped (exit code {c.stop()})")
        if not failover_only:
            cluster_takeover.takeovers(
                server, root / "takeover", takeover, prog, result, profile_dir=args.profile
            )
    result.duration_s = time.monotonic() - t0
    return result


def _metadata_store(s: Settings, directory: Path) -> contextlib.AbstractContextManager[Etcd | None]:
    """The etcd every cluster keeps its metadata in (a namespace each), or None when
    they use SQLite files (``--cluster-metadata sqlite``).

    Raises:
        RuntimeError: etcd did not start.
    """
    return etcd_server(directory) if s.metadata == "etcd" else contextlib.nullcontext()


def _takeover_only(
    s: Settings, takeover: cluster_takeover.TakeoverSettings, command: str, profile: Path | None
) -> SuiteResult:
    """The takeover workload alone (``--cluster-takeover-only``).

    Raises:
        RuntimeError: SeaweedFS or etcd failed to start.
    """
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="floe-bench-takeover-") as tmp,
        Progress() as prog,
        seaweed_server(BUCKET) as server,
    ):
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME, machine=machine_info(root), settings=asdict(s), command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )  # fmt: skip
        prog.total(2 * len(takeover.objects))
        cluster_takeover.takeovers(server, root, takeover, prog, result, profile_dir=profile)
        result.machine["loadavg_after_takeover"] = loadavg()
    result.duration_s = time.monotonic() - t0
    return result
