"""The ``broker`` suite: Floe and Tansu side by side, driven by the same librdkafka load.

Layout of one run:

1. download Tansu if needed (``benchmarks.targets.install_tansu``), then start every
   target on its own free 127.0.0.1 port: ``floe up`` with the default durable flush
   policy (``log.flush.policy=acks``), ``floe up`` with ``log.flush.policy=interval``
   (the fastest Floe setting, closest to Tansu's memory storage) and Tansu with memory
   storage. All stay up for the whole run; only one of them is loaded at a time;
2. per produce case (value size, compression, acks, partitions): create the topic on
   every target, run the repetitions alternately (rep r runs the targets in an order
   rotated by r, so no target always goes first), consume the topic back where the
   case says so, optionally profile Floe once more with py-spy, delete the topic;
3. produce latency at a fixed moderate rate, then end-to-end latency (produce ->
   consume) at the same rate, both alternating the same way;
4. always stop every target (SIGTERM, then SIGKILL after a grace period).

The load generator runs in one separate worker process (``benchmarks.loadgen``), so each
broker's CPU seconds and RSS (read from ``/proc``) are its own. A repetition that fails
(an error from the client, an unsupported API, a dead broker) is recorded as a failure
of that target and reported; the run goes on.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import loadgen
from benchmarks.harness import (
    Progress,
    SuiteResult,
    Workload,
    floe_version_label,
    loadavg,
    machine_info,
    percentile,
    portable,
    worker_pool,
)
from benchmarks.profile import PySpy
from benchmarks.targets import (
    DEFAULT_TANSU_CACHE,
    FloeTarget,
    TansuTarget,
    Target,
    install_tansu,
    tansu_version,
)

NAME = "broker"
TITLE = "Broker: Floe vs Tansu"
MB = 1_000_000
"""Throughput is reported in MB/s of record values, 1 MB = 10^6 bytes."""

FLOE = "floe"
FLOE_INTERVAL = "floe-interval"
TANSU = "tansu"
ALL_TARGETS = (FLOE, FLOE_INTERVAL, TANSU)
PROFILED = FLOE_INTERVAL
"""The target py-spy samples: Floe at its fastest, the fair one to set against Tansu."""

_SETTLE_S = 2.0
_ADMIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ProduceCase:
    """One produce workload of the matrix; ``consume`` also reads the topic back."""

    value_bytes: int
    compression: str
    acks: str
    partitions: int
    consume: bool = False

    @property
    def key(self) -> str:
        return f"produce-{self.value_bytes}b-{self.compression}-acks{self.acks}-p{self.partitions}"

    @property
    def title(self) -> str:
        size = "1 KiB" if self.value_bytes == 1024 else f"{self.value_bytes} B"
        return f"{size}, {self.compression}, acks={self.acks}, {self.partitions} partition" + (
            "s" if self.partitions > 1 else ""
        )


PRODUCE_CASES = (
    ProduceCase(1024, "none", "all", 1, consume=True),
    ProduceCase(1024, "none", "all", 8, consume=True),
    ProduceCase(1024, "lz4", "all", 1),
    ProduceCase(1024, "none", "1", 1),
    ProduceCase(100, "none", "all", 1, consume=True),
    ProduceCase(100, "lz4", "all", 8),
)
"""The matrix: a one-factor-at-a-time walk from the base case (1 KiB, no compression,
acks=all, 1 partition) over partitions, compression, acks and value size, plus one
small-record case with both lz4 and 8 partitions. The full product (2^4 = 16 cases x
3 targets x 3 reps) would triple the run time for little extra insight."""


@dataclass(frozen=True)
class Settings:
    """What to run: sizes, repetitions, targets; stored in the JSON as a dict."""

    records: int
    small_records: int
    reps: int
    latency_rate: int
    latency_seconds: float
    seed: int
    targets: tuple[str, ...]
    floe_sets: tuple[str, ...] = ()
    profile_dir: str | None = None
    tansu_cache: str = str(DEFAULT_TANSU_CACHE)
    quick: bool = False

    def records_for(self, case: ProduceCase) -> int:
        return self.records if case.value_bytes >= 1024 else self.small_records

    @classmethod
    def throughput(
        cls, records: int, reps: int, seed: int, targets: tuple[str, ...], quick: bool
    ) -> Settings:
        """The settings of a suite that runs this suite's runner for produce and consume
        throughput only (1 KiB records: no latency workloads, no small records)."""
        return cls(
            records=records,
            small_records=records,
            reps=reps,
            latency_rate=1,
            latency_seconds=1.0,
            seed=seed,
            targets=targets,
            quick=quick,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options (the common ones live in ``benchmarks.__main__``)."""
    g = parser.add_argument_group("broker suite")
    g.add_argument("--records", type=int, help="1 KiB records per produce rep")
    g.add_argument("--small-records", type=int, help="100 B records per produce rep")
    g.add_argument("--latency-seconds", type=float, help="length of one latency rep")
    g.add_argument("--latency-rate", type=int, default=5_000, help="records/s (default 5000)")
    g.add_argument(
        "--targets",
        default=",".join(ALL_TARGETS),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)} (default: all)",
    )
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config passed to both floe targets (repeatable)",
    )
    g.add_argument("--tansu-cache", type=Path, default=DEFAULT_TANSU_CACHE)


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size is not positive or a target is unknown.
    """
    quick = bool(args.quick)
    targets = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    unknown = set(targets) - set(ALL_TARGETS)
    if unknown or not targets:
        raise ValueError(f"unknown targets {sorted(unknown)}; choose from {ALL_TARGETS}")
    s = Settings(
        records=args.records or (20_000 if quick else 500_000),
        small_records=args.small_records or (50_000 if quick else 1_000_000),
        reps=args.reps or (1 if quick else 3),
        latency_rate=args.latency_rate,
        latency_seconds=args.latency_seconds or (1.0 if quick else 10.0),
        seed=args.seed,
        targets=tuple(t for t in ALL_TARGETS if t in targets),
        floe_sets=tuple(args.set),
        profile_dir=str(args.profile) if args.profile else None,
        tansu_cache=str(args.tansu_cache),
        quick=quick,
    )
    if min(s.records, s.small_records, s.reps, s.latency_rate) < 1 or s.latency_seconds <= 0:
        raise ValueError("records, reps, latency rate and seconds must be positive")
    return s


@dataclass(frozen=True)
class BrokerCost:
    """Broker CPU seconds spent during one client call, and its peak RSS right after."""

    cpu_s: float
    peak_rss_mb: float


class _RunError(Exception):
    """One repetition of one target did not complete; the message says why."""


class Runner:
    """Drives the targets and the load-generator worker; owned by the suite's thread."""

    def __init__(
        self,
        targets: dict[str, Target],
        pool: concurrent.futures.Executor,
        prog: Progress,
        result: SuiteResult,
        s: Settings,
    ) -> None:
        self.targets = targets
        self.pool = pool
        self.prog = prog
        self.result = result
        self.s = s

    def order(self, rep: int) -> list[str]:
        """Target names for repetition ``rep``: the list rotated by ``rep``."""
        names = list(self.targets)
        shift = rep % len(names)
        return names[shift:] + names[:shift]

    def call(
        self, name: str, fn: Callable[..., Any], *args: Any, timeout_s: float
    ) -> tuple[Any, BrokerCost]:
        """Run ``fn(*args)`` in the worker against target ``name``; measure its broker.

        Dirty pages of earlier workloads are written back first (``os.sync``) so one
        workload's writeback does not land in the next one's fsyncs.

        Raises:
            _RunError: the broker is down or the client call raised.
            TimeoutError: the worker itself hung past ``timeout_s`` (+ margin).
        """
        target = self.targets[name]
        if not target.alive():
            raise _RunError(f"{name} is not running: {target.tail(3)}")
        os.sync()
        before = target.sample().cpu_seconds
        future = self.pool.submit(portable, fn, *args)
        try:
            out = future.result(timeout=timeout_s + 30)
        except Exception as exc:
            if not future.done():
                raise TimeoutError(f"load generator hung on {name}") from exc
            raise _RunError(f"{type(exc).__name__}: {exc}") from exc
        if not target.alive():
            raise _RunError(f"{name} exited during the run: {target.tail(3)}")
        after = target.sample()
        return out, BrokerCost(after.cpu_seconds - before, after.peak_rss_bytes / MB)

    def admin(self, name: str, fn: Callable[..., Any], *args: Any) -> str | None:
        """Run an admin call (create or delete topics); return the error, if any."""
        try:
            self.call(name, fn, *args, _ADMIN_TIMEOUT_S, timeout_s=_ADMIN_TIMEOUT_S)
        except _RunError as exc:
            return str(exc)
        return None

    def note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)
            self.prog.log(f"note: {text}")

    def repeat(
        self,
        workloads: dict[str, Workload],
        blocked: dict[str, str],
        run_once: Callable[[str, int], dict[str, float]],
    ) -> None:
        """Run every repetition on every target, alternating targets within each rep."""
        for rep in range(self.s.reps):
            for name in self.order(rep):
                w = workloads[name]
                self.prog.step(f"{w.key} {name} rep {rep + 1}/{self.s.reps}")
                if name in blocked:
                    w.failures.append(blocked[name])
                    continue
                try:
                    w.reps.append(run_once(name, rep))
                    self.prog.log(f"{w.key} {name} rep {rep + 1}: {_describe(w.reps[-1])}")
                except _RunError as exc:
                    w.failures.append(str(exc))
                    self.prog.log(f"{w.key} {name} rep {rep + 1} FAILED: {exc}")
        self.result.workloads.extend(workloads.values())

    def workloads(self, key: str, group: str, title: str, **params: Any) -> dict[str, Workload]:
        return {
            name: Workload(key=key, group=group, title=title, target=name, params=params)
            for name in self.targets
        }

    def create(self, topic: str, partitions: int) -> dict[str, str]:
        """Create ``topic`` on every target; return the targets that failed, with why."""
        blocked = {}
        for name in self.targets:
            err = self.admin(
                name, loadgen.create_topics, self.targets[name].bootstrap,
                [loadgen.TopicSpec(topic, partitions)],
            )  # fmt: skip
            if err is not None:
                blocked[name] = f"create topic failed: {err}"
                self.prog.log(f"{name}: {blocked[name]}")
        return blocked

    def delete(self, topic: str) -> None:
        for name in self.targets:
            err = self.admin(name, loadgen.delete_topics, self.targets[name].bootstrap, [topic])
            if err is not None:
                self.note(f"{name}: deleting topic {topic} failed ({err}); its data stays live.")

    def produce_case(self, case: ProduceCase) -> None:
        """Produce, optionally consume back, optionally profile, then delete the topic."""
        s = self.s
        records = s.records_for(case)
        topic = f"bench-{case.key}"
        blocked = self.create(topic, case.partitions)
        produce = self.workloads(
            case.key, "produce", f"Produce {case.title}", records=records,
            value_bytes=case.value_bytes, compression=case.compression, acks=case.acks,
            partitions=case.partitions,
        )  # fmt: skip

        def spec(name: str, seed: int) -> loadgen.ProduceSpec:
            return loadgen.ProduceSpec(
                bootstrap=self.targets[name].bootstrap,
                topic=topic,
                partitions=case.partitions,
                records=records,
                compression=case.compression,
                seed=seed,
                timeout_s=_timeout_for(records * case.value_bytes),
                value_bytes=case.value_bytes,
                acks=case.acks,
            )

        def produce_once(name: str, rep: int) -> dict[str, float]:
            sp = spec(name, s.seed + rep)
            out, cost = self.call(name, loadgen.produce, sp, timeout_s=sp.timeout_s)
            return _transfer_metrics(out, cost)

        self.repeat(produce, blocked, produce_once)
        for name, w in produce.items():
            target = self.targets[name]
            written = sum(r["records"] for r in w.reps) * case.value_bytes
            if isinstance(target, FloeTarget) and written:
                w.extra["stored_ratio"] = _stored_bytes(target.data_dir, topic) / written
        if case.consume:
            self._consume(case, topic, produce, blocked)
        if PROFILED in self.targets and PROFILED not in blocked:
            self._profile(produce[PROFILED].key, loadgen.produce, spec(PROFILED, s.seed))
        self.delete(topic)

    def _consume(
        self,
        case: ProduceCase,
        topic: str,
        produce: dict[str, Workload],
        blocked: dict[str, str],
    ) -> None:
        """Read back what each target acknowledged, by count (see ``high_watermarks``)."""
        key = case.key.replace("produce-", "consume-", 1)
        title = f"Consume {case.title}"
        acked = {name: int(sum(r["records"] for r in w.reps)) for name, w in produce.items()}
        consume = self.workloads(key, "consume", title, value_bytes=case.value_bytes,
                                 partitions=case.partitions)  # fmt: skip
        blocked = dict(blocked)
        for name, count in acked.items():
            consume[name].params["records"] = count
            if count == 0:
                blocked.setdefault(name, "nothing was produced to read back")
                continue
            if name in blocked:
                continue
            try:
                hwm, _ = self.call(
                    name, loadgen.high_watermarks, self.targets[name].bootstrap, topic,
                    case.partitions, _ADMIN_TIMEOUT_S, timeout_s=_ADMIN_TIMEOUT_S,
                )  # fmt: skip
            except _RunError as exc:
                blocked[name] = f"ListOffsets failed: {exc}"
                continue
            if hwm != count:
                self.note(
                    f"{name}: after {count:,} acknowledged records in `{topic}`, ListOffsets "
                    f"(latest) reported a high watermark sum of {hwm:,}. The consumers read "
                    "by record count, so every acknowledged record is read on every target."
                )

        def spec(name: str) -> loadgen.ConsumeSpec:
            bytes_ = acked[name] * case.value_bytes
            return loadgen.ConsumeSpec(
                self.targets[name].bootstrap, topic, case.partitions, _timeout_for(bytes_),
                expected=acked[name],
            )  # fmt: skip

        def consume_once(name: str, _rep: int) -> dict[str, float]:
            sp = spec(name)
            out, cost = self.call(name, loadgen.consume, sp, timeout_s=sp.timeout_s)
            return _transfer_metrics(out, cost)

        self.repeat(consume, blocked, consume_once)
        if PROFILED in self.targets and PROFILED not in blocked:
            self._profile(key, loadgen.consume, spec(PROFILED))

    def latency(self, end_to_end: bool) -> None:
        """Fixed-rate latency, produce -> ack or produce -> consume, on a fresh topic."""
        s = self.s
        records = max(1, int(s.latency_rate * s.latency_seconds))
        key = "e2e-latency-1024b-p1" if end_to_end else "produce-latency-1024b-p1"
        what = "End-to-end latency" if end_to_end else "Produce latency"
        topic = f"bench-{key}"
        fn = loadgen.end_to_end if end_to_end else loadgen.produce_at_rate
        blocked = self.create(topic, 1)
        title = f"{what} at {s.latency_rate:,} records/s, 1 KiB, acks=all, 1 partition"
        workloads = self.workloads(key, "latency", title, rate=s.latency_rate,
                                   records=records, partitions=1, value_bytes=1024)  # fmt: skip

        def spec(name: str, seed: int) -> loadgen.LatencySpec:
            return loadgen.LatencySpec(
                bootstrap=self.targets[name].bootstrap,
                topic=topic,
                records=records,
                rate=s.latency_rate,
                seed=seed,
                timeout_s=_timeout_for(records * 1024) + s.latency_seconds,
            )

        def once(name: str, rep: int) -> dict[str, float]:
            sp = spec(name, s.seed + rep)
            out, cost = self.call(name, fn, sp, timeout_s=sp.timeout_s)
            lat = sorted(out.latencies_ms)
            return {
                "p50_ms": percentile(lat, 50),
                "p99_ms": percentile(lat, 99),
                "p999_ms": percentile(lat, 99.9),
                "max_ms": lat[-1],
                "records_s": records / out.seconds,
                "broker_cpu_s": cost.cpu_s,
                "client_cpu_s": out.client_cpu_s,
                "broker_peak_rss_mb": cost.peak_rss_mb,
                "errors": float(out.errors),
            }

        self.repeat(workloads, blocked, once)
        if PROFILED in self.targets and PROFILED not in blocked:
            self._profile(key, fn, spec(PROFILED, s.seed + 1000))
        self.delete(topic)

    def _profile(self, name: str, fn: Callable[[Any], Any], spec: Any) -> None:
        """Run ``fn(spec)`` once more, unmeasured, with py-spy attached to Floe."""
        if self.s.profile_dir is None:
            return
        self.prog.step(f"profile {name}")
        if PySpy.executable() is None:
            self.note("py-spy not found next to the interpreter or on PATH: profiling skipped.")
            return
        out_dir = Path(self.s.profile_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        with PySpy(self.targets[PROFILED].pid, out_dir / f"{name}.txt") as spy:
            try:
                self.call(PROFILED, fn, spec, timeout_s=spec.timeout_s)
            except _RunError as exc:
                self.note(f"profile run {name} failed: {exc}")
        summary = spy.summary(name)
        self.result.profiles.append(summary)
        top = summary.top_self[0] if summary.top_self else ("-", 0.0)
        self.prog.log(f"profile {name}: {summary.samples} samples, top {top[0]} {top[1]:.1f}%")


def _timeout_for(value_bytes: int) -> float:
    """A generous bound for moving ``value_bytes`` (at least 1 MB/s)."""
    return 60.0 + value_bytes / MB


def _stored_bytes(data_dir: Path, topic: str) -> int:
    """Bytes of ``*.log`` segment files in ``<topic>-<partition>`` directories."""
    pattern = re.compile(re.escape(topic) + r"-\d+")
    return sum(
        p.stat().st_size for p in data_dir.rglob("*.log") if pattern.fullmatch(p.parent.name)
    )


def _transfer_metrics(out: loadgen.TransferResult, cost: BrokerCost) -> dict[str, float]:
    """Metrics of one produce or consume repetition."""
    gb = out.value_bytes / 1e9
    return {
        "mb_s": out.value_bytes / MB / out.seconds,
        "records_s": out.records / out.seconds,
        "records": float(out.records),
        "seconds": out.seconds,
        "broker_cpu_s": cost.cpu_s,
        "broker_cpu_s_per_gb": cost.cpu_s / gb if gb else 0.0,
        "client_cpu_s": out.client_cpu_s,
        "broker_peak_rss_mb": cost.peak_rss_mb,
        "errors": float(out.errors),
    }


def _describe(metrics: dict[str, float]) -> str:
    """One-line rendering of a repetition's metrics for the progress output."""
    keep = ("mb_s", "records_s", "p50_ms", "p99_ms", "broker_cpu_s", "errors")
    return ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k in keep)


