"""Sample the broker with py-spy during a workload and summarise the hot spots.

py-spy is a developer tool, not a Floe dependency: ``pip install py-spy`` into the venv
to enable ``--profile``. It records collapsed stacks (``--format raw``), one line per
distinct stack: ``frame;frame;...;leaf COUNT``, each frame ``function (file:line)``.
Idle samples (threads blocked in epoll, fsync waits in C) are excluded by py-spy, so
percentages are shares of the samples in which Python code was running.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

_RATE_HZ = 500
_STOP_TIMEOUT_S = 30.0
_TOP = 15
_PATH_ANCHORS = re.compile(r"^.*?(?:site-packages/|/src/|/lib/python3\.\d+/)")


@dataclass(frozen=True)
class ProfileSummary:
    """Hot spots of one profiled workload.

    Attributes:
        workload: the workload's key, e.g. ``produce-none-p1``.
        samples: samples with Python code on the stack.
        top_self: (frame, % of samples) where the frame was the leaf, highest first.
        top_inclusive: (Floe frame, % of samples) where it was anywhere on the stack.
        path: the raw collapsed-stack file.
    """

    workload: str
    samples: int
    top_self: list[tuple[str, float]]
    top_inclusive: list[tuple[str, float]]
    path: str


def _short(frame: str) -> str:
    """Shorten the file path inside ``function (path:line)`` to its package-relative tail."""
    name, sep, where = frame.partition(" (")
    return f"{name} ({_PATH_ANCHORS.sub('', where)}" if sep else frame


def summarise(workload: str, path: Path) -> ProfileSummary:
    """Aggregate a py-spy raw (collapsed stacks) file into self and inclusive shares."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = 0
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";")]
        total += count
        self_counts[frames[-1]] += count
        for frame in set(frames):
            incl_counts[frame] += count

    def top(counts: Counter[str]) -> list[tuple[str, float]]:
        return [(f, 100.0 * c / total) for f, c in counts.most_common(_TOP)] if total else []

    # Inclusive shares of library and stdlib frames are mostly the event loop's and the
    # thread pool's entry points: show Floe's own functions only.
    floe_counts = Counter({f: c for f, c in incl_counts.items() if "(floe/" in f})
    return ProfileSummary(workload, total, top(self_counts), top(floe_counts), str(path))


class PySpy:
    """``py-spy record`` attached to one process for the duration of a ``with`` block.

    Owned by the calling thread. Entering starts the sampler; leaving sends SIGINT,
    which makes py-spy write its output file and exit (SIGKILL after a timeout).
    """

    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self._proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def executable() -> str | None:
        """Path of the py-spy binary next to this interpreter or on PATH, if any."""
        local = Path(sys.executable).with_name("py-spy")
        return str(local) if local.exists() else shutil.which("py-spy")

    def __enter__(self) -> PySpy:
        exe = self.executable()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        cmd = [exe, "record", "--format", "raw", "--function", "--nonblocking"]
        cmd += ["--rate", str(_RATE_HZ), "-o", str(self.out), "-p", str(self.pid)]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(_STOP_TIMEOUT_S)

    def summary(self, workload: str) -> ProfileSummary:
        """Summarise the recorded file (call after the ``with`` block)."""
        return summarise(workload, self.out)
