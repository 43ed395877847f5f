"""The ``cluster`` suite's failover series: kill -9 of the writer, and of a member.

Both series run the four producers of ``benchmarks.failover_clients`` at once for their
whole length (three when no JDK is installed), each sending to every broker's address.
Per kill and per client the measure is the seconds from the SIGKILL to that client's
next acknowledgement (on the dead broker's partitions, for a member kill); the targets
are issue 29's: p50 within the session timeout + 1 s and max within + 3 s.

- Writer kills (:func:`writer_kills`), on the cluster with standbys: per kill
  ``steady_s`` of load, SIGKILL to the writer's process group, the seconds until a
  standby serves (its admin API answers as the writer's) and until each client's next
  acknowledgement; the killed broker is started again once a standby serves (earlier,
  it could take its own lapsed lease back) and the next kill waits until it stands by.
- Member kills (:func:`member_kills`), on the cluster whose brokers share partitions: a
  topic of :data:`MEMBER_PARTITIONS` spread two per broker; per kill a member (the two in
  turn) leading two is killed: the seconds until the writer's Metadata names a live
  leader for both and until each client's next acknowledgement on them; the member
  starts again at once and gets its share back before the next kill.
- At the end of a series (:func:`check`) every producer is flushed and stopped, the
  topic is read back, and every client's acknowledged records must be in it exactly
  once: a lost or doubled record is a failure of the series, reported loudly.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Collection

from benchmarks import cluster_store, loadgen
from benchmarks.cluster_base import (
    PARTITIONS,
    SHARED,
    THREE,
    Cluster,
    Member,
    Settings,
    leaders,
    led,
)
from benchmarks.failover_clients import Client, Load, client_key, read_back, start_clients
from benchmarks.harness import Progress, SuiteResult, Workload

FAILOVER_KEY = "failover"
FAILOVER_TOPIC = "bench-failover"
MEMBER_KILL_KEY = "member-kill"
MEMBER_TOPIC = "bench-member-kill"
MEMBER_PARTITIONS = 6
"""Partitions of the member-kill topic: two per broker of the sharing cluster."""
P50_MARGIN_S = 1.0
MAX_MARGIN_S = 3.0
"""Issue 29's targets: p50 <= session timeout + 1 s, max <= session timeout + 3 s."""
_TAKEOVER_TIMEOUT_S = 60.0
_ACK_TIMEOUT_S = 120.0
_ACK_POLL_S = 0.05


def writer_kills(
    cluster: Cluster, s: Settings, load: Load, prog: Progress, result: SuiteResult
) -> tuple[Workload, list[Client]]:
    """The writer-kill series on ``cluster``; returns its workload and the producers,
    still running (the joins run under their load before :func:`check`)."""
    loadgen.create_topics(
        cluster.writer().bootstrap, [loadgen.TopicSpec(FAILOVER_TOPIC, PARTITIONS)], 30
    )
    clients = start_clients(load, cluster.bootstrap, FAILOVER_TOPIC)
    w = _workload(
        FAILOVER_KEY, THREE, "Kill -9 of the writer", s, clients=clients, partitions=PARTITIONS
    )
    result.workloads.append(w)
    for k in range(1, s.kills + 1):
        prog.step(f"failover: kill {k}/{s.kills}")
        time.sleep(s.steady_s)
        try:
            writer = cluster.writer()
            _raise_if_failed(clients)
            killed = time.monotonic()
            writer.crash()
            new = cluster.writer(exclude=writer, timeout_s=_TAKEOVER_TIMEOUT_S)
            port_s = time.monotonic() - killed
            writer.launch()  # only now: started earlier it could take its lapsed lease back
            rep = _after_kill(clients, killed, restarted=writer)
        except RuntimeError as exc:
            w.failures.append(str(exc))
            prog.log(f"kill {k} FAILED: {exc}")
            break
        w.reps.append({"port_s": port_s, **rep})
        prog.log(
            f"kill {k}: broker {writer.node_id} -> {new.node_id}; port open after "
            f"{port_s:.2f} s; next ack {_acks_said(clients, rep)}; killed broker a standby "
            f"again {rep['rejoin_s']:.2f} s after its restart"
        )
    return w, clients