def _make_targets(s: Settings, root: Path, prog: Progress) -> tuple[dict[str, Target], dict]:
    """Build the chosen targets (installing Tansu first); return them and their facts."""
    made: dict[str, Target] = {}
    facts: dict[str, dict[str, str]] = {}
    floe_version = floe_version_label()
    for name in s.targets:
        if name == TANSU:
            prog.log(f"installing Tansu into {s.tansu_cache} (cached after the first run)")
            binary = install_tansu(Path(s.tansu_cache))
            made[name] = TansuTarget(name, root / name, binary)
            facts[name] = {
                "label": "Tansu (memory)",
                "description": "tansu broker --storage-engine memory://tansu/ (no disk)",
                "version": tansu_version(binary),
            }
            continue
        policy = "interval" if name == FLOE_INTERVAL else "acks"
        sets = (*s.floe_sets, f"log.flush.policy={policy}")
        made[name] = FloeTarget(name, root / name, sets)
        facts[name] = {
            "label": f"Floe (flush={policy})",
            "description": (
                "floe up, log.flush.policy=acks (default, durable: acks=all answered after "
                "a group-committed fsync)"
                if policy == "acks"
                else "floe up, log.flush.policy=interval (fsync every "
                "log.flush.interval.ms; acks once written to the OS)"
            )
            + (f", --set {' --set '.join(s.floe_sets)}" if s.floe_sets else ""),
            "version": floe_version,
        }
    return made, facts


