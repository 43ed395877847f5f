"""The ``broker`` benchmark suite: a real ``floe up`` driven by librdkafka.

Layout of one run:

1. start ``floe up`` as a subprocess on a free loopback port in a temporary data dir;
2. read its idle RSS, create the topics;
3. per topic (none and lz4; 1 and 8 partitions): produce (1 KiB values, acks=all),
   consume it from offset 0 (uncompressed topics), optionally profile one more run
   of each with py-spy, delete the topic; then a fixed-rate latency run (also
   profiled);
4. read the RSS again once the broker is idle;
5. always stop the broker (SIGTERM, then SIGKILL after a grace period).

The load generator runs in one separate worker process (``benchmarks.loadgen``), so the
broker's CPU seconds and RSS (read from ``/proc``) are its own.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import loadgen, procfs
from benchmarks.profile import ProfileSummary, PySpy

REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000
"""Throughput is reported in MB/s of record values, 1 MB = 10^6 bytes."""

_UP_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 15.0
_SETTLE_S = 2.0

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    """What to run: sizes, repetitions and where to write.

    Attributes:
        records: records per produce repetition (1 KiB each).
        reps: repetitions of every workload.
        latency_rate: records per second in the latency run.
        latency_seconds: length of one latency repetition.
        seed: seed of the payload generator.
        broker_sets: extra ``--set key=value`` options for ``floe up``.
        profile_dir: where to write py-spy profiles, or None to skip profiling.
        quick: the smoke-test preset was chosen (recorded in the report).
    """

    records: int
    reps: int
    latency_rate: int
    latency_seconds: float
    seed: int
    broker_sets: tuple[str, ...] = ()
    profile_dir: Path | None = None
    quick: bool = False


@dataclass
class Workload:
    """Measurements of one workload, one dict of metrics per repetition."""

    key: str
    group: str
    title: str
    params: dict[str, str | int]
    reps: list[dict[str, float]] = field(default_factory=list)
    stored_ratio: float | None = None
    """On-disk segment bytes per value byte written (produce only): ~1 = uncompressed."""

    def summary(self) -> dict[str, dict[str, float]]:
        """Median, min and max of every metric over the repetitions."""
        names = self.reps[0].keys() if self.reps else []
        return {
            name: {
                "median": statistics.median(r[name] for r in self.reps),
                "min": min(r[name] for r in self.reps),
                "max": max(r[name] for r in self.reps),
            }
            for name in names
        }


@dataclass
class SuiteResult:
    """Everything a report needs: machine, settings, memory, workloads, profiles."""

    machine: dict[str, str]
    settings: Settings
    command: str
    memory: dict[str, float] = field(default_factory=dict)
    workloads: list[Workload] = field(default_factory=list)
    profiles: list[ProfileSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def progress(message: str) -> None:
    """Print a progress line to stderr (stdout stays free for the caller)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class BrokerProcess:
    """A ``floe up`` subprocess with its own data dir; owned by the suite's thread.

    Lifecycle: ``start()`` blocks until the broker prints "is up"; ``stop()`` sends
    SIGTERM and escalates to SIGKILL; it is safe to call ``stop()`` more than once.
    """

    def __init__(self, workdir: Path, sets: tuple[str, ...]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.sets = sets
        self.stdout_path = workdir / "broker.out"
        self.stderr_path = workdir / "broker.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        """The broker's ``data.dir``."""
        return self.workdir / "data"

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string for clients."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The broker's process id.

        Raises:
            RuntimeError: the broker is not running.
        """
        if self._proc is None:
            raise RuntimeError("broker not started")
        return self._proc.pid

    def start(self) -> None:
        """Start the broker and wait until it listens.

        Raises:
            RuntimeError: it exited early or did not come up in time.
        """
        floe = Path(sys.executable).with_name("floe")
        cmd = [str(floe if floe.exists() else shutil.which("floe") or "floe"), "up"]
        cmd += ["--data-dir", str(self.data_dir), "--host", "127.0.0.1"]
        cmd += ["--kafka-port", str(self.port)]
        for item in self.sets:
            cmd += ["--set", item]
        # cwd = workdir so that no ./floe.toml of the caller is picked up.
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self._proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=out, stderr=err)
        deadline = time.monotonic() + _UP_TIMEOUT_S
        while time.monotonic() < deadline:
            if b"is up" in self.stdout_path.read_bytes():
                return
            if self._proc.poll() is not None:
                raise RuntimeError(f"floe up exited with {self._proc.returncode}: {self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"floe up not up after {_UP_TIMEOUT_S}s: {self.tail()}")

    def tail(self, lines: int = 20) -> str:
        """The last lines of the broker's stderr, for error messages."""
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def sample(self) -> procfs.ProcSample:
        """CPU seconds and RSS of the broker process tree."""
        return procfs.sample(self.pid)

    def stop(self) -> int | None:
        """Stop the broker; return its exit code (None if it was never started)."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(_STOP_TIMEOUT_S)
        return self._proc.returncode


def _git(*args: str) -> str:
    """Run git in the repository; return its stripped stdout ('' on failure)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def _mount_of(path: Path) -> str:
    """Filesystem type and device of the mount holding ``path`` (from /proc/mounts)."""
    best, found = "", "unknown"
    target = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        device, mount, fstype = line.split()[:3]
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, found = mount, f"{fstype} ({device} on {mount})"
    return found


def machine_info(data_root: Path) -> dict[str, str]:
    """Describe the machine, interpreter, client library and Floe commit."""
    import confluent_kafka

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")),
        platform.processor() or "unknown",
    )
    mem_kib = next(
        int(ln.split()[1])
        for ln in Path("/proc/meminfo").read_text().splitlines()
        if ln.startswith("MemTotal:")
    )
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "src"))
    return {
        "cpu": model,
        "cores": f"{os.cpu_count()} logical ({len(os.sched_getaffinity(0))} usable)",
        "ram": f"{mem_kib / 1024**2:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": str(confluent_kafka.__version__),
        "librdkafka": confluent_kafka.libversion()[0],
        "floe_commit": _git("rev-parse", "--short=12", "HEAD") + (" (src dirty)" if dirty else ""),
        "data_dir_fs": _mount_of(data_root),
        "loadavg_at_start": _loadavg(),
    }


