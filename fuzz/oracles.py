"""Verdicts after the frames: descriptors, sentinel latency, broker exceptions.

Each function takes what was measured and returns ``(summary, problems)``: a dict for
the report and a list of failure messages (empty when the oracle is satisfied). The
run records the problems; nothing here touches processes except :func:`settle_fds`,
which polls ``/proc`` until the broker has closed what it should.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuzz.target import ProcSample

SOCKET_SLACK = 2
"""Sockets the broker may hold beyond its baseline at the end (a reaper mid-close)."""


def p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def settle_fds(
    read: Callable[[], ProcSample], baseline: ProcSample, file_slack: int, timeout: float = 20
) -> ProcSample:
    """Poll until sockets are back at the baseline and files within the slack."""
    deadline = time.monotonic() + timeout
    now = read()
    while time.monotonic() < deadline:
        if (
            now.sockets <= baseline.sockets + SOCKET_SLACK
            and now.files <= baseline.files + file_slack
        ):
            break
        time.sleep(0.5)
        now = read()
    return now


def fds(
    baseline: ProcSample, end: ProcSample, peak: int, file_slack: int
) -> tuple[dict[str, Any], list[str]]:
    """Every fuzz connection closed leaves the broker's sockets where they started;
    files (segments, indexes of the topics the run created) stay within the slack."""
    summary = {
        "baseline": baseline.fds,
        "peak": peak,
        "end": end.fds,
        "baseline_sockets": baseline.sockets,
        "end_sockets": end.sockets,
        "end_files": end.files,
        "file_slack": file_slack,
    }
    problems = []
    if end.sockets > baseline.sockets + SOCKET_SLACK:
        problems.append(f"{end.sockets - baseline.sockets} sockets still open after the run")
    if end.files > baseline.files + file_slack:
        problems.append(
            f"{end.files} files open after the run (baseline {baseline.files} + slack {file_slack})"
        )
    return summary, problems


def latency(
    lines: list[dict[str, Any]], since: float, window_s: float, limit_ms: float
) -> tuple[dict[str, Any], list[str]]:
    """The sentinel's produce and end-to-end p99 in every ``window_s`` window from
    ``since`` (before it, the group was still joining) must stay under ``limit_ms``; no
    record may wait five times that for its acknowledgement; no client error."""
    judged = [line for line in lines if not line.get("final") and line["t"] >= since]
    per = max(1, int(window_s))  # the sentinel reports once a second
    problems: list[str] = []
    windows = []
    worst = {"produce": 0.0, "e2e": 0.0}
    for i in range(0, len(judged), per):
        chunk = judged[i : i + per]
        window = []
        for key in ("produce", "e2e"):
            value = p99([x for line in chunk for x in line[f"{key}_ms"]])
            window.append(round(value))
            worst[key] = max(worst[key], value)
            if value > limit_ms:
                problems.append(f"{key} p99 {value:.0f} ms in window {i // per}")
        windows.append(window)
        pending = max((line["pending_oldest_ms"] for line in chunk), default=0)
        if pending > limit_ms * 5:
            problems.append(f"a record waited {pending:.0f} ms for its ack in window {i // per}")
    errors = [e for line in lines for e in line["errors"]]
    if errors:
        problems.append(f"{len(errors)} sentinel client errors, first: {errors[0]}")
    final = next((line for line in lines if line.get("final")), None)
    if final is None:
        problems.append("the sentinel did not finish cleanly")
    summary = {
        "acked": final["acked"] if final else None,
        "consumed": final["consumed"] if final else None,
        "produce_p99_ms": round(p99([x for line in judged for x in line["produce_ms"]]), 1),
        "e2e_p99_ms": round(p99([x for line in judged for x in line["e2e_ms"]]), 1),
        "worst_window_produce_p99_ms": round(worst["produce"], 1),
        "worst_window_e2e_p99_ms": round(worst["e2e"], 1),
        "errors": errors[:10],
        "window_s": per,
        "windows_p99_ms": windows,
    }
    return summary, problems


_FAILED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*request\.failed peer=[\d.]+:(\d+) (.*)$"
)


_CHAINED = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)


@dataclass
class BrokerException:
    """One kind of unexpected exception in the broker's log (by its last line)."""

    error: str
    count: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    seen: list[tuple[int, float]] = field(default_factory=list)
    """(peer port, wall-clock time) of the failed requests, to find their frames."""


def broker_exceptions(log_text: str) -> list[BrokerException]:
    """Unexpected exceptions in the broker's log, most frequent first.

    Each is a failure: a handler that raises logs a traceback per request (a hostile
    client floods the log with them) and closes the connection, where Kafka answers a
    clear error code or closes with one line.
    """
    found: dict[str, BrokerException] = {}
    lines = log_text.splitlines()
    last_failed: tuple[int, float, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _FAILED.match(line)
        if match:
            when = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S")) + int(match[2]) / 1000
            last_failed = (int(match[3]), when, match[4])
        elif line.startswith("Traceback (most recent call last):"):
            i += 1
            while i < len(lines) and lines[i].startswith((" ", "\t")):
                i += 1
            error = lines[i][:160] if i < len(lines) else "?"
            after = i + 1
            while after < len(lines) and not lines[after].strip():
                after += 1
            if after < len(lines) and lines[after].startswith(_CHAINED):
                i = after  # a chained exception: the last traceback of the chain counts
                continue
            entry = found.setdefault(error, BrokerException(error))
            entry.count += 1
            if last_failed is not None:
                entry.requests[last_failed[2]] += 1
                entry.seen.append(last_failed[:2])
            last_failed = None
        elif line[:4].isdigit():  # another log record: the failed request is behind us
            last_failed = None
        i += 1
    return sorted(found.values(), key=lambda e: -e.count)