def member_kills(
    cluster: Cluster,
    s: Settings,
    load: Load,
    prog: Progress,
    result: SuiteResult,
    *,
    store: bool = False,
) -> None:
    """The member-kill series on ``cluster`` (brokers sharing partitions), then
    :func:`check` of its topic; with ``store``, the metadata store's load under the
    series' producers first (:func:`benchmarks.cluster_store.measure`)."""
    from confluent_kafka.admin import AdminClient

    writer = cluster.writer()
    admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
    spec = loadgen.TopicSpec(MEMBER_TOPIC, MEMBER_PARTITIONS)
    loadgen.create_topics(writer.bootstrap, [spec], 30)
    clients = start_clients(load, cluster.bootstrap, MEMBER_TOPIC)
    what = "Kill -9 of a member leading partitions"
    w = _workload(MEMBER_KILL_KEY, SHARED, what, s, clients=clients, partitions=MEMBER_PARTITIONS)
    result.workloads.append(w)
    members = [m for m in cluster.members if m is not writer]
    three = {m.node_id for m in cluster.members}
    try:
        for k in range(1, s.kills + 1):
            prog.step(f"member kill {k}/{s.kills}")
            writer.wait(
                "spread the topic over the three",
                lambda: led(admin, MEMBER_TOPIC) == dict.fromkeys(three, 2),
            )
            time.sleep(s.steady_s)
            if store and k == 1:
                cluster_store.measure(cluster, "load", prog, result)
            _raise_if_failed(clients)
            victim = members[k % len(members)]
            parts = {p for p, b in leaders(admin, MEMBER_TOPIC).items() if b == victim.node_id}
            killed = time.monotonic()
            victim.crash()
            taken_s = writer.wait(
                "lead the dead member's partitions",
                functools.partial(_led_elsewhere, admin, parts, victim.node_id),
            )
            victim.launch()
            rep = _after_kill(clients, killed, partitions=parts)
            w.reps.append({"taken_s": taken_s, **rep})
            prog.log(
                f"member kill {k}: broker {victim.node_id}'s partitions {sorted(parts)} led "
                f"again after {taken_s:.2f} s; next ack on them {_acks_said(clients, rep)}"
            )
    except RuntimeError as exc:
        w.failures.append(str(exc))
        prog.log(f"member kills FAILED: {exc}")
    finally:
        check(w, clients, s, prog, result)


def _workload(
    wkey: str, target: str, what: str, s: Settings, *, clients: list[Client], partitions: int
) -> Workload:
    names = ", ".join(c.name for c in clients)
    return Workload(
        key=wkey, group="failover", target=target,
        title=f"{what} under {len(clients)} producers ({names}; 1 KiB, acks=all, idempotent)",
        params={"kills": s.kills, "rate": s.rate, "session_timeout_ms": s.session_timeout_ms,
                "steady_s": s.steady_s, "partitions": partitions,
                "clients": [c.name for c in clients]},
    )  # fmt: skip


def _raise_if_failed(clients: list[Client]) -> None:
    """Fail the series when a producer stopped with an error.

    Raises:
        RuntimeError: one did.
    """
    failed = [f"{c.name}: {c.error}" for c in clients if c.error is not None]
    if failed:
        raise RuntimeError(f"a failover producer failed: {'; '.join(failed)}")


def _after_kill(
    clients: list[Client], killed: float, partitions: Collection[int] | None = None,
    restarted: Member | None = None,
) -> dict[str, float]:  # fmt: skip
    """Wait for every client's next acknowledgement after ``killed`` (to one of
    ``partitions`` if given) and, if given, for ``restarted`` (launched now) to stand by;
    returns ``<client>_s`` seconds from the kill and ``rejoin_s`` from the launch.

    Raises:
        RuntimeError: something did not happen within ``_ACK_TIMEOUT_S`` of the kill, the
            restarted broker exited, or a producer failed.
    """
    launched = time.monotonic()
    out: dict[str, float] = {}
    waiting = list(clients)
    while waiting or (restarted is not None and "rejoin_s" not in out):
        now = time.monotonic()
        for c in list(waiting):
            at = c.next_ack(killed, partitions)
            if at is not None:
                out[f"{client_key(c.name)}_s"] = at - killed
                waiting.remove(c)
        if restarted is not None and "rejoin_s" not in out:
            if restarted.standing_by():
                out["rejoin_s"] = now - launched
            elif not restarted.alive():
                raise RuntimeError(f"{restarted.name} exited after its restart: "
                                   f"{restarted.tail()}")  # fmt: skip
        _raise_if_failed(clients)
        if now - killed > _ACK_TIMEOUT_S:
            what = ", ".join(c.name for c in waiting) or "the restarted broker"
            raise RuntimeError(f"{what}: nothing within {_ACK_TIMEOUT_S:g} s of the kill")
        time.sleep(_ACK_POLL_S)
    return out