def _loadavg() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews results."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass(frozen=True)
class BrokerCost:
    """Broker CPU seconds spent during one client call, and its memory right after.

    ``peak_rss_mb`` is the process's high-water mark so far (``VmHWM``): the first
    workload that raises it is the one that needed the memory.
    """

    cpu_s: float
    rss_mb: float
    peak_rss_mb: float


class _Runner:
    """Drives one broker and one load-generator worker; owned by the calling thread."""

    def __init__(self, broker: BrokerProcess, pool: concurrent.futures.Executor) -> None:
        self.broker = broker
        self.pool = pool

    def call(self, fn: Callable[..., T], *args: Any, timeout_s: float) -> tuple[T, BrokerCost]:
        """Run ``fn(*args)`` in the worker; return its result and what it cost the broker.

        Dirty pages of earlier workloads are written back first (``os.sync``) so that
        one workload's writeback does not land in the next one's fsyncs.

        Raises:
            TimeoutError: the worker did not answer within ``timeout_s`` (+ margin).
        """
        os.sync()
        before = self.broker.sample().cpu_seconds
        result = self.pool.submit(fn, *args).result(timeout=timeout_s + 30)
        after = self.broker.sample()
        return result, BrokerCost(
            cpu_s=after.cpu_seconds - before,
            rss_mb=after.rss_bytes / MB,
            peak_rss_mb=after.peak_rss_bytes / MB,
        )


def _timeout_for(records: int) -> float:
    """A generous bound for moving ``records`` 1 KiB records (at least 1 MB/s)."""
    return 60.0 + records * loadgen.VALUE_BYTES / MB


def _produce_spec(
    run: _Runner, s: Settings, *, topic: str, partitions: int, compression: str, seed: int
) -> loadgen.ProduceSpec:
    """A throughput produce of ``s.records`` records to ``topic``."""
    return loadgen.ProduceSpec(
        bootstrap=run.broker.bootstrap,
        topic=topic,
        partitions=partitions,
        records=s.records,
        compression=compression,
        seed=seed,
        timeout_s=_timeout_for(s.records),
    )


