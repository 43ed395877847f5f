"""What every benchmark suite shares: result records, machine facts, progress, suites.

A *suite* (``broker``, ``security``, ``table``, ``storage``, ``cluster``,
``maintenance``) is a module in this package with:

- ``NAME``, ``TITLE``: its command-line name and its section title;
- ``add_arguments(parser)``: its own options (prefixed, so suites can share a parser);
- ``run(args, command) -> SuiteResult``: run the workloads, return the measurements;
- ``render(result, charts) -> list[str]``: its Markdown section (charts already drawn);
- ``charts(result, img_dir) -> list[tuple[str, Path]]``: draw its PNGs, return titles.

``SuiteResult`` is plain data and round-trips through JSON, so the Markdown page is
always rebuilt from ``bench-results/<suite>.json``: running one suite keeps the other
suites' sections as they were.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import json
import multiprocessing
import os
import pickle
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.profile import ProfileSummary

REPO = Path(__file__).resolve().parent.parent
SUITES = ("broker", "security", "table", "storage", "cluster", "maintenance")
"""Every suite the page knows, in page order; a suite whose module is missing is
reported as not available yet."""
NOT_IN_ALL = ("maintenance",)
"""Suites ``all`` (``make bench``) leaves out: the maintenance suite writes a table for
an hour (``make bench-maintenance``)."""


class SuiteUnavailableError(RuntimeError):
    """The suite is declared but its module has not been written yet."""


def load_suite(name: str) -> ModuleType:
    """Import ``benchmarks.<name>``.

    Raises:
        SuiteUnavailableError: the module does not exist (yet).
    """
    try:
        return importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"benchmarks.{name}":
            raise
        raise SuiteUnavailableError(f"the {name!r} benchmark is not available yet") from None


@dataclass
class Workload:
    """Measurements of one workload on one target, one dict of metrics per repetition.

    ``failures`` holds the error of every repetition that did not complete (for
    example an API the target does not implement); they are reported, not hidden.
    """

    key: str
    group: str
    title: str
    target: str
    params: dict[str, Any]
    reps: list[dict[str, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

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

    def median(self, metric: str) -> float | None:
        """The median of ``metric``, or None when no repetition succeeded."""
        return statistics.median(r[metric] for r in self.reps) if self.reps else None


@dataclass
class SuiteResult:
    """Everything a report needs: machine, settings, targets, workloads, profiles."""

    suite: str
    machine: dict[str, str]
    settings: dict[str, Any]
    command: str
    started: str = ""
    duration_s: float = 0.0
    targets: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per target: ``label`` (for tables and charts), ``description``, ``version``."""
    memory: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per target: idle RSS, peak RSS, CPU seconds."""
    workloads: list[Workload] = field(default_factory=list)
    profiles: list[ProfileSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    """Headline numbers a suite derives from its workloads (e.g. after/before ratios),
    kept in the JSON for its readers."""

    def find(self, key: str, target: str) -> Workload | None:
        """The workload ``key`` measured on ``target``, if it ran."""
        return next((w for w in self.workloads if w.key == key and w.target == target), None)

    def to_json(self) -> str:
        """Serialise, adding each workload's summary for readers of the JSON."""
        data = dataclasses.asdict(self)
        for w, out in zip(self.workloads, data["workloads"], strict=True):
            out["summary"] = w.summary()
        return json.dumps(data, indent=2, default=str) + "\n"

    @classmethod
    def from_json(cls, text: str) -> SuiteResult:
        """Read back what ``to_json`` wrote (the summaries are recomputed)."""
        data = json.loads(text)
        workloads = []
        for w in data.pop("workloads"):
            w.pop("summary", None)
            workloads.append(Workload(**w))
        profiles = []
        for p in data.pop("profiles"):
            p["top_self"] = [tuple(x) for x in p["top_self"]]
            p["top_inclusive"] = [tuple(x) for x in p["top_inclusive"]]
            profiles.append(ProfileSummary(**p))
        return cls(**data, workloads=workloads, profiles=profiles)


class Progress:
    """Progress of a long run on stderr: a rich bar over all steps plus log lines.

    Owned by the suite's thread. Without a terminal (CI, pytest) rich prints the log
    lines only, so the output stays readable in logs.
    """

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self.console = Console(stderr=True, log_path=False)
        self._bar = RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._task = self._bar.add_task("bench", total=None)

    def __enter__(self) -> Progress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def total(self, steps: int) -> None:
        """Set the number of steps of the whole run."""
        self._bar.update(self._task, total=steps)

    def step(self, description: str) -> None:
        """One step done; ``description`` names what runs next."""
        self._bar.update(self._task, advance=1, description=description)

    def log(self, message: str) -> None:
        """Print one line above the bar."""
        self.console.log(message)


def progress(message: str) -> None:
    """Print a progress line to stderr when no ``Progress`` bar is at hand."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def git(*args: str) -> str:
    """Run git in the repository; return its stripped stdout ('' on failure)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def src_dirty() -> bool:
    """Whether Floe's code differs from HEAD (a run's own results in bench-results/ and
    docs/ do not count: the suites of one ``floe bench all`` write them as they go)."""
    return bool(git("status", "--porcelain", "--untracked-files=no", "--", "src"))


def floe_version_label() -> str:
    """``floe <commit>`` for the report's version rows, ``-dirty`` when :func:`src_dirty`."""
    commit = git("describe", "--always") or "unknown"
    return f"floe {commit}{'-dirty' if src_dirty() else ''}"


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


def loadavg() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews results."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


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
    return {
        "cpu": model,
        "cores": f"{os.cpu_count()} logical ({len(os.sched_getaffinity(0))} usable)",
        "ram": f"{mem_kib / 1024**2:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "confluent_kafka": str(confluent_kafka.__version__),
        "librdkafka": confluent_kafka.libversion()[0],
        "floe_commit": git("rev-parse", "--short=12", "HEAD")
        + (" (src dirty)" if src_dirty() else ""),
        "data_dir_fs": _mount_of(data_root),
        "loadavg_at_start": loadavg(),
    }


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def portable(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, run in a worker process: an exception the pool cannot pickle back
    (confluent-kafka's ``KafkaException``) is raised as a RuntimeError with its text, so
    the caller sees the error instead of a PicklingError."""
    try:
        return fn(*args)
    except Exception as exc:
        try:
            pickle.dumps(exc)
        except Exception:
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
        raise


@contextmanager
def worker_pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One spawned load-generator process (spawn: no inherited broker state or threads)."""
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
