"""CPU time and memory of a process tree, read straight from ``/proc`` (Linux only).

The benchmark measures the broker separately from the load generator, so it needs the
broker's own CPU seconds and resident memory. ``/proc/<pid>/stat`` carries user and
system time in clock ticks; ``/proc/<pid>/status`` carries ``VmRSS`` and ``VmHWM`` in
KiB. Children of the root process (should the broker ever start any) are included so a
multi-process broker is not flattered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process tree.

    Attributes:
        cpu_seconds: user + system CPU time of the root and its live descendants.
        rss_bytes: resident set size (``VmRSS``) summed over the tree.
        peak_rss_bytes: the root process's high-water mark (``VmHWM``).
    """

    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int


def _stat_fields(pid: int) -> list[str]:
    """Return the fields of ``/proc/<pid>/stat`` after the command name.

    The command name sits in parentheses and may contain spaces, so split after the
    last ``)``. Index 0 of the result is field 3 (state) of proc(5).
    """
    text = (_PROC / str(pid) / "stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def _status_kib(pid: int, key: str) -> int:
    """Return a ``kB`` value such as ``VmRSS`` from ``/proc/<pid>/status`` (0 if absent)."""
    for line in (_PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _tree(root: int) -> list[int]:
    """Return ``root`` and its live descendants, found by walking the ppid links."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry.name))[1])
        except (OSError, ValueError):
            continue  # the process ended while we looked
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def sample(root: int) -> ProcSample:
    """Read CPU time and memory of ``root`` and its descendants.

    Raises:
        OSError: ``root`` does not exist (any more).
    """
    cpu_ticks, rss_kib = 0, 0
    for pid in _tree(root):
        try:
            fields = _stat_fields(pid)
            cpu_ticks += int(fields[11]) + int(fields[12])  # utime, stime
            rss_kib += _status_kib(pid, "VmRSS")
        except OSError:
            if pid == root:
                raise
    return ProcSample(
        cpu_seconds=cpu_ticks / _CLK_TCK,
        rss_bytes=rss_kib * 1024,
        peak_rss_bytes=_status_kib(root, "VmHWM") * 1024,
    )
