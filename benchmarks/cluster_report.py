"""Markdown section of the ``cluster`` suite (failover, 1 vs 3 brokers, joins).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/cluster.json``).
The cell and machine helpers are the other reports' own, so the sections read alike.
No charts: ten kills fit in a table.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks import loadgen
from benchmarks.broker_report import _keys, _label
from benchmarks.harness import SuiteResult, Workload
from benchmarks.table_report import _cell, _machine

ONE = "1-broker"
THREE = "3-brokers"
FAILOVER_KEY = "failover"
JOIN_KEY = "join"


def _p50_max(w: Workload | None, metric: str) -> str:
    """``p50 / max`` seconds over the repetitions (p50 = median), or why there is none."""
    if w is None:
        return "-"
    values = [r[metric] for r in w.reps if metric in r]
    if not values:
        return "**failed**" if w.failures else "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def _ratio(result: SuiteResult, key: str, metric: str = "mb_s") -> float | None:
    one, three = result.find(key, ONE), result.find(key, THREE)
    a = three.median(metric) if three is not None else None
    b = one.median(metric) if one is not None else None
    return a / b if a is not None and b else None


def _loss(w: Workload | None) -> list[str]:
    """A loud line when an acknowledged record is missing or doubled, else nothing."""
    if w is None or "lost" not in w.extra:
        return []
    lost, dupes = int(w.extra["lost"]), int(w.extra["duplicates"])
    if not lost and not dupes:
        return []
    return [
        f"> **DATA LOSS: {lost:,} acknowledged records were not in the topic afterwards, "
        f"{dupes:,} were written twice.** The failover numbers below are not a result "
        "while this is so.",
        "",
    ]


def _glance(result: SuiteResult) -> list[str]:
    s = result.settings
    fo, join = result.find(FAILOVER_KEY, THREE), result.find(JOIN_KEY, THREE)
    kills = len(fo.reps) if fo is not None else 0
    rows = [
        "| measure | value |",
        "| --- | --- |",
        f"| cluster.session.timeout.ms | {s['session_timeout_ms']:,} |",
        f"| writer kills (kill -9 of its process group) | {kills} of {s['kills']} completed |",
        f"| kill -> new writer serves, s (p50 / max) | {_p50_max(fo, 'port_s')} |",
        "| kill -> first record sent after the kill acknowledged, s (p50 / max) | "
        f"{_p50_max(fo, 'produce_s')} |",
        f"| killed broker restarted -> a standby again, s (p50 / max) | "
        f"{_p50_max(fo, 'rejoin_s')} |",
        f"| new broker started -> a standby, s (p50 / max) | {_p50_max(join, 'standby_s')} |",
        f"| new broker started -> in the writer's Metadata, s (p50 / max) | "
        f"{_p50_max(join, 'metadata_s')} |",
    ]
    if fo is not None and "acked" in fo.extra:
        e = fo.extra
        rows.append(
            f"| records acknowledged / lost / written twice | {int(e['acked']):,} / "
            f"{int(e['lost']):,} / {int(e['duplicates']):,} |"
        )
    for key in _keys(result, "produce") + _keys(result, "consume"):
        ratio = _ratio(result, key)
        what = "produce" if key.startswith("produce") else "consume"
        rows.append(
            f"| {what} MB/s, 3 brokers / 1 broker | "
            + (f"{ratio:.2f}x" if ratio is not None else "n/a")
            + " |"
        )
    return [*rows, ""]


def _kills(result: SuiteResult) -> list[str]:
    w = result.find(FAILOVER_KEY, THREE)
    if w is None:
        return ["Not run.", ""]
    rows = [
        "| kill | serves s | first new ack s | first ack (any record) s | rejoin s |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows += [
        f"| {i} | {r['port_s']:.2f} | {r['produce_s']:.2f} | {r['first_ack_s']:.2f} | "
        f"{r['rejoin_s']:.2f} |"
        for i, r in enumerate(w.reps, 1)
    ]
    e = w.extra
    tally = (
        f"Producer: {int(e['sent']):,} records sent, {int(e['acked']):,} acknowledged, "
        f"{int(e['delivery_errors']):,} delivery errors; the topic held {int(e['in_topic']):,} "
        f"records: **{int(e['lost']):,} acknowledged records lost, {int(e['duplicates']):,} "
        "written twice**."
        if "acked" in e
        else "The topic was not read back (the run failed before)."
    )
    return [
        f"{w.title}. *Serves*: from the SIGKILL to the new writer's admin port accepting "
        "a TCP connection (polled every 20 ms; it opens once the broker serves): the "
        "broker's share. *First new ack*: to the "
        "delivery report of the first record `produce()`d after the kill: what the "
        "application sees, the client's reconnect and metadata refresh included. *First "
        "ack (any record)*: the first delivery report after the kill, usually a record "
        "that was in flight when the writer died. *Rejoin*: from the killed broker's "
        "restart (once a standby served) to its `cluster.standby` log line; it includes "
        "the interpreter's start-up and the wait for its own old registration to expire.",
        "",
        *rows,
        "",
        tally,
        "",
    ]


def _throughput(result: SuiteResult) -> list[str]:
    rows = [
        f"| workload | {_label(result, ONE)} MB/s | {_label(result, THREE)} MB/s | "
        "3 / 1 | broker CPU s/GB, 1 | broker CPU s/GB, 3 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for group in ("produce", "consume"):
        for key in _keys(result, group):
            one, three = result.find(key, ONE), result.find(key, THREE)
            ratio = _ratio(result, key)
            title = next((w.title for w in (one, three) if w is not None), key)
            rows.append(
                f"| {title} | {_cell(one, 'mb_s')} | {_cell(three, 'mb_s')} | "
                + (f"{ratio:.2f}x" if ratio is not None else "n/a")
                + f" | {_cell(one, 'broker_cpu_s_per_gb', 1)} | "
                f"{_cell(three, 'broker_cpu_s_per_gb', 1)} |"
            )
    return [
        "Cells: median (min-max) over the repetitions. The same load (the broker suite's "
        "load generator, confluent-kafka in a separate process) against one broker with "
        "`cluster.metadata.url` and against the three-broker cluster through its full "
        "bootstrap list. Broker CPU counts every member (the standbys renew their leases).",
        "",
        *rows,
        "",
    ]


def _reading(result: SuiteResult) -> list[str]:
    s = result.settings
    fo = result.find(FAILOVER_KEY, THREE)
    lines = []
    if fo is not None and fo.reps:
        port = statistics.median(r["port_s"] for r in fo.reps)
        ack = statistics.median(r["produce_s"] for r in fo.reps)
        lines.append(
            f"- **Failover** takes {ack:.1f} s (p50) from the writer's death to the first "
            f"acknowledged new record with a session timeout of "
            f"{s['session_timeout_ms'] / 1000:g} s: a standby can take the `storage-writer` "
            f"lease only once the dead writer's lease has expired in the store, so the "
            f"session timeout is the floor; the new writer's port opened after {port:.1f} s "
            "(p50), after it restored the tail from the bucket; the rest is the client "
            "finding it (librdkafka's reconnect backoff and metadata refresh). A shorter "
            "session timeout fails over sooner, at the price of more lease renewals and of "
            "a false takeover after a pause that long."
        )
        first, last = fo.reps[0]["port_s"], fo.reps[-1]["port_s"]
        if len(fo.reps) > 2 and last > 1.25 * first:
            lines.append(
                f"- The port-open time grew from {first:.1f} s at the first kill to "
                f"{last:.1f} s at the last, while the topic and the bucket grew under the "
                "steady load: a takeover costs more than the session timeout, and that part "
                "grew over the run (not broken down here)."
            )
    ratios = [r for k in _keys(result, "produce") + _keys(result, "consume")
              if (r := _ratio(result, k)) is not None]  # fmt: skip
    if ratios:
        lines.append(
            "- **1 vs 3 brokers**: "
            + ", ".join(f"{r:.2f}x" for r in ratios)
            + " (produce, consume). Near 1.0x is what the design gives today: one writer "
            "serves every partition of a prefix, so standbys add availability, not "
            "throughput. Partitions do not yet move between live brokers; until they do, "
            "more brokers do not add MB/s (on this 2-core machine they would also share "
            "the same cores)."
            + (
                " A gap of more than 10% from 1.0x here is not the cluster at work: both "
                "targets serve from one writer process, so it is run-to-run noise (compare "
                "the min-max spreads below) or the standbys' share of the machine."
                if any(abs(r - 1) > 0.1 for r in ratios)
                else ""
            )
        )
    lines.append(
        "- **A new broker takes no share**: load sharing is not implemented yet. What is "
        "measured instead is how long a newly started broker takes to register and stand "
        "by, ready to take over (and to appear in the writer's Metadata, where clients "
        "learn about it); most of it is `floe up` starting."
    )
    return [*lines, ""]


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    out = ["| target | how it runs |", "| --- | --- |"]
    out += [f"| {f['label']} | {f['description']} |" for f in result.targets.values()]
    producer = s.get("failover_producer", {})
    out += [
        "",
        "- SeaweedFS (`weed mini`, one process, 127.0.0.1) holds the log; each cluster has "
        "its own bucket prefix and its own SQLite metadata file. Both clusters run during "
        "the throughput case (one loaded at a time, repetitions alternating); the one-broker "
        "cluster is then stopped.",
        f"- Throughput: {s['records']:,} records of 1 KiB per produce repetition (acks=all, "
        f"no compression, {s['partitions']} partitions), read back from offset 0; "
        f"{s['reps']} repetition(s). After each produce repetition the suite waits until "
        "no WAL object is left in the bucket.",
        f"- Failover: {s['rate']:,} records/s of 1 KiB from one idempotent producer (its own "
        "thread in the suite's process) to all three addresses, "
        + ", ".join(f"`{k}={v}`" for k, v in producer.items())
        + f", librdkafka defaults otherwise. Per kill: {s['steady_s']:g} s of load, SIGKILL "
        "to the writer's process group, the timings above; the killed broker is started "
        "again only once a standby serves (earlier, it could take its own lapsed lease "
        "back), and the next kill waits until it stands by. At the end the producer is "
        "flushed and the topic read back from the writer: every acknowledged record must "
        "be there once.",
        f"- Joins: {s['new_brokers']} broker(s) with new node ids started one at a time "
        "under the same load, each stopped (SIGTERM) once listed.",
        "",
        "**Producer (throughput)**: the broker suite's settings: "
        + ", ".join(f"`{k}={v}`" for k, v in loadgen.PRODUCER_CONFIG.items()),
        "",
    ]
    return out


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    fo = result.find(FAILOVER_KEY, THREE)
    lines = [*_loss(fo), *_machine(result)]
    lines += ["### At a glance", "", *_glance(result)]
    lines += ["### What the numbers say", "", *_reading(result)]
    lines += ["### Failover: kill -9 of the writer", "", *_kills(result)]
    lines += ["### 1 vs 3 brokers", "", *_throughput(result)]
    join = result.find(JOIN_KEY, THREE)
    if join is not None:
        lines += [
            "### A new broker joins",
            "",
            f"{join.title}: from `floe up` starting to its `cluster.standby` log line, and "
            f"to the writer's Metadata listing it. p50 / max over {len(join.reps)}: "
            f"{_p50_max(join, 'standby_s')} s and {_p50_max(join, 'metadata_s')} s. It "
            "serves nothing until the writer dies: load sharing is not implemented yet.",
            "",
        ]
    lines += ["### Method", "", *_method(result)]
    if result.memory:
        lines += ["| target | RSS MB after the throughput case (all members) |", "| --- | --- |"]
        lines += [
            f"| {_label(result, t)} | {m.get('rss_mb_after_throughput', 0):,.0f} |"
            for t, m in result.memory.items()
        ]
        lines.append("")
    notes = [
        *(
            f"- {_label(result, w.target)}, {w.title}: {len(w.failures)} failed: "
            f"`{w.failures[0][:300]}`"
            for w in result.workloads
            if w.failures
        ),
        *(f"- {n}" for n in result.notes),
    ]
    if notes:
        lines += ["### Notes", "", *notes, ""]
    return lines


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """None: the section is tables only."""
    return []