def _steps(s: Settings, with_profile: bool) -> int:
    """Progress steps of the whole run."""
    n = len(s.targets) * s.reps
    cases = len(PRODUCE_CASES) + sum(c.consume for c in PRODUCE_CASES) + 2
    profiles = cases if with_profile and PROFILED in s.targets else 0
    return n * cases + profiles


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run every workload on every target and return the measurements.

    Raises:
        ValueError: bad settings.
        RuntimeError: a target failed to start or Tansu could not be installed.
        TimeoutError: the load generator hung.
    """
    s = settings_from(args)
    settle = _SETTLE_S / 2 if s.quick else _SETTLE_S
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp, Progress() as prog:
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME,
            machine=machine_info(root),
            settings=asdict(s),
            command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )
        targets: dict[str, Target] = {}
        try:
            targets, result.targets = _make_targets(s, root, prog)
            for name, target in targets.items():
                target.start()
                prog.log(f"{name} up on {target.bootstrap} (pid {target.pid})")
            time.sleep(settle)
            for name, target in targets.items():
                idle = target.sample()
                result.memory[name] = {
                    "idle_rss_start_mb": idle.rss_bytes / MB,
                    "startup_cpu_s": idle.cpu_seconds,
                }
            prog.total(_steps(s, s.profile_dir is not None))
            with worker_pool() as pool:
                runner = Runner(targets, pool, prog, result, s)
                for case in PRODUCE_CASES:
                    runner.produce_case(case)
                runner.latency(end_to_end=False)
                runner.latency(end_to_end=True)
            time.sleep(settle)
            for name, target in targets.items():
                if not target.alive():
                    continue
                after = target.sample()
                result.memory[name]["idle_rss_after_mb"] = after.rss_bytes / MB
                result.memory[name]["peak_rss_mb"] = after.peak_rss_bytes / MB
                result.memory[name]["total_cpu_s"] = after.cpu_seconds
            result.machine["loadavg_after_workloads"] = loadavg()
        finally:
            for name, target in targets.items():
                code = target.stop()
                prog.log(f"{name} stopped (exit code {code})")
    result.duration_s = time.monotonic() - t0
    return result


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's Markdown section (see ``benchmarks.broker_report``)."""
    from benchmarks import broker_report

    return broker_report.render(result, charts, page_dir)


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Draw the suite's PNG charts into ``img_dir``; return (title, path) pairs."""
    from benchmarks import broker_report

    return broker_report.charts(result, img_dir)
