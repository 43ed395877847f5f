"""The ``storage`` suite: ``floe up`` on local disk vs ``floe up`` on object storage.

Layout of one run:

1. start SeaweedFS (``floe.testing.seaweed``: ``weed mini`` on 127.0.0.1 free ports)
   with one bucket for the broker and one for the client comparison;
2. the S3 client comparison (``benchmarks.s3_clients``: obstore vs boto3 vs pyarrow,
   same requests, same server), before any broker runs;
3. start two brokers and keep both up for the whole run, loading one at a time:
   ``local`` (the default engine, ``log.flush.policy=acks``: acks=all after an fsync)
   and ``s3`` (``storage.type=s3`` on the SeaweedFS bucket, defaults otherwise: acks=all
   after a group-committed WAL object is in the bucket);
4. the broker suite's method, reused as is (``benchmarks.broker.Runner``): per produce
   case, alternating repetitions, then the topic consumed back from offset 0; then
   produce latency at a fixed moderate rate. Around every repetition on ``s3`` the
   broker's ``/metrics`` is scraped (``floe_s3_requests_total``, ``floe_s3_bytes_total``);
   after a produce repetition the suite waits until the background uploader has turned
   every WAL object into partition objects (no key left under ``wal/``), so each
   repetition is charged with every request its records cost, and the next repetition
   (of either target) does not share the machine with that upload;
5. always stop both brokers, then SeaweedFS.
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

from benchmarks import broker, s3_clients, storage_report
from benchmarks.harness import (
    Progress,
    SuiteResult,
    Workload,
    free_port,
    git,
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
BUCKET = "floe-bench"
PREFIX = "bench"
CLIENT_BUCKET = "s3-clients"

CASES = (
    broker.ProduceCase(1024, "none", "all", 1, consume=True),
    broker.ProduceCase(1024, "none", "all", 8, consume=True),
)
"""The broker suite's base case and its 8-partition variant (where group commit across
partitions matters), each read back."""

COUNTERS = ("puts", "gets", "lists", "deletes", "bytes_put", "bytes_got")
_METRIC = re.compile(r'^floe_s3_(requests|bytes)_total\{(?:operation|direction)="(\w+)"\} (\S+)$')
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
    settle_timeout_s: float = 120.0
    quick: bool = False

    def runner_settings(self) -> broker.Settings:
        """The broker suite's settings for the same sizes (both targets are Floe)."""
        return broker.Settings(
            records=self.records,
            small_records=self.records,
            reps=self.reps,
            latency_rate=self.latency_rate,
            latency_seconds=self.latency_seconds,
            seed=self.seed,
            targets=(LOCAL, S3),
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
        help="broker config for the object-storage target only (repeatable)",
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
        quick=quick,
    )
    if min(s.records, s.reps, s.latency_rate, s.client_samples) < 1 or s.latency_seconds <= 0:
        raise ValueError("records, reps, latency rate and seconds, samples must be positive")
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
        url = f"http://127.0.0.1:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        out = dict.fromkeys(COUNTERS, 0.0)
        for line in text.splitlines():
            m = _METRIC.match(line)
            if m is None:
                continue
            family, label, value = m.groups()
            name = f"{label}s" if family == "requests" else f"bytes_{label}"
            out[name] = float(value)
        return out


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
    """The broker suite's runner, plus bucket accounting around every ``s3`` repetition.

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
        self.s3 = targets[S3]
        self.settle_timeout_s = s.settle_timeout_s
        self._bucket = server.s3_client()

    def repeat(
        self,
        workloads: dict[str, Workload],
        blocked: dict[str, str],
        run_once: Callable[[str, int], dict[str, float]],
    ) -> None:
        def metered(name: str, rep: int) -> dict[str, float]:
            if name != S3:
                return run_once(name, rep)
            w = workloads[name]
            before = self.s3.s3_counters()
            metrics = run_once(name, rep)
            during = _delta(self.s3.s3_counters(), before)
            cpu0 = self.s3.sample().cpu_seconds
            t0 = time.monotonic()
            if w.group != "consume":
                self.settle(everything=False)
            metrics["upload_wait_s"] = time.monotonic() - t0
            metrics["upload_cpu_s"] = self.s3.sample().cpu_seconds - cpu0
            records = metrics.get("records", float(w.params["records"]))
            payload = records * float(w.params["value_bytes"])
            total = _delta(self.s3.s3_counters(), before)
            metrics.update(request_metrics(payload, during, total))
            return metrics

        super().repeat(workloads, blocked, metered)

    def delete(self, topic: str) -> None:
        """Delete on both, then wait until the bucket holds no data of it any more."""
        super().delete(topic)
        self.settle(everything=True)

    def _pending(self, everything: bool) -> int:
        """Objects the uploader still has to deal with (WAL; with ``everything``, data)."""
        prefixes = [f"{PREFIX}/wal/", *([f"{PREFIX}/data/"] if everything else [])]
        return sum(
            int(self._bucket.list_objects_v2(Bucket=BUCKET, Prefix=p, MaxKeys=1)["KeyCount"])
            for p in prefixes
        )

    def settle(self, *, everything: bool) -> None:
        """Wait until no WAL object is left in the bucket (``everything``: no partition
        object either, after a topic deletion) and the request counters stand still."""
        deadline = time.monotonic() + self.settle_timeout_s
        last: dict[str, float] | None = None
        while time.monotonic() < deadline:
            now = self.s3.s3_counters()
            if self._pending(everything) == 0:
                if now == last:
                    return
                last = now
            time.sleep(_SETTLE_POLL_S)
        self.note(
            f"the object-storage broker's uploader did not catch up within "
            f"{self.settle_timeout_s:.0f} s; later requests are charged to the next phase."
        )


def _s3_sets(server: SeaweedServer, extra: tuple[str, ...]) -> tuple[str, ...]:
    return (
        "storage.type=s3",
        f"storage.s3.bucket={BUCKET}",
        f"storage.s3.prefix={PREFIX}",
        f"storage.s3.endpoint={server.s3_endpoint}",
        f"storage.s3.region={server.region}",
        f"storage.s3.access.key.id={server.access_key}",
        f"storage.s3.secret.access.key={server.secret_key}",
        *extra,
    )


def _targets(
    s: Settings, server: SeaweedServer, root: Path
) -> tuple[dict[str, MeteredFloe], dict[str, dict[str, str]]]:
    floe_version = f"floe {git('describe', '--always', '--dirty') or 'unknown'}"
    made = {
        LOCAL: MeteredFloe(LOCAL, root / LOCAL, ("log.flush.policy=acks",)),
        S3: MeteredFloe(S3, root / S3, _s3_sets(server, s.s3_sets)),
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


def _steps(s: Settings) -> int:
    runs = len(CASES) + sum(c.consume for c in CASES) + 1
    return 1 + 2 * s.reps * runs


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the client comparison and every workload on both targets.

    Raises:
        ValueError: bad settings.
        RuntimeError: SeaweedFS or a broker failed to start.
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
        targets, result.targets = _targets(s, server, root)
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
                if target.alive():
                    after = target.sample()
                    result.memory[name] = {
                        "peak_rss_mb": after.peak_rss_bytes / broker.MB,
                        "total_cpu_s": after.cpu_seconds,
                    }
            result.machine["loadavg_after_workloads"] = loadavg()
        finally:
            for name, target in targets.items():
                prog.log(f"{name} stopped (exit code {target.stop()})")
    result.duration_s = time.monotonic() - t0
    return result