def _acks_said(clients: list[Client], rep: dict[str, float]) -> str:
    return ", ".join(f"{c.name} {rep[f'{client_key(c.name)}_s']:.2f} s" for c in clients)


def _led_elsewhere(admin: object, partitions: Collection[int], dead: int) -> bool:
    """Whether the writer's Metadata names a live leader other than ``dead`` for each of
    the member-kill topic's ``partitions``."""
    now = leaders(admin, MEMBER_TOPIC)
    return all(now.get(p, -1) not in (-1, dead) for p in partitions)


def check(
    w: Workload, clients: list[Client], s: Settings, prog: Progress, result: SuiteResult
) -> None:
    """Stop the producers (flushed), read the topic back, record per client what was sent,
    acknowledged, lost and written twice in ``w.extra``, and the failover times against
    the targets in ``result.figures``. A loss, a duplicate or a producer that did not
    flush is a failure of ``w`` and a note, also logged."""
    prog.step(f"read back the {w.key} topic")
    topic = clients[0].topic
    stopped = time.monotonic()
    for c in clients:  # all at once: a client still sending would outlast the others' flush
        c.stop()
    done = []
    for c in clients:
        c.finish()
        done.append(f"{c.name} {time.monotonic() - stopped:.1f} s")
    prog.log(f"{w.key}: the producers stopped; flushed (one after the other) after "
             + ", ".join(done))  # fmt: skip
    seen = read_back(clients[0].bootstrap, topic, int(w.params["partitions"]))
    w.extra["in_topic"] = float(sum(seen.values()))
    w.extra["unknown"] = float(sum(n for (name, _), n in seen.items() if name == "?"))
    for c in clients:
        mine = {i: n for (name, i), n in seen.items() if name == c.name}
        lost = len(c.acked.keys() - mine.keys())
        dupes = sum(n - 1 for n in mine.values() if n > 1)
        k = client_key(c.name)
        w.extra.update({
            f"{k}.sent": float(c.sent), f"{k}.acked": float(len(c.acked)),
            f"{k}.delivery_errors": float(c.errors), f"{k}.lost": float(lost),
            f"{k}.duplicates": float(dupes),
        })  # fmt: skip
        prog.log(f"{w.key} read back, {c.name}: {c.sent:,} sent, {len(c.acked):,} "
                 f"acknowledged, {lost:,} lost, {dupes:,} written twice")  # fmt: skip
        problems = []
        if lost or dupes:
            problems.append(f"DATA LOSS: {lost:,} acknowledged records missing and "
                            f"{dupes:,} written twice in `{topic}`")  # fmt: skip
        if c.error is not None:
            problems.append(f"the producer failed: {c.error}")
        for problem in problems:
            w.failures.append(f"{c.name}: {problem}")
            result.notes.append(f"{c.name}, {w.key}: {problem}.")
            prog.log(f"{w.key} FAILED, {c.name}: {problem}")
    result.figures.update(failover_figures(w, [c.name for c in clients], s.session_timeout_ms))


def failover_figures(
    w: Workload, clients: list[str], session_timeout_ms: int
) -> dict[str, dict[str, float]]:
    """:func:`failover_stats` of each client of ``w`` (``<key>.<client>``) and of all of
    them pooled (``<key>.all``); a client with no completed kill has no entry."""
    pooled: list[float] = []
    out = {}
    for name in clients:
        values = [r[f"{client_key(name)}_s"] for r in w.reps if f"{client_key(name)}_s" in r]
        pooled += values
        if values:
            out[f"{w.key}.{name}"] = failover_stats(values, session_timeout_ms)
    if pooled:
        out[f"{w.key}.all"] = failover_stats(pooled, session_timeout_ms)
    return out


def failover_stats(values: list[float], session_timeout_ms: int) -> dict[str, float]:
    """Seconds from a kill to the next acknowledgement (``values``, not empty): p50, p99
    (nearest rank), max, their count, the session timeout, issue 29's targets and
    whether each is met (1.0 or 0.0)."""
    session_s = session_timeout_ms / 1000
    ranked = sorted(values)
    p50, top = statistics.median(ranked), ranked[-1]
    return {
        "p50_s": p50, "p99_s": ranked[math.ceil(0.99 * len(ranked)) - 1], "max_s": top,
        "count": float(len(ranked)), "session_timeout_ms": float(session_timeout_ms),
        "target_p50_s": session_s + P50_MARGIN_S, "target_max_s": session_s + MAX_MARGIN_S,
        "p50_met": float(p50 <= session_s + P50_MARGIN_S),
        "max_met": float(top <= session_s + MAX_MARGIN_S),
    }  # fmt: skip
