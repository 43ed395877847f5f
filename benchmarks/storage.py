"""The ``storage`` suite: ``floe up`` on local disk vs ``floe up`` on object storage.

Layout of one run:

1. start SeaweedFS (``floe.testing.seaweed``: ``weed mini`` on 127.0.0.1 free ports)
   with one bucket for the broker and one for the client comparison;
2. the S3 client comparison (``benchmarks.s3_clients``: obstore vs boto3 vs pyarrow,
   same requests, same server), before any broker runs;
3. start etcd (``benchmarks.etcd_server``: one member on 127.0.0.1 free ports), then
   three brokers, and keep them up for the whole run, loading one at a time: ``local``
   (the default engine, ``log.flush.policy=acks``: acks=all after an fsync), ``s3``
   (``storage.type=s3`` on the SeaweedFS bucket, defaults otherwise: acks=all after a
   group-committed WAL object is in the bucket) and ``s3-commit`` (the same on its own
   prefix, plus ``cluster.metadata.url=etcd://...``: a cluster of one, whose acks=all
   also waits for the commit point, one etcd transaction per WAL object committing its
   records; what that costs is ``s3-commit`` / ``s3``);
4. the broker suite's method, reused as is (``benchmarks.broker.Runner``): per produce
   case, alternating repetitions, then the topic consumed back from offset 0; then
   produce latency at a fixed moderate rate. Around every repetition on ``s3`` and
   ``s3-commit`` the broker's ``/metrics`` is scraped (``floe_s3_requests_total``,
   ``floe_s3_bytes_total``); after a produce repetition the suite waits until the
   background uploaders have turned every WAL object into partition objects (no key left
   under ``wal/``), so each repetition is charged with every request its records cost,
   and the next repetition (of any target) does not share the machine with that upload;
5. stop the three brokers, then etcd (always, also on failure);
6. cold reads, on a third broker started only now so that it has the machine (and
   SeaweedFS) to itself: ``s3-cold``, object storage on its own prefix of the same
   bucket with ``storage.s3.cache.max.bytes=0`` (keep nothing in data.dir that is
   already in the bucket), small segments and a maintenance pass every second. Per
   consume case: produce as many records as the ``s3`` target's consume read, wait
   until the uploader is done and every segment but the active one has left data.dir,
   then consume them back by count, metered like ``s3`` (GETs, bytes got). The same
   read from the cache is the ``s3`` target's consume workload of step 4. Always stop
   it, then SeaweedFS.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

from benchmarks import broker, loadgen, s3_clients, storage_report
from benchmarks.etcd_server import Etcd, etcd_server
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
from benchmarks.targets import FloeTarget
from floe.testing.seaweed import SeaweedServer, seaweed_server, weed_binary

NAME = "storage"
TITLE = "Storage: local disk vs object storage"
render = storage_report.render
"""The suite's Markdown section (``benchmarks.harness`` lists what a suite provides)."""
charts = storage_report.charts
"""The suite's PNG charts."""

LOCAL = "local"
S3 = "s3"
COMMIT = "s3-commit"
COLD = "s3-cold"
BUCKET = "floe-bench"
PREFIX = "bench"
COMMIT_PREFIX = "bench-commit"
COLD_PREFIX = "bench-cold"
PREFIXES = {S3: PREFIX, COMMIT: COMMIT_PREFIX, COLD: COLD_PREFIX}
"""The object-storage targets (metered around every repetition) and their bucket prefix."""
COLD_GROUP = "cold-consume"
CLIENT_BUCKET = "s3-clients"

CASES = (
    broker.ProduceCase(1024, "none", "all", 1, consume=True),
    broker.ProduceCase(1024, "none", "all", 8, consume=True),
)
"""The broker suite's base case and its 8-partition variant (where group commit across
partitions matters), each read back."""