def _topic_workloads(
    run: _Runner, s: Settings, result: SuiteResult, compression: str, partitions: int
) -> None:
    """Produce to a fresh topic; if uncompressed, consume it from 0; then delete it.

    Deleting each topic keeps the live data small. On the reference VM, ``write()``
    costs several times more kernel time once a few GB of freshly written files are
    live (seen with repeated identical produce runs), which would otherwise penalise
    whichever workload happens to run last.
    """
    topic = f"bench-{compression}-p{partitions}"
    bootstrap = run.broker.bootstrap
    run.call(
        loadgen.create_topics,
        bootstrap,
        [loadgen.TopicSpec(topic, partitions)],
        30.0,
        timeout_s=30.0,
    )
    produce = Workload(
        key=f"produce-{compression}-p{partitions}",
        group="produce",
        title=f"Produce, {partitions} partition(s), compression {compression}",
        params={"partitions": partitions, "compression": compression, "records": s.records},
    )
    for rep in range(s.reps):
        spec = _produce_spec(
            run, s, topic=topic, partitions=partitions, compression=compression, seed=s.seed + rep
        )
        out, cost = run.call(loadgen.produce, spec, timeout_s=spec.timeout_s)
        produce.reps.append(_transfer_metrics(out, cost))
        progress(f"{produce.key} rep {rep + 1}/{s.reps}: {_describe(produce.reps[-1])}")
    written = s.records * s.reps * loadgen.VALUE_BYTES
    produce.stored_ratio = _stored_bytes(run.broker.data_dir, topic) / written
    result.workloads.append(produce)
    if compression == "none":
        consume = Workload(
            key=f"consume-none-p{partitions}",
            group="consume",
            title=f"Consume, {partitions} partition(s), compression none",
            params={"partitions": partitions, "records": s.records * s.reps},
        )
        cspec = loadgen.ConsumeSpec(bootstrap, topic, partitions, _timeout_for(s.records * s.reps))
        for rep in range(s.reps):
            out, cost = run.call(loadgen.consume, cspec, timeout_s=cspec.timeout_s)
            consume.reps.append(_transfer_metrics(out, cost))
            progress(f"{consume.key} rep {rep + 1}/{s.reps}: {_describe(consume.reps[-1])}")
        result.workloads.append(consume)
        _profiled(run, s, result, name=consume.key, fn=loadgen.consume, spec=cspec)
    if partitions == 1:  # after the consumes, so the extra records are never read
        spec = _produce_spec(
            run, s, topic=topic, partitions=partitions, compression=compression, seed=s.seed
        )
        _profiled(run, s, result, name=produce.key, fn=loadgen.produce, spec=spec)
    run.call(loadgen.delete_topics, bootstrap, [topic], 30.0, timeout_s=30.0)


def _latency_workload(run: _Runner, s: Settings, result: SuiteResult) -> None:
    """Latency percentiles at a fixed, moderate rate, on a fresh 1-partition topic."""
    topic = "bench-latency"
    records = int(s.latency_rate * s.latency_seconds)
    run.call(
        loadgen.create_topics,
        run.broker.bootstrap,
        [loadgen.TopicSpec(topic, 1)],
        30.0,
        timeout_s=30.0,
    )
    w = Workload(
        key="latency-p1",
        group="latency",
        title=f"Produce latency at {s.latency_rate} records/s, 1 partition",
        params={"rate": s.latency_rate, "records": records, "partitions": 1},
    )
    for rep in range(s.reps):
        spec = loadgen.LatencySpec(
            bootstrap=run.broker.bootstrap,
            topic=topic,
            records=records,
            rate=s.latency_rate,
            seed=s.seed + rep,
            timeout_s=_timeout_for(records) + s.latency_seconds,
        )
        out, cost = run.call(loadgen.produce_at_rate, spec, timeout_s=spec.timeout_s)
        lat = sorted(out.latencies_ms)
        w.reps.append(
            {
                "p50_ms": _percentile(lat, 50),
                "p99_ms": _percentile(lat, 99),
                "p999_ms": _percentile(lat, 99.9),
                "max_ms": lat[-1],
                "records_s": records / out.seconds,
                "broker_cpu_s": cost.cpu_s,
                "client_cpu_s": out.client_cpu_s,
                "broker_peak_rss_mb": cost.peak_rss_mb,
                "errors": float(out.errors),
            }
        )
        progress(f"{w.key} rep {rep + 1}/{s.reps}: {_describe(w.reps[-1])}")
    result.workloads.append(w)
    _profiled(run, s, result, name=w.key, fn=loadgen.produce_at_rate, spec=spec)
    run.call(loadgen.delete_topics, run.broker.bootstrap, [topic], 30.0, timeout_s=30.0)


