"""The chaos suite's checker: what every client saw against what the partitions finally
hold, in Jepsen's terms for Kafka.

Observations are (partition, offset, value): every producer acknowledgement, every
record a consumer read, and every record of the final reads (each partition read from
its start to its high watermark, twice, after the cluster settled). A finding is:

* ``lost-write``: an acknowledged value that no final read holds;
* ``read-then-lost``: a value a consumer read at an offset the final log does not
  reach or leaves empty (Jepsen's lost write seen by a reader);
* ``inconsistent-offset``: two values at one offset, across any observations;
* ``duplicate``: one value at two offsets (an idempotent producer's retry written
  twice), across any observations;
* ``group-missed``: a value in the final log that the consumer group, which commits
  what it read, never read (a poll skip across a rebalance or failover);
* ``txn-partial``, ``txn-aborted-visible``, ``txn-committed-missing``: a transaction
  partly visible, an aborted one visible, or a committed one absent, to read_committed
  (read once every transaction is decided: a coordinator may write markers after it
  answered EndTxn, as Kafka's do);
* ``txn-undecided``: a partition whose last stable offset stays below its high
  watermark a minute after the producers stopped: a transaction whose markers were
  never written hides everything after it from read_committed consumers;
* ``txn-lost-write``: a transactional record the broker acknowledged at an offset that
  the final read_uncommitted log leaves empty or gives another record, whatever the
  transaction's outcome (an aborted transaction's records stay in the log);
* ``broker-exited``: a broker that exited on its own (the issue's "a broker never exits
  for a race"; the harness restarts it and goes on);
* ``stalled``: a producer acknowledged nothing after the cluster settled (every
  partition took a probe record), although it kept sending: a client the cluster never
  served again, whose later records no check sees (a run found two such producers
  only through the lost writes that preceded their stall).

The summary prints, per nemesis kind: faults, records acknowledged while a fault of
that kind was the latest, and unavailability (from each fault's start to each
producer's next acknowledgement) p50/p99/max.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from helpers.chaos_nemesis import Fault
from helpers.chaos_workload import History, Txn

FinalRead = dict[int, dict[int, str]]
"""One read of a topic: partition -> offset -> value."""
MAX_SHOWN = 12
PROBE = "probe"
"""The client name of the probe records that tell when the cluster settled."""


@dataclass
class Report:
    """The checker's verdict: findings by kind (each a line of evidence) and counts."""

    findings: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, kind: str, line: str) -> None:
        self.findings[kind].append(line)

    @property
    def ok(self) -> bool:
        return not any(self.findings.values())

    def render(self) -> str:
        lines = [f"checked: {self.counts}"]
        for kind, found in sorted(self.findings.items()):
            if found:
                lines.append(f"FINDING {kind}: {len(found)}")
                lines += [f"  {x}" for x in found[:MAX_SHOWN]]
                if len(found) > MAX_SHOWN:
                    lines.append(f"  ... {len(found) - MAX_SHOWN} more")
        if self.notes:
            lines.append(f"client errors (not findings): {len(self.notes)}")
            lines += [f"  {x}" for x in self.notes[:MAX_SHOWN]]
        if self.ok:
            lines.append("no findings")
        return "\n".join(lines)


def _when(t: float, t0: float, faults: list[Fault]) -> str:
    """``t`` relative to the run's start, with the fault last begun before it."""
    latest = [f for f in faults if f.started <= t]
    during = f", after {latest[-1]} (+{t - latest[-1].started:.1f} s)" if latest else ""
    return f"t={t - t0:.1f} s{during}"


