"""The chaos suite's nemeses: faults chosen from a seed, applied to a
:class:`~helpers.chaos_cluster.ChaosCluster` one at a time, each healed before the next.

Kinds (``S`` is the session timeout, 3 s):

* ``kill-now``: kill -9 of a broker (writer or member), restarted at once;
* ``kill-later``: the same, restarted 1-3 S later;
* ``pause``: SIGSTOP of a broker's process group for 0.5-4 S, then SIGCONT;
* ``cut-meta``: one broker's link to the metadata store cut (its proxy resets every
  connection and refuses new ones) for 0.5-4 S, then healed;
* ``cut-s3``: one broker's link to the object store cut the same way;
* ``stall-s3``: the object store stops answering every broker (bytes held back by
  all S3 proxies) for 0.5-3 S;
* ``restart-meta``: the metadata store crashes and restarts (etcd down 0-2 S;
  PostgreSQL ``pg_ctl restart -m immediate``);
* ``clock``: a broker killed and restarted with its wall clock 5-120 s ahead or behind
  (libfaketime) for 2-4 S, then killed and restarted on the true time (skipped when
  libfaketime is not installed).

:func:`schedule` draws the plan from the seed: every kind once, in a random order, then
random kinds; victims and durations are drawn when a fault is applied, from the same
generator, so one seed gives one plan (the run's timing still varies).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from helpers.chaos_cluster import SESSION_S, ChaosBroker, ChaosCluster, faketime_available

KINDS = (
    "kill-now",
    "kill-later",
    "pause",
    "cut-meta",
    "cut-s3",
    "stall-s3",
    "restart-meta",
    "clock",
)


def kinds() -> list[str]:
    """The kinds this machine can inject (``clock`` needs libfaketime)."""
    return [k for k in KINDS if k != "clock" or faketime_available()]


def schedule(rng: random.Random, faults: int) -> list[str]:
    """``faults`` kinds: each available kind once (shuffled) while they last, then
    random ones."""
    every = kinds()
    rng.shuffle(every)
    plan = every[:faults]
    plan += [rng.choice(kinds()) for _ in range(faults - len(plan))]
    return plan


@dataclass
class Fault:
    """One fault as applied: its kind, victim (``None``: the whole store), whether the
    victim was the writer, when it began (time.monotonic()), how long it was held."""

    kind: str
    victim: str | None
    role: str
    started: float
    held_s: float
    detail: str = ""

    def __str__(self) -> str:
        who = f" {self.victim} ({self.role})" if self.victim else ""
        extra = f" {self.detail}" if self.detail else ""
        return f"{self.kind}{who} held {self.held_s:.1f} s{extra}"


def apply(cluster: ChaosCluster, kind: str, rng: random.Random) -> Fault:
    """Inject one fault of ``kind`` and heal it (blocks for the fault's duration); the
    cluster's processes are all running again on return."""
    victim: ChaosBroker = rng.choice(cluster.brokers)
    writer = cluster.writer()
    role = "writer" if writer is victim else "member" if writer is not None else "unknown"
    started = time.monotonic()
    detail = ""
    if kind == "kill-now":
        held = 0.0
        cluster.crash(victim)
        victim.start(wait=False)
    elif kind == "kill-later":
        held = rng.uniform(1, 3) * SESSION_S
        cluster.crash(victim)
        time.sleep(held)
        victim.start(wait=False)
    elif kind == "pause":
        held = rng.uniform(0.5, 4) * SESSION_S
        cluster.freeze(victim)
        time.sleep(held)
        cluster.thaw(victim)
    elif kind in ("cut-meta", "cut-s3"):
        held = rng.uniform(0.5, 4) * SESSION_S
        proxy = victim.meta if kind == "cut-meta" else victim.s3
        assert proxy is not None
        proxy.cut()
        time.sleep(held)
        proxy.heal()
    elif kind == "stall-s3":
        held = rng.uniform(0.5, 3) * SESSION_S
        for b in cluster.brokers:
            assert b.s3 is not None
            b.s3.stall()
        time.sleep(held)
        for b in cluster.brokers:
            assert b.s3 is not None
            b.s3.heal()
        victim, role = None, "store"  # type: ignore[assignment]
    elif kind == "restart-meta":
        down = rng.uniform(0, 2) * SESSION_S if cluster.store.kind == "etcd" else 0.0
        cluster.store.restart(down)
        held = time.monotonic() - started
        victim, role = None, "store"  # type: ignore[assignment]
    elif kind == "clock":
        held = rng.uniform(2, 4) * SESSION_S
        offset = rng.choice([-1, 1]) * rng.uniform(5, 120)
        detail = f"offset {offset:+.0f} s"
        cluster.crash(victim)
        victim.clock_offset_s = offset
        victim.start(wait=False)
        time.sleep(held)
        cluster.crash(victim)
        victim.clock_offset_s = 0.0
        victim.start(wait=False)
    else:
        raise ValueError(f"unknown nemesis {kind}")
    return Fault(kind, str(victim) if victim else None, role, started, held, detail)


def heal_all(cluster: ChaosCluster) -> None:
    """Whatever a failed test left behind: every proxy open, every broker running and
    thawed, on the true time."""
    for b in cluster.brokers:
        for proxy in (b.meta, b.s3):
            if proxy is not None:
                proxy.heal()
        if b.running:
            cluster.thaw(b)
        if b.clock_offset_s:
            cluster.crash(b)
            b.clock_offset_s = 0.0
        if not b.running:
            b.start(wait=False)
