"""``kill -9`` a table topic's broker at every phase of its commit rounds, for the
crash tests (``tests/crash/test_kill9_*table_topic.py``): what a kill aims at, the kill
and restart, and the stream through all of them up to the table catching up.

Each kill is aimed at one phase of a round:

* ``writing``: the moment a round's Spark job writes its first Parquet file (before the
  Iceberg commit);
* ``committing``: the moment a new ``*.metadata.json`` appears (the commit is in flight
  or has just landed, and the coordinator has not read it back yet);
* ``committed``: the moment the broker logs ``tabletopic.committed``;
* ``random``: a random delay after the restart (Spark start-up, planning, idle waits).

Spark runs in a JVM child of ``floe up`` (with Python workers under it); after each
kill the helpers also check that none of the dead broker's processes outlives it for
long, so a stray Spark driver cannot commit behind the new broker (measured: they exit
~1-2 s after the broker, the JVM when its stdin pipe closes; no commit has been seen
landing in that window).
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.model import OFFSETS_PROP
from helpers.admin import watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consume
from helpers.cluster import session_members
from helpers.records import Record
from helpers.table_eos import (
    KeyedStream,
    assert_acked_in_topic,
    committed_lines,
    wait_caught_up,
    wait_event,
)

TOPIC = "eos_table"
PARTITIONS = 3
KILLS = int(os.environ.get("FLOE_TABLE_KILLS", "3"))
"""``make test`` kills 3 times per test (writing, committing, committed: once each);
``make crash`` 12 times (every phase, random delays too)."""
TIMEOUT_S = max(900, 150 * KILLS)
"""A crash test's pytest timeout: 12 kills took 4-8.5 min on a 2-core machine running
nothing else (object storage the longer)."""
MARKS = [
    pytest.mark.crash,
    pytest.mark.timeout(TIMEOUT_S),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]
"""The crash tests' ``pytestmark``."""
TABLE_TOPIC = {
    "table.topic.enable": "true",
    "table.topic.commit.interval.ms": "1000",
    "table.topic.convert.value.type": "string",
}
PHASES = ("writing", "committing", "committed", "random")
ORPHAN_GRACE_S = 30.0
"""How long a killed broker's Spark JVM and Python workers may outlive it."""
POLL_S = 0.005

_WRITE_JOB = re.compile(r"^\d+-\d+-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-")


@dataclass
class Kill:
    """What one kill aimed at and what it left behind."""

    phase: str
    after_s: float  # since the broker's port was ready
    survivors: int  # the dead broker's processes (Spark JVM, workers) alive at the kill
    orphan_s: float  # how long the last of them lived on
    late_commits: int  # table commits that landed after the broker was dead
    lingered: tuple[str, ...]  # still alive after ORPHAN_GRACE_S: killed by the test


def table_dir(b: Broker) -> Path:
    return b.data_dir / "warehouse" / "default" / TOPIC


def write_jobs(b: Broker) -> int:
    """Spark writes seen so far (distinct write ids in the data files' names)."""
    try:
        names = os.listdir(table_dir(b) / "data")
    except FileNotFoundError:
        return 0
    return len({m[1] for n in names if (m := _WRITE_JOB.match(n)) and n.endswith(".parquet")})


def metadata_files(b: Broker) -> int:
    try:
        names = os.listdir(table_dir(b) / "metadata")
    except FileNotFoundError:
        return 0
    # version 00000 is the table's creation; later versions are commits
    return sum(
        1 for n in names if n.endswith(".metadata.json") and not n.startswith((".", "00000-"))
    )


def arm(phase: str, b: Broker, rng: random.Random) -> Callable[[], bool]:
    """A predicate that turns true at the moment to kill for ``phase``: the k-th new
    event (k in 1..2, so both cold and warm rounds are hit), or a random delay."""
    if phase == "random":
        at = time.monotonic() + rng.uniform(0.2, 14.0)
        return lambda: time.monotonic() >= at
    count = {"writing": write_jobs, "committing": metadata_files, "committed": committed_lines}[
        phase
    ]
    target = count(b) + rng.randint(1, 2)
    return lambda: count(b) >= target


