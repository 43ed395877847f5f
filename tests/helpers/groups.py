"""Consumer-group members as child processes, and the checks run on their logs.

:class:`Worker` owns one ``group_worker.py`` child; :func:`workers` cleans every
started worker up (SIGKILL) whatever happens. :func:`check_log` asserts the group
contract on the union of all logs: every record processed, and nothing processed
again once a commit past it had succeeded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

WORKER = Path(__file__).with_name("group_worker.py")


@dataclass(frozen=True)
class Spec:
    """What every member of one test group runs: client, broker, topic, group, where
    logs go, and how long processing one record takes."""

    client: str
    bootstrap: str
    topic: str
    group: str
    tmp: Path
    delay_ms: int = 0


class Worker:
    """One group member process writing its processing log to ``log``."""

    def __init__(self, spec: Spec, log: Path) -> None:
        self.log = log
        args = [spec.client, spec.bootstrap, spec.topic, spec.group, str(log), str(spec.delay_ms)]
        with log.with_suffix(".stderr").open("ab") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def processed(self) -> int:
        return sum(1 for line in self.lines() if line[0] == "P")

    def lines(self) -> list[tuple[str, int, int, int]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                out.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
        return out

    def stop(self) -> None:
        """SIGTERM: the member leaves the group cleanly.

        Raises:
            AssertionError: it did not exit with 0 within 30 s.
        """
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.log.with_suffix(".stderr").read_text()[-2000:]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextmanager
def workers() -> Iterator[list[Worker]]:
    """Yield a list to which :func:`spawn` appends; kills the leftovers at exit."""
    started: list[Worker] = []
    try:
        yield started
    finally:
        for w in started:
            if w.proc.poll() is None:
                w.kill()


def spawn(started: list[Worker], spec: Spec) -> Worker:
    """Start one more member and add it to ``started``."""
    w = Worker(spec, spec.tmp / f"worker{len(started)}.log")
    started.append(w)
    return w


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``cond()`` every 50 ms.

    Raises:
        AssertionError: still false after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def committed(started: list[Worker]) -> dict[int, int]:
    """The highest offset each partition's workers reported as successfully committed."""
    out: dict[int, int] = {}
    for w in started:
        for kind, p, o, _ in w.lines():
            if kind == "C":
                out[p] = max(out.get(p, 0), o)
    return out


def check_log(started: list[Worker], expected: set[tuple[int, int]]) -> int:
    """Assert every expected record was processed and none was processed again after a
    successful commit past it; returns how many re-processings there were (allowed
    only for records whose commit had not succeeded).

    Raises:
        AssertionError: a record is missing or was processed again after its commit.
    """
    events = sorted(
        ((t, kind, p, o) for w in started for kind, p, o, t in w.lines()), key=lambda e: e[0]
    )
    committed: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    again = 0
    for _, kind, p, o in events:
        if kind == "C":
            committed[p] = max(committed.get(p, 0), o)
            continue
        assert o >= committed.get(p, 0), f"partition {p} offset {o} re-processed after commit"
        if (p, o) in seen:
            again += 1
        seen.add((p, o))
    missing = expected - seen
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    return again