COUNTERS = ("puts", "gets", "lists", "deletes", "bytes_put", "bytes_got")
_METRIC = re.compile(r'^floe_s3_(requests|bytes)_total\{(?:operation|direction)="(\w+)"\} (\S+)$')
_CACHE_START = re.compile(r"^floe_s3_partition_cache_start_offset\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_SETTLE_POLL_S = 0.5


@dataclass(frozen=True)
class S3Prices:
    """Public AWS S3 Standard request prices used for the cost columns (USD)."""

    region: str = "us-east-1"
    as_of: str = "2026-11 (the prices of issue 14, not re-checked from this offline machine)"
    put_class_per_1000: float = 0.005
    """PUT, COPY, POST and LIST requests."""
    get_class_per_1000: float = 0.0004
    """GET (and SELECT and every other request)."""
    delete_per_1000: float = 0.0
    """DELETE requests are free."""
    source: str = "https://aws.amazon.com/s3/pricing/ (S3 Standard, requests & data retrievals)"

    def usd(self, c: dict[str, float]) -> float:
        """What the requests in ``c`` (see ``COUNTERS``) cost."""
        put_class = c["puts"] + c["lists"]
        return (
            put_class * self.put_class_per_1000
            + c["gets"] * self.get_class_per_1000
            + c["deletes"] * self.delete_per_1000
        ) / 1000


PRICES = S3Prices()


@dataclass(frozen=True)
class Settings:
    """What to run; stored in the JSON as a dict."""

    records: int
    reps: int
    latency_rate: int
    latency_seconds: float
    client_samples: int
    seed: int
    s3_sets: tuple[str, ...] = ()
    cold_segment_bytes: int = 4 * 1024 * 1024
    """``log.segment.bytes`` of the cold target: only whole, rolled segments leave the
    cache, so its segments must be small next to what a case produces."""
    settle_timeout_s: float = 120.0
    evict_timeout_s: float = 120.0
    quick: bool = False

    def runner_settings(self) -> broker.Settings:
        """The broker suite's settings for the same sizes (every target is Floe)."""
        return broker.Settings(
            records=self.records,
            small_records=self.records,
            reps=self.reps,
            latency_rate=self.latency_rate,
            latency_seconds=self.latency_seconds,
            seed=self.seed,
            targets=(LOCAL, S3, COMMIT),
            quick=self.quick,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options (the common ones live in ``benchmarks.__main__``)."""
    g = parser.add_argument_group("storage suite")
    g.add_argument("--storage-records", type=int, help="1 KiB records per produce rep")
    g.add_argument("--storage-latency-rate", type=int, default=5_000, help="records/s")
    g.add_argument("--storage-latency-seconds", type=float, help="length of one latency rep")
    g.add_argument(
        "--storage-client-samples", type=int, help="timed calls per S3 request kind (x share)"
    )
    g.add_argument(
        "--storage-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config for the object-storage targets only, s3, s3-commit and "
        "s3-cold; on s3-cold it wins over the cold settings (repeatable)",
    )
    g.add_argument(
        "--storage-cold-segment-bytes",
        type=int,
        default=Settings.cold_segment_bytes,
        help="log.segment.bytes of the s3-cold target (default 4 MiB)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size, rate or count is not positive.
    """
    quick = bool(args.quick)
    s = Settings(
        records=args.storage_records or (20_000 if quick else 200_000),
        reps=args.reps or (1 if quick else 3),
        latency_rate=args.storage_latency_rate,
        latency_seconds=args.storage_latency_seconds or (1.0 if quick else 10.0),
        client_samples=args.storage_client_samples or (20 if quick else 200),
        seed=args.seed,
        s3_sets=tuple(args.storage_set),
        cold_segment_bytes=args.storage_cold_segment_bytes,
        evict_timeout_s=30.0 if quick else 120.0,
        quick=quick,
    )
    sizes = (s.records, s.reps, s.latency_rate, s.client_samples, s.cold_segment_bytes)
    if min(sizes) < 1 or s.latency_seconds <= 0:
        raise ValueError(
            "records, reps, latency rate and seconds, samples, segment bytes must be positive"
        )
    return s


class MeteredFloe(FloeTarget):
    """``floe up`` on a known admin port, so the suite can read its ``/metrics``."""

    def __init__(self, name: str, workdir: Path, sets: tuple[str, ...]) -> None:
        self.admin_port = free_port()
        # Given last, this admin.port wins over the one FloeTarget picks.
        super().__init__(name, workdir, (*sets, f"admin.port={self.admin_port}"))

    def s3_counters(self) -> dict[str, float]:
        """The broker's bucket requests and bytes since start (zeros on local disk).

        Raises:
            OSError: ``/metrics`` did not answer.
        """
        out = dict.fromkeys(COUNTERS, 0.0)
        for line in self._metrics().splitlines():
            m = _METRIC.match(line)
            if m is None:
                continue
            family, label, value = m.groups()
            if family == "requests":
                name = f"{label}s"
            else:  # direction="put" / "get": bytes_put / bytes_got
                name = "bytes_put" if label == "put" else "bytes_got"
            out[name] = float(value)
        return out

    def cache_starts(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``: the first offset still in data.dir
        (``floe_s3_partition_cache_start_offset``); reads below it go to the bucket.

        Raises:
            OSError: ``/metrics`` did not answer.
        """
        out: dict[int, int] = {}
        for line in self._metrics().splitlines():
            m = _CACHE_START.match(line)
            if m is None:
                continue
            labels = dict(_LABEL.findall(m.group(1)))
            if labels.get("topic") == topic:
                out[int(labels["partition"])] = int(float(m.group(2)))
        return out

    def _metrics(self) -> str:
        url = f"http://127.0.0.1:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text: str = resp.read().decode()
        return text


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in COUNTERS}


def request_metrics(
    payload_bytes: float, during: dict[str, float], total: dict[str, float]
) -> dict[str, float]:
    """Bucket requests of one repetition, absolute and per GB (10^9 B) of payload.

    ``during`` counts the client call only (for produce: the WAL PUTs on the acks path);
    ``total`` adds the wait for the background upload that follows.
    """
    gb = payload_bytes / 1e9
    out = {k: total[k] for k in COUNTERS}
    out["ack_path_puts"] = during["puts"]
    for k in ("puts", "gets", "lists", "deletes"):
        out[f"{k}_per_gb"] = total[k] / gb if gb else 0.0
    out["ack_path_puts_per_gb"] = during["puts"] / gb if gb else 0.0
    out["bytes_put_ratio"] = total["bytes_put"] / payload_bytes if payload_bytes else 0.0
    out["bytes_got_ratio"] = total["bytes_got"] / payload_bytes if payload_bytes else 0.0
    out["usd_per_gb"] = PRICES.usd(total) / gb if gb else 0.0
    return out


class _StorageRunner(broker.Runner):
    """The broker suite's runner, plus bucket accounting around every repetition on an
    object-storage target (``s3``, ``s3-commit``, ``s3-cold``) and the cold-read workload.

    Owned by the suite's thread, like its base class.
    """

    def __init__(
        self,
        targets: dict[str, MeteredFloe],
        pool: concurrent.futures.Executor,
        prog: Progress,
        result: SuiteResult,
        s: Settings,
        *,
        server: SeaweedServer,
    ) -> None:
        super().__init__(dict(targets), pool, prog, result, s.runner_settings())
        self.metered = {name: t for name, t in targets.items() if name in PREFIXES}
        self.storage = s
        self._bucket = server.s3_client()

    def repeat(
        self,
        workloads: dict[str, Workload],
        blocked: dict[str, str],
        run_once: Callable[[str, int], dict[str, float]],
    ) -> None:
        def metered(name: str, rep: int) -> dict[str, float]:
            target = self.metered.get(name)
            if target is None:
                return run_once(name, rep)
            w = workloads[name]
            before = target.s3_counters()
            metrics = run_once(name, rep)
            during = _delta(target.s3_counters(), before)
            cpu0 = target.sample().cpu_seconds
            t0 = time.monotonic()
            if w.group not in ("consume", COLD_GROUP):
                self.settle(everything=False)
            metrics["upload_wait_s"] = time.monotonic() - t0
            metrics["upload_cpu_s"] = target.sample().cpu_seconds - cpu0
            records = metrics.get("records", float(w.params["records"]))
            payload = records * float(w.params["value_bytes"])
            total = _delta(target.s3_counters(), before)
            metrics.update(request_metrics(payload, during, total))
            return metrics

        super().repeat(workloads, blocked, metered)

    def delete(self, topic: str) -> None:
        """Delete on every target, then wait until the bucket holds no data of it any more."""
        super().delete(topic)
        self.settle(everything=True)

    def _pending(self, everything: bool) -> int:
        """Objects the uploaders still have to deal with (WAL; with ``everything``, data)."""
        prefixes = [
            f"{PREFIXES[name]}/{kind}/"
            for name in self.metered
            for kind in ("wal", *(["data"] if everything else []))
        ]
        return sum(
            int(self._bucket.list_objects_v2(Bucket=BUCKET, Prefix=p, MaxKeys=1)["KeyCount"])
            for p in prefixes
        )

    def settle(self, *, everything: bool) -> None:
        """Wait until no WAL object is left in the bucket (``everything``: no partition
        object either, after a topic deletion) and the request counters stand still."""
        deadline = time.monotonic() + self.storage.settle_timeout_s
        last: list[dict[str, float]] | None = None
        while time.monotonic() < deadline:
            now = [t.s3_counters() for t in self.metered.values()]
            if self._pending(everything) == 0:
                if now == last:
                    return
                last = now
            time.sleep(_SETTLE_POLL_S)
        self.note(
            f"the object-storage broker's uploader did not catch up within "
            f"{self.storage.settle_timeout_s:.0f} s; later requests are charged to the next "
            "phase."
        )

    def cold_case(self, case: broker.ProduceCase) -> None:
        """Fill a topic of the cold target with as many records as the ``s3`` target's
        consume of ``case`` read, wait until they left its cache, read them back from
        the bucket ``reps`` times.

        The topic stays: the target stops after its last case and nothing else uses its
        prefix, so deleting (and waiting for the bucket to be emptied) would only add
        time; a later case's reads do not touch it.
        """
        s = self.storage
        records = s.records * s.reps
        key = case.key.replace("produce-", f"{COLD_GROUP}-", 1)
        topic = f"bench-{key}"
        blocked = self.create(topic, case.partitions)
        workloads = self.workloads(
            key, COLD_GROUP, f"Consume {case.title}, from the bucket", records=records,
            value_bytes=case.value_bytes, partitions=case.partitions,
            cache_key=case.key.replace("produce-", "consume-", 1),
            segment_bytes=s.cold_segment_bytes,
        )  # fmt: skip
        for name in self.targets:
            self.prog.step(f"{key} {name}: produce {records:,} records, wait for eviction")
            if name in blocked:
                continue
            try:
                acked = self._fill(name, topic, case, records)
            except broker._RunError as exc:
                blocked[name] = f"filling the topic failed: {exc}"
                self.prog.log(f"{key} {name}: {blocked[name]}")
                continue
            workloads[name].params["records"] = acked
            acked_at = time.monotonic()
            self.settle(everything=False)
            evicted = self._wait_evicted(name, topic, case.partitions, acked, acked_at)
            workloads[name].extra.update(evicted)

        def once(name: str, _rep: int) -> dict[str, float]:
            w = workloads[name]
            bytes_ = int(w.params["records"]) * case.value_bytes
            sp = loadgen.ConsumeSpec(
                self.targets[name].bootstrap, topic, case.partitions,
                broker._timeout_for(bytes_), expected=int(w.params["records"]),
            )  # fmt: skip
            out, cost = self.call(name, loadgen.consume, sp, timeout_s=sp.timeout_s)
            return broker._transfer_metrics(out, cost)

        self.repeat(workloads, blocked, once)

    def _fill(self, name: str, topic: str, case: broker.ProduceCase, records: int) -> int:
        """Produce ``records`` (unmeasured); return how many were acknowledged.

        Raises:
            broker._RunError: the producer failed or acknowledged nothing.
        """
        spec = loadgen.ProduceSpec(
            bootstrap=self.targets[name].bootstrap, topic=topic, partitions=case.partitions,
            records=records, compression=case.compression, seed=self.storage.seed,
            timeout_s=broker._timeout_for(records * case.value_bytes),
            value_bytes=case.value_bytes, acks=case.acks,
        )  # fmt: skip
        out, _ = self.call(name, loadgen.produce, spec, timeout_s=spec.timeout_s)
        if out.records == 0:
            raise broker._RunError(f"no record acknowledged ({out.errors} errors)")
        if out.records != records:
            self.note(
                f"{name}: {out.records:,} of {records:,} records acknowledged in `{topic}` "
                f"({out.errors} errors); the cold consume reads those."
            )
        return int(out.records)

    def _wait_evicted(
        self, name: str, topic: str, partitions: int, records: int, acked_at: float
    ) -> dict[str, float]:
        """Wait until each partition of ``topic`` keeps only its active segment in
        data.dir (every older one is in partition objects and evicted); return how long
        that took since the last ack (``acked_at``, monotonic), what is left and the share
        of the records below the cache start."""
        target = self.metered[name]
        deadline = time.monotonic() + self.storage.evict_timeout_s
        while (left := _segment_files(target.data_dir, topic)) != [1] * partitions:
            if time.monotonic() > deadline:
                self.note(
                    f"{name}: `{topic}` still had {sum(left)} segment files in data.dir for "
                    f"{partitions} partition(s) after {self.storage.evict_timeout_s:.0f} s "
                    "(expected one, the active segment, per partition): part of its cold "
                    "consume was served from the cache; see *below the cache start*."
                )
                break
            time.sleep(_SETTLE_POLL_S)
        waited = time.monotonic() - acked_at
        starts = target.cache_starts(topic)
        cold = sum(starts.values()) / records if records else 0.0
        if len(starts) != partitions or cold == 0:
            self.note(
                f"{name}: `{topic}`: floe_s3_partition_cache_start_offset reported "
                f"{starts} (expected {partitions} partitions above 0)."
            )
        cached = broker._stored_bytes(target.data_dir, topic)
        self.prog.log(
            f"{topic} on {name}: {cold:.1%} of the records below the cache start after "
            f"{waited:.1f} s, {cached / broker.MB:.1f} MB left in data.dir"
        )
        return {"evict_wait_s": waited, "cold_share": cold, "cached_bytes": float(cached)}


def _segment_files(data_dir: Path, topic: str) -> list[int]:
    """Number of ``*.log`` segment files of each ``<topic>-<partition>`` directory,
    in partition order."""
    pattern = re.compile(re.escape(topic) + r"-(\d+)")
    counts: dict[int, int] = {}
    for d in data_dir.rglob(f"{topic}-*"):
        m = pattern.fullmatch(d.name)
        if m is not None and d.is_dir():
            counts[int(m.group(1))] = sum(1 for _ in d.glob("*.log"))
    return [counts[p] for p in sorted(counts)]


def _s3_sets(
    server: SeaweedServer, extra: tuple[str, ...], prefix: str = PREFIX
) -> tuple[str, ...]:
    return (
        *(f"{k}={v}" for k, v in server.log_settings(BUCKET, prefix).items()),
        *extra,
    )


def _targets(
    s: Settings, server: SeaweedServer, etcd: Etcd, root: Path
) -> tuple[dict[str, MeteredFloe], dict[str, dict[str, str]]]:
    floe_version = floe_version_label()
    commit = (f"cluster.metadata.url=etcd://{etcd.endpoint}", *s.s3_sets)
    made = {
        LOCAL: MeteredFloe(LOCAL, root / LOCAL, ("log.flush.policy=acks",)),
        S3: MeteredFloe(S3, root / S3, _s3_sets(server, s.s3_sets)),
        COMMIT: MeteredFloe(COMMIT, root / COMMIT, _s3_sets(server, commit, COMMIT_PREFIX)),
    }
    extra = f", --set {' --set '.join(s.s3_sets)}" if s.s3_sets else ""
    facts = {
        LOCAL: {
            "label": "local disk",
            "description": "floe up, storage.type=local, log.flush.policy=acks (default: "
            "acks=all answered after a group-committed fsync)",
            "version": floe_version,
        },
        S3: {
            "label": "object storage",
            "description": "floe up, storage.type=s3 on SeaweedFS (same host), defaults "
            "otherwise: acks=all answered once a group-committed WAL object is in the "
            "bucket; partition objects every storage.s3.upload.interval.ms; data.dir is "
            "the read cache" + extra,
            "version": floe_version,
        },
        COMMIT: {
            "label": "object storage, commit point in etcd",
            "description": "floe up as object storage, on its own prefix of the bucket, plus "
            "cluster.metadata.url=etcd://127.0.0.1:port (one etcd member on the same host, "
            "started by the suite): a cluster of one, defaults otherwise; acks=all answered "
            "once the WAL object is in the bucket and its records are committed in etcd "
            "(one transaction per WAL object)" + extra,
            "version": floe_version,
        },
    }
    return made, facts


def _versions() -> dict[str, str]:
    import subprocess

    done = subprocess.run(
        [str(weed_binary()), "version"], capture_output=True, text=True, timeout=30, check=False
    )
    return {
        "seaweedfs": next(
            (w for w in done.stdout.split() if re.fullmatch(r"\d+\.\d+(\.\d+)?", w)), "unknown"
        ),
        **{name: version(name) for name in ("obstore", "boto3", "pyarrow")},
    }


def _cold_target(
    s: Settings, server: SeaweedServer, root: Path
) -> tuple[MeteredFloe, dict[str, str]]:
    """The cold-read broker and its facts: nothing that is in the bucket stays cached.

    The user's ``--storage-set`` options come last, so they win over the cold settings.
    """
    cold = (
        "storage.s3.cache.max.bytes=0",
        f"log.segment.bytes={s.cold_segment_bytes}",
        "log.retention.check.interval.ms=1000",
        "storage.s3.upload.interval.ms=1000",
    )
    extra = f", --set {' --set '.join(s.s3_sets)}" if s.s3_sets else ""
    facts = {
        "label": "object storage, evicted",
        "description": "floe up, storage.type=s3 on the same SeaweedFS (its own prefix), "
        "run alone after the others have stopped, for the cold reads only: "
        + ", ".join(cold)
        + " (every segment but the active one leaves data.dir once it is in partition "
        "objects; reads below the cache start GET whole partition objects, kept in a "
        "memory LRU of storage.s3.read.cache.bytes, default 64 MiB)" + extra,
        "version": floe_version_label(),
    }
    sets = _s3_sets(server, (*cold, *s.s3_sets), prefix=COLD_PREFIX)
    return MeteredFloe(COLD, root / COLD, sets), facts


def _steps(s: Settings) -> int:
    runs = len(CASES) + sum(c.consume for c in CASES) + 1
    cold = sum(c.consume for c in CASES) * (1 + s.reps)
    return 1 + len(s.runner_settings().targets) * s.reps * runs + cold


def _cold_reads(
    s: Settings, server: SeaweedServer, root: Path, prog: Progress, result: SuiteResult
) -> None:
    """Step 6 of the module docstring: start the cold target, run its cases, stop it."""
    target, result.targets[COLD] = _cold_target(s, server, root)
    try:
        target.start()
        prog.log(f"{COLD} up on {target.bootstrap} (pid {target.pid})")
        with worker_pool() as pool:
            runner = _StorageRunner({COLD: target}, pool, prog, result, s, server=server)
            for case in CASES:
                if case.consume:
                    runner.cold_case(case)
        _record_memory(result, COLD, target)
        result.machine["loadavg_after_cold_reads"] = loadavg()
    finally:
        prog.log(f"{COLD} stopped (exit code {target.stop()})")


def _workloads(
    s: Settings, server: SeaweedServer, root: Path, prog: Progress, result: SuiteResult
) -> None:
    """Steps 3 to 5 of the module docstring: start etcd and the three brokers, run every
    case on them, stop the brokers, then etcd (the ``s3-commit`` broker needs it to leave
    its cluster)."""
    with etcd_server(root / "etcd") as etcd:
        prog.log(f"etcd up at {etcd.endpoint}")
        targets, facts = _targets(s, server, etcd, root)
        result.targets.update(facts)
        try:
            for name, target in targets.items():
                target.start()
                prog.log(f"{name} up on {target.bootstrap} (pid {target.pid})")
            with worker_pool() as pool:
                runner = _StorageRunner(targets, pool, prog, result, s, server=server)
                for case in CASES:
                    runner.produce_case(case)
                runner.latency(end_to_end=False)
            for name, target in targets.items():
                _record_memory(result, name, target)
            result.machine["loadavg_after_workloads"] = loadavg()
        finally:
            for name, target in targets.items():
                prog.log(f"{name} stopped (exit code {target.stop()})")


def _record_memory(result: SuiteResult, name: str, target: MeteredFloe) -> None:
    """The broker's peak RSS and CPU over the run, when it is still up."""
    if target.alive():
        after = target.sample()
        result.memory[name] = {
            "peak_rss_mb": after.peak_rss_bytes / broker.MB,
            "total_cpu_s": after.cpu_seconds,
        }


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the client comparison, every workload on the three targets, then the cold reads.

    Raises:
        ValueError: bad settings.
        RuntimeError: SeaweedFS, etcd or a broker failed to start.
        TimeoutError: the load generator hung.
    """
    s = settings_from(args)
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="floe-bench-storage-") as tmp,
        Progress() as prog,
        seaweed_server(BUCKET, CLIENT_BUCKET) as server,
    ):
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME,
            machine={**machine_info(root), **_versions()},
            settings={**asdict(s), "prices": asdict(PRICES)},
            command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )
        prog.total(_steps(s))
        prog.log(f"SeaweedFS up at {server.s3_endpoint}")
        prog.step("S3 client comparison")
        result.workloads += s3_clients.compare(
            server, CLIENT_BUCKET, s.client_samples, s.reps, prog.log
        )
        _workloads(s, server, root, prog, result)
        _cold_reads(s, server, root, prog, result)
    result.duration_s = time.monotonic() - t0
    return result