def check(
    history: History,
    finals: list[FinalRead],
    faults: list[Fault],
    t0: float,
    *,
    txn_final: FinalRead | None = None,
    txn_log: FinalRead | None = None,
    exits: list[tuple[float, str]] | None = None,
    settled: float | None = None,
    txn_open: dict[int, tuple[int, int]] | None = None,
) -> Report:
    """Judge a run (see the module docstring); ``settled``: when the cluster settled
    after the last heal (None: the stall check is skipped); ``txn_open``: the
    transactional topic's partitions still undecided, as (last stable offset, high
    watermark)."""
    report = Report()
    seen: dict[tuple[int, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)

    def observe(p: int, o: int, v: str, who: str) -> None:
        if o < 0:  # acknowledged without an offset (librdkafka: a duplicate's retry)
            return
        seen[(p, o)][v].append(who)
        where[v].add((p, o))

    for op in history.acks:
        observe(op.partition, op.offset, op.value, f"ack by {op.client} {_when(op.t, t0, faults)}")
    for op in history.reads:
        observe(op.partition, op.offset, op.value, f"read by {op.client} {_when(op.t, t0, faults)}")
    for i, final in enumerate(finals):
        for p, records in final.items():
            for o, v in records.items():
                observe(p, o, v, f"final read {i}")

    final = finals[-1]
    in_final = {v for records in final.values() for v in records.values()}
    for (p, o), values in sorted(seen.items()):
        if len(values) > 1:
            said = "; ".join(f"{v!r} ({', '.join(sorted(set(w))[:3])})" for v, w in values.items())
            report.add("inconsistent-offset", f"p{p} o{o}: {said}")
    for v, places in sorted(where.items()):
        if len(places) > 1:
            report.add("duplicate", f"{v!r} at {sorted(places)}")
    for op in history.acks:
        if op.value not in in_final:
            report.add(
                "lost-write",
                f"{op.value!r} acked at p{op.partition} o{op.offset} by {op.client} "
                f"{_when(op.t, t0, faults)}",
            )
    for op in history.reads:
        if op.offset not in final.get(op.partition, {}):
            report.add(
                "read-then-lost",
                f"{op.value!r} read at p{op.partition} o{op.offset} by {op.client} "
                f"{_when(op.t, t0, faults)}; final log ends at "
                f"{max(final.get(op.partition, {0: ''}), default=-1) + 1}",
            )
    group_read = {op.value for op in history.reads}
    missed = sorted(in_final - group_read)
    for v in missed:
        (p, o), *_ = sorted(where[v])
        report.add("group-missed", f"{v!r} at p{p} o{o}")
    for t, what in exits or []:
        report.add("broker-exited", f"{what} (noticed {_when(t, t0, faults)})")
    if settled is not None:
        for client in history.producers():
            times = history.ack_times(client)
            if client != PROBE and max(times) < settled:
                report.add(
                    "stalled",
                    f"{client}: last acknowledged {_when(max(times), t0, faults)}, nothing "
                    f"after the cluster settled at {_when(settled, t0, faults)}",
                )
    if txn_final is not None:
        _check_txns(report, history.txns, txn_final)
    if txn_log is not None:
        _check_txn_acks(report, history.txns, txn_log)
    for p, (lso, hw) in sorted((txn_open or {}).items()):
        held = (txn_log or {}).get(p, {}).get(lso)
        report.add(
            "txn-undecided",
            f"p{p}: last stable offset {lso} below the high watermark {hw}"
            + (f"; the open transaction's first record there: {held!r}" if held else ""),
        )
    report.notes = [f"{why} ({_when(t, t0, faults)})" for t, why in history.fatal]
    report.counts = {
        "acked": len(history.acks),
        "acked without an offset": sum(1 for op in history.acks if op.offset < 0),
        "read by the group": len(history.reads),
        "in the final log": sum(len(r) for r in final.values()),
        "final reads": len(finals),
        "transactions": len(history.txns),
        "transactional records acked": sum(len(txn.acked) for txn in history.txns),
        "send failures": sum(history.failed.values()),
    }
    return report


def _check_txns(report: Report, txns: list[Txn], final: FinalRead) -> None:
    visible = {v for records in final.values() for v in records.values()}
    for txn in txns:
        values = {v for vs in txn.values.values() for v in vs}
        shown = values & visible
        if txn.outcome == "aborted" and shown:
            report.add("txn-aborted-visible", f"{txn.name}: {sorted(shown)}")
        elif txn.outcome == "committed" and shown != values:
            missing = ", ".join(
                f"{v!r} (acked at p{txn.acked[v][0]} o{txn.acked[v][1]})" if v in txn.acked
                else repr(v)
                for v in sorted(values - shown)
            )  # fmt: skip
            report.add("txn-committed-missing", f"{txn.name}: missing {missing}")
        elif txn.outcome == "unknown" and shown and shown != values:
            report.add("txn-partial", f"{txn.name}: only {sorted(shown)} of {sorted(values)}")


def _check_txn_acks(report: Report, txns: list[Txn], log: FinalRead) -> None:
    for txn in txns:
        for v, (p, o) in sorted(txn.acked.items()):
            there = log.get(p, {}).get(o)
            if there != v:
                held = "nothing" if there is None else repr(there)
                report.add(
                    "txn-lost-write",
                    f"{v!r} of {txn.name} ({txn.outcome}) acked at p{p} o{o}; the log holds {held}",
                )


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(history: History, faults: list[Fault], end: float) -> str:
    """Per nemesis kind: faults, records acknowledged while one of that kind was the
    latest fault, and unavailability windows (fault start to each producer's next
    acknowledgement; a producer with none before ``end`` counts up to ``end``)."""
    producers = [c for c in history.producers() if c != "probe"]  # (only at the end)
    times = {c: sorted(history.ack_times(c)) for c in producers}
    acks = sorted(op.t for op in history.acks)
    rows: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i, f in enumerate(faults):
        until = faults[i + 1].started if i + 1 < len(faults) else end
        rows[f.kind]["records"].append(sum(1 for t in acks if f.started <= t < until))
        for c in producers:
            nxt = next((t for t in times[c] if t > f.started), end)
            rows[f.kind]["gaps"].append(nxt - f.started)
    out = [f"{'nemesis':<14}{'faults':>7}{'records':>9}   unavailable s: p50    p99    max"]
    for kind in sorted(rows):
        gaps, n = rows[kind]["gaps"], len(rows[kind]["records"])
        out.append(
            f"{kind:<14}{n:>7}{int(sum(rows[kind]['records'])):>9}                  "
            f"{statistics.median(gaps):6.2f} {percentile(gaps, 0.99):6.2f} {max(gaps):6.2f}"
        )
    return "\n".join(out)