def _profiled(
    run: _Runner,
    s: Settings,
    result: SuiteResult,
    *,
    name: str,
    fn: Callable[[Any], Any],
    spec: loadgen.ProduceSpec | loadgen.ConsumeSpec | loadgen.LatencySpec,
) -> None:
    """Run ``fn(spec)`` once more, unmeasured, with py-spy attached to the broker."""
    if s.profile_dir is None:
        return
    if PySpy.executable() is None:
        note = "py-spy not found next to the interpreter or on PATH: profiling skipped."
        if note not in result.notes:
            result.notes.append(note)
            progress(note)
        return
    s.profile_dir.mkdir(parents=True, exist_ok=True)
    with PySpy(run.broker.pid, s.profile_dir / f"{name}.txt") as spy:
        run.call(fn, spec, timeout_s=spec.timeout_s)
    summary = spy.summary(name)
    result.profiles.append(summary)
    top = summary.top_self[0] if summary.top_self else ("-", 0.0)
    progress(f"profile {name}: {summary.samples} samples, top self {top[0]} {top[1]:.1f}%")


def _stored_bytes(data_dir: Path, topic: str) -> int:
    """Bytes of ``*.log`` segment files in ``<topic>-<partition>`` directories."""
    pattern = re.compile(re.escape(topic) + r"-\d+")
    return sum(
        p.stat().st_size for p in data_dir.rglob("*.log") if pattern.fullmatch(p.parent.name)
    )


def _transfer_metrics(out: loadgen.TransferResult, cost: BrokerCost) -> dict[str, float]:
    """Metrics of one produce or consume repetition."""
    return {
        "mb_s": out.value_bytes / MB / out.seconds,
        "records_s": out.records / out.seconds,
        "seconds": out.seconds,
        "broker_cpu_s": cost.cpu_s,
        "client_cpu_s": out.client_cpu_s,
        "broker_peak_rss_mb": cost.peak_rss_mb,
        "errors": float(out.errors),
    }


def _describe(metrics: dict[str, float]) -> str:
    """One-line rendering of a repetition's metrics for the progress output."""
    return ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


@contextmanager
def _worker_pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One spawned load-generator process (spawn: no inherited broker state or threads)."""
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_suite(settings: Settings, command: str) -> SuiteResult:
    """Run every workload against a fresh broker and return the measurements.

    Raises:
        RuntimeError: the broker failed to start.
        TimeoutError: a workload exceeded its time bound.
    """
    settle = _SETTLE_S / 2 if settings.quick else _SETTLE_S
    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp:
        workdir = Path(tmp)
        result = SuiteResult(machine=machine_info(workdir), settings=settings, command=command)
        broker = BrokerProcess(workdir, settings.broker_sets)
        try:
            progress(f"starting floe up on {broker.bootstrap}, data in {workdir}")
            broker.start()
            time.sleep(settle)
            idle = broker.sample()
            result.memory["idle_rss_start_mb"] = idle.rss_bytes / MB
            result.memory["peak_rss_at_start_mb"] = idle.peak_rss_bytes / MB
            result.memory["startup_cpu_s"] = idle.cpu_seconds
            progress(f"broker pid {broker.pid} up, idle RSS {idle.rss_bytes / MB:.1f} MB")
            with _worker_pool() as pool:
                run = _Runner(broker, pool)
                for compression in ("none", "lz4"):
                    for partitions in (1, 8):
                        _topic_workloads(run, settings, result, compression, partitions)
                _latency_workload(run, settings, result)
                time.sleep(settle)
                after = broker.sample()
                result.memory["idle_rss_after_mb"] = after.rss_bytes / MB
                result.memory["peak_rss_mb"] = after.peak_rss_bytes / MB
                result.memory["total_broker_cpu_s"] = after.cpu_seconds
                progress(
                    f"idle RSS after workloads {after.rss_bytes / MB:.1f} MB, "
                    f"peak {after.peak_rss_bytes / MB:.1f} MB"
                )
                result.machine["loadavg_after_workloads"] = _loadavg()
        finally:
            code = broker.stop()
            progress(f"broker stopped (exit code {code})")
        return result