def kill_and_restart(b: Broker, phase: str, started: float) -> Kill:
    """SIGKILL now, restart at once (as a supervisor would), then wait for the dead
    broker's remaining processes to exit; any still alive after the grace are killed.
    Counts the commits that land after the broker died (by its orphaned Spark driver:
    the new broker's first round needs Spark's ~3 s start, so it cannot be done yet
    unless the orphans lingered)."""
    assert b.proc is not None
    sid = b.proc.pid
    killed_at = time.monotonic()
    b.kill()
    commits_at_kill = metadata_files(b)
    survivors = session_members(sid)
    b.start()
    lingered: list[tuple[int, str]] = []
    while members := session_members(sid):
        if time.monotonic() - killed_at > ORPHAN_GRACE_S:
            lingered = members
            for pid, _ in members:
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    return Kill(
        phase,
        round(killed_at - started, 2),
        len(survivors),
        round(time.monotonic() - killed_at, 2) if survivors else 0.0,
        metadata_files(b) - commits_at_kill,
        tuple(f"{pid} {cmd}" for pid, cmd in lingered),
    )


def catalog_table(b: Broker) -> Any:
    config = load_config(None, {"data.dir": str(b.data_dir)}, environ={})
    settings = cat.CatalogSettings.from_config(config)
    return cat.load_table(cat.load_catalog(settings), "default", TOPIC)


def table_offsets(b: Broker) -> dict[int, int]:
    """The committed ends in the newest floe snapshot (empty before the first commit)."""
    try:
        recorded = cat.read_recorded(catalog_table(b))
    except Exception:  # no table yet
        return {}
    return {int(p): int(o) for p, o in recorded.committed.items()}


def floe_snapshots(b: Broker) -> list[str]:
    """One line per snapshot, oldest first, for failure messages."""
    lines = [
        f"{s.snapshot_id} {s.operation} added={s.summary.get('added-records')} "
        f"commit={s.summary.get('floe.commit-id')} offsets={s.summary.get(OFFSETS_PROP)}"
        for s in cat.snapshots(catalog_table(b))
    ]
    return lines[::-1]


def stream_through_kills(
    b: Broker, stream: KeyedStream
) -> tuple[dict[tuple[int, int], Record], list[Kill]]:
    """Stream to the table topic through ``KILLS`` kills aimed at the round phases, stop
    the producer, wait for the table to reach the log ends; the topic's records (each
    acknowledged one checked) and the kills."""
    rng = random.Random(20261123)
    phases = [PHASES[i % len(PHASES)] for i in range(KILLS)]
    rng.shuffle(phases)
    kills: list[Kill] = []
    stream.thread.start()
    try:
        started = time.monotonic()
        for phase in phases:
            wait_event(arm(phase, b, rng), b, stream, phase, POLL_S)
            kills.append(kill_and_restart(b, phase, started))
            started = time.monotonic()
        acked_before = len(stream.acked)
        deadline = time.monotonic() + 30
        while len(stream.acked) < acked_before + 500:  # the producer survived the last kill
            assert time.monotonic() < deadline, f"no acks after the last restart: {stream.failed}"
            time.sleep(0.05)
    finally:
        stream.stop.set()
        stream.thread.join(150)
    for k in kills:
        print(k)
    print("kills per phase:", dict(Counter(k.phase for k in kills)))
    assert len(kills) == KILLS
    assert not stream.thread.is_alive(), "producer did not finish flushing"
    assert stream.unflushed == 0 and not stream.failed, list(stream.failed.items())[:3]
    assert len(stream.acked) == stream.produced

    # the table catches up with the log end offsets
    ends = {p: high for p, (_, high) in watermarks(b.bootstrap, TOPIC, PARTITIONS).items()}
    wait_caught_up(lambda: table_offsets(b), ends, b)

    log = {(r.partition, r.offset): r for r in confluent_consume(b.bootstrap, TOPIC, ends)}
    assert len(log) == sum(ends.values())
    assert_acked_in_topic(stream, log)
    return log, kills


def stop_cleanly(b: Broker, kills: list[Kill]) -> None:
    """A clean stop after all that, and no Spark process outlives it for long; no
    killed broker's processes outlived it by the grace either."""
    sid = b.proc.pid if b.proc else 0
    b.stop()
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while session_members(sid):
        assert time.monotonic() < deadline, f"left running: {session_members(sid)}"
        time.sleep(0.05)
    lingered = [k for k in kills if k.lingered]
    assert not lingered, f"a killed broker's processes outlived it by {ORPHAN_GRACE_S} s"
