"""Markdown section of the ``cluster`` suite (failover, 1 vs 3 brokers, joins).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/cluster.json``).
The cell and machine helpers are the other reports' own, so the sections read alike.
No charts: fifteen kills fit in a table. A JSON from before the four-client failover
load (one confluent-kafka producer, its per-kill metric ``produce_s``) still renders,
saying so.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks import cluster_store, cluster_takeover, loadgen
from benchmarks.broker_report import _keys, _label
from benchmarks.cluster_base import KILLS, ONE, RATE, SESSION_TIMEOUT_MS, SHARED, STEADY_S, THREE
from benchmarks.cluster_failover import (
    FAILOVER_KEY,
    MAX_MARGIN_S,
    MEMBER_KILL_KEY,
    P50_MARGIN_S,
    failover_stats,
)
from benchmarks.cluster_scale import JOIN_KEY, SHARE_KEY
from benchmarks.failover_clients import IN_FLIGHT_S, PRODUCER_CONFIG, WINDOW_S, client_key
from benchmarks.harness import SuiteResult, Workload
from benchmarks.table_report import _cell, _machine

LEGACY_CLIENT = ("confluent-kafka", "produce_s", "")
"""A JSON from before the four-client run: its one client, per-kill metric, tally prefix."""


def _p50_max(w: Workload | None, metric: str) -> str:
    """``p50 / max`` seconds over the repetitions (p50 = median), or why there is none."""
    if w is None:
        return "-"
    values = [r[metric] for r in w.reps if metric in r]
    if not values:
        return "**failed**" if w.failures else "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def _ratio(
    result: SuiteResult, key: str, metric: str = "mb_s", target: str = THREE
) -> float | None:
    """The median of ``target`` over the one-broker cluster's (None: either is missing)."""
    one, three = result.find(key, ONE), result.find(key, target)
    a = three.median(metric) if three is not None else None
    b = one.median(metric) if one is not None else None
    return a / b if a is not None and b else None


def _clients(w: Workload) -> list[tuple[str, str, str]]:
    """(client, per-kill metric, tally prefix) of each producer of a kill series."""
    names = w.params.get("clients")
    if names is None:
        return [LEGACY_CLIENT]
    return [(n, f"{client_key(n)}_s", f"{client_key(n)}.") for n in names]


def _stats(w: Workload, metrics: list[str], session_timeout_ms: int) -> dict[str, float] | None:
    """``failover_stats`` of ``metrics`` pooled over the kills of ``w`` (None: no kill)."""
    values = [r[m] for r in w.reps for m in metrics if m in r]
    return failover_stats(values, session_timeout_ms) if values else None


def _met(stats: dict[str, float], what: str) -> str:
    return "met" if stats[f"{what}_met"] else "**missed**"


def _pooled(w: Workload | None, session_timeout_ms: int) -> str:
    """``p50 / p99 / max`` seconds to the next acknowledgement over every client and
    kill, with the targets' outcome, or why there is none."""
    if w is None:
        return "-"
    stats = _stats(w, [m for _, m, _ in _clients(w)], session_timeout_ms)
    if stats is None:
        return "**failed**" if w.failures else "-"
    return (
        f"{stats['p50_s']:.2f} / {stats['p99_s']:.2f} / {stats['max_s']:.2f} (p50 target "
        f"{_met(stats, 'p50')}, max target {_met(stats, 'max')})"
    )


def _counts(w: Workload, prefix: str) -> tuple[int, int, int] | None:
    """(acknowledged, lost, written twice) of one client, or None: not read back."""
    e = w.extra
    if f"{prefix}acked" not in e:
        return None
    return int(e[f"{prefix}acked"]), int(e[f"{prefix}lost"]), int(e[f"{prefix}duplicates"])


def _loss(w: Workload | None) -> list[str]:
    """A loud line per client with an acknowledged record missing or doubled."""
    if w is None:
        return []
    out = []
    for name, _, prefix in _clients(w):
        counts = _counts(w, prefix)
        if counts is None or not (counts[1] or counts[2]):
            continue
        out += [
            f"> **DATA LOSS ({name}, {w.key}): {counts[1]:,} acknowledged records were not in "
            f"the topic afterwards, {counts[2]:,} were written twice.** The failover numbers "
            "below are not a result while this is so.",
            "",
        ]
    return out


def _totals(w: Workload) -> str:
    """Acknowledged / lost / written twice over every client of a series."""
    counts = [c for _, _, p in _clients(w) if (c := _counts(w, p)) is not None]
    if not counts:
        return "not read back"
    acked, lost, dupes = (sum(c[i] for c in counts) for i in range(3))
    return f"{acked:,} / {lost:,} / {dupes:,}"


def _glance(result: SuiteResult) -> list[str]:
    s = result.settings
    timeout = int(s["session_timeout_ms"])
    fo, join = result.find(FAILOVER_KEY, THREE), result.find(JOIN_KEY, THREE)
    kills = len(fo.reps) if fo is not None else 0
    rows = [
        "| measure | value |",
        "| --- | --- |",
        f"| cluster.session.timeout.ms | {timeout:,} |",
        f"| writer kills (kill -9 of its process group) | {kills} of {s['kills']} completed |",
        f"| kill -> new writer serves, s (p50 / max) | {_p50_max(fo, 'port_s')} |",
        "| kill -> each client's next acknowledgement, all clients, s (p50 / p99 / max) | "
        f"{_pooled(fo, timeout)} |",
        f"| killed broker restarted -> a standby again, s (p50 / max) | "
        f"{_p50_max(fo, 'rejoin_s')} |",
        f"| new broker started -> a standby, s (p50 / max) | {_p50_max(join, 'standby_s')} |",
        f"| new broker started -> in the writer's Metadata, s (p50 / max) | "
        f"{_p50_max(join, 'metadata_s')} |",
    ]
    if fo is not None:
        rows.append(f"| records acknowledged / lost / written twice | {_totals(fo)} |")
    for gkey in _keys(result, "produce") + _keys(result, "consume"):
        what = "produce" if gkey.startswith("produce") else "consume"
        for target, label in ((THREE, "3 brokers (standbys)"), (SHARED, "3 brokers sharing")):
            ratio = _ratio(result, gkey, target=target)
            rows.append(
                f"| {what} MB/s, {label} / 1 broker | "
                + (f"{ratio:.2f}x" if ratio is not None else "n/a")
                + " |"
            )
    share = result.find(SHARE_KEY, SHARED)
    if share is not None:
        rows += [
            f"| new broker started -> leads its share (sharing), s (p50 / max) | "
            f"{_p50_max(share, 'share_s')} |",
            f"| its stop -> its partitions led by the others, s (p50 / max) | "
            f"{_p50_max(share, 'back_s')} |",
        ]
    mk = result.find(MEMBER_KILL_KEY, SHARED)
    if mk is not None:
        rows += [
            f"| member kills (sharing) | {len(mk.reps)} of {s['kills']} completed |",
            f"| member kill -> its partitions led again, s (p50 / max) | "
            f"{_p50_max(mk, 'taken_s')} |",
            "| member kill -> each client's next acknowledgement on its partitions, all "
            f"clients, s (p50 / p99 / max) | {_pooled(mk, timeout)} |",
            f"| records acknowledged / lost / written twice (member kills) | {_totals(mk)} |",
        ]
    return [*rows, ""]


def _targets(result: SuiteResult) -> list[str]:
    """Issue 29's targets per series and client: p50 and max of the seconds from a kill
    to the client's next acknowledgement against the session timeout + 1 s and + 3 s."""
    timeout = int(result.settings["session_timeout_ms"])
    session_s = timeout / 1000
    rows = [
        "| series | client | kills | p50 s | p99 s | max s | p50 <= "
        f"{session_s + P50_MARGIN_S:g} s | max <= {session_s + MAX_MARGIN_S:g} s | "
        "acknowledged | lost | written twice |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for w, series in ((result.find(FAILOVER_KEY, THREE), "writer kills"),
                      (result.find(MEMBER_KILL_KEY, SHARED), "member kills")):  # fmt: skip
        if w is None:
            continue
        clients = _clients(w)
        for name, metric, prefix in [*clients, ("all clients", "", "")]:
            metrics = [m for _, m, _ in clients] if name == "all clients" else [metric]
            stats = _stats(w, metrics, timeout)
            counts = None if name == "all clients" else _counts(w, prefix)
            cells = (
                f"{stats['p50_s']:.2f} | {stats['p99_s']:.2f} | {stats['max_s']:.2f} | "
                f"{_met(stats, 'p50')} | {_met(stats, 'max')}"
                if stats is not None
                else "- | - | - | **failed** | **failed**"
            )
            tally = " | ".join(f"{n:,}" for n in counts) if counts else "- | - | -"
            rows.append(f"| {series} | {name} | {len(w.reps)} | {cells} | {tally} |")
    java = result.settings.get("java", "")
    return [
        f"Issue 29's targets at cluster.session.timeout.ms={timeout:,}: from the SIGKILL "
        f"to each client's next acknowledgement, p50 within the session timeout + "
        f"{P50_MARGIN_S:g} s and max within + {MAX_MARGIN_S:g} s. p99 is the nearest rank "
        "(with fewer than 100 kills, the max). *All clients* pools every client's kills.",
        "",
        *rows,
        "",
        *([f"**The Java client did not run** ({java}).", ""] if java.startswith("absent") else []),
    ]


def _tally(w: Workload) -> str:
    """What each producer of a kill series sent and what the topic held afterwards."""
    e = w.extra
    lines = []
    for name, _, prefix in _clients(w):
        if f"{prefix}acked" not in e:
            return "The topic was not read back (the run failed before)."
        lines.append(
            f"{name}: {int(e[f'{prefix}sent']):,} records sent, "
            f"{int(e[f'{prefix}acked']):,} acknowledged, "
            f"{int(e[f'{prefix}delivery_errors']):,} delivery errors, "
            f"**{int(e[f'{prefix}lost']):,} acknowledged records lost, "
            f"{int(e[f'{prefix}duplicates']):,} written twice**"
        )
    return f"The topic held {int(e['in_topic']):,} records. " + "; ".join(lines) + "."


def _per_kill(w: Workload, first: tuple[str, str], last: tuple[str, str] | None) -> list[str]:
    """One row per kill: ``first`` (title, metric), each client's seconds, ``last``."""
    clients = _clients(w)
    cols = [first, *((f"{n} s", m) for n, m, _ in clients), *([last] if last else [])]
    rows = ["| kill | " + " | ".join(c for c, _ in cols) + " |",
            "| --- |" + " --- |" * len(cols)]  # fmt: skip
    rows += [
        f"| {i} | " + " | ".join(f"{r[m]:.2f}" if m in r else "-" for _, m in cols) + " |"
        for i, r in enumerate(w.reps, 1)
    ]
    return rows


def _next_ack_said(w: Workload) -> str:
    if "clients" not in w.params:
        return (
            "*confluent-kafka s*: to the delivery report of the first record `produce()`d "
            "after the kill (this run had that one producer)."
        )
    return (
        "*<client> s*: to that client's next acknowledgement, the first one read more than "
        f"{IN_FLIGHT_S:g} s after the kill (earlier ones were on their way when the broker "
        "died): what the application sees, the client's reconnect and metadata refresh "
        "included."
    )


def _kills(result: SuiteResult) -> list[str]:
    w = result.find(FAILOVER_KEY, THREE)
    if w is None:
        return ["Not run.", ""]
    return [
        f"{w.title}. *Serves*: from the SIGKILL to the new writer's admin API answering as "
        "the writer's (polled every 20 ms): the broker's share. "
        + _next_ack_said(w)
        + " *Rejoin*: from the killed broker's restart (once a standby served) to its "
        "`cluster.standby` log line; it includes the interpreter's start-up and the wait "
        "for its own old registration to expire.",
        "",
        *_per_kill(w, ("serves s", "port_s"), ("rejoin s", "rejoin_s")),
        "",
        _tally(w),
        "",
    ]


def _member_kills(result: SuiteResult) -> list[str]:
    w = result.find(MEMBER_KILL_KEY, SHARED)
    if w is None:
        return ["Not run.", ""]
    return [
        f"{w.title}, on the sharing cluster: a topic of {w.params.get('partitions', '?')} "
        "partitions, two per broker; each kill takes a member (the two in turn) leading "
        "two. *Led again*: from the SIGKILL until the writer's Metadata names a live "
        "leader for both (polled every 20 ms). "
        + _next_ack_said(w)
        + " Only acknowledgements on the dead member's partitions count (each client's "
        "partitioner spreads records over every partition). The member starts again at "
        "once and gets its share back before the next kill.",
        "",
        *_per_kill(w, ("its partitions led again s", "taken_s"), None),
        "",
        _tally(w),
        "",
    ]


def _throughput(result: SuiteResult) -> list[str]:
    rows = [
        f"| workload | {_label(result, ONE)} MB/s | {_label(result, THREE)} MB/s | "
        f"{_label(result, SHARED)} MB/s | standbys / 1 | sharing / 1 | broker CPU s/GB, 1 | "
        "broker CPU s/GB, standbys | broker CPU s/GB, sharing |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group in ("produce", "consume"):
        for key in _keys(result, group):
            one, three = result.find(key, ONE), result.find(key, THREE)
            shared = result.find(key, SHARED)
            ratios = [_ratio(result, key, target=t) for t in (THREE, SHARED)]
            title = next((w.title for w in (one, three, shared) if w is not None), key)
            rows.append(
                f"| {title} | {_cell(one, 'mb_s')} | {_cell(three, 'mb_s')} | "
                f"{_cell(shared, 'mb_s')} | "
                + " | ".join(f"{r:.2f}x" if r is not None else "n/a" for r in ratios)
                + f" | {_cell(one, 'broker_cpu_s_per_gb', 1)} | "
                f"{_cell(three, 'broker_cpu_s_per_gb', 1)} | "
                f"{_cell(shared, 'broker_cpu_s_per_gb', 1)} |"
            )
    return [
        "Cells: median (min-max) over the repetitions. The same load (the broker suite's "
        "load generator, confluent-kafka in a separate process) against one broker with "
        "`cluster.metadata.url`, against three brokers of which one writes (two standbys), "
        "and against three brokers sharing the partitions (`cluster.share.partitions`: one "
        "of the three partitions each), each through its full bootstrap list. Broker CPU "
        "counts every member.",
        "",
        *rows,
        "",
    ]


def _reading(result: SuiteResult) -> list[str]:
    s = result.settings
    fo = result.find(FAILOVER_KEY, THREE)
    lines = []
    timeout = int(s["session_timeout_ms"])
    ack = _stats(fo, [m for _, m, _ in _clients(fo)], timeout) if fo is not None else None
    if fo is not None and ack is not None:
        port = statistics.median(r["port_s"] for r in fo.reps)
        lines.append(
            f"- **Failover** takes {ack['p50_s']:.1f} s (p50 over every client and kill; "
            f"max {ack['max_s']:.1f} s) from the writer's death to a client's next "
            f"acknowledgement with a session timeout of {s['session_timeout_ms'] / 1000:g} s: "
            "a standby can take the `storage-writer` lease only once the dead writer's lease "
            "has expired in the store, so the session timeout is the floor; the new writer's "
            f"admin API answered after {port:.1f} s (p50), after it restored the tail from "
            "the bucket; the rest is each client finding it (its reconnect backoff and "
            "metadata refresh). A shorter "
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
    for target, who in ((THREE, "standbys"), (SHARED, "sharing")):
        ratios = [r for k in _keys(result, "produce") + _keys(result, "consume")
                  if (r := _ratio(result, k, target=target)) is not None]  # fmt: skip
        if not ratios:
            continue
        said = ", ".join(f"{r:.2f}x" for r in ratios)
        if target == THREE:
            lines.append(
                f"- **1 vs 3 brokers, {who}**: {said} (produce, consume). Near 1.0x is what "
                "standbys give: one writer serves every partition, so they add availability, "
                "not throughput."
                + (
                    " A gap of more than 10% from 1.0x here is not the standbys at work: "
                    "both targets serve from one writer process, so it is run-to-run noise "
                    "(compare the min-max spreads below) or the standbys' share of the "
                    "machine."
                    if any(abs(r - 1) > 0.1 for r in ratios)
                    else ""
                )
            )
        else:
            lines.append(
                f"- **1 vs 3 brokers, {who}**: {said} (produce, consume). Each broker leads "
                "one of the three partitions on its own WAL stream and listener; on this "
                "machine the three share its cores, the S3 server and the load generator "
                "(one broker uses at most about one core: its event loop), so three brokers "
                "here can use the second core and no more; on three machines each would "
                "have its own."
            )
    share = result.find(SHARE_KEY, SHARED)
    if share is not None and share.reps:
        took = statistics.median(r["share_s"] for r in share.reps)
        back = statistics.median(r["back_s"] for r in share.reps)
        lines.append(
            f"- **A new broker takes its share** {took:.1f} s (p50) after `floe up` starts: "
            "it registers, opens its store and reports its load, the writer's balancing "
            "assigns it two partitions, their owners (polling the metadata store every "
            "0.25 s) release them into partition objects and record it as the owner, and it "
            f"opens them; stopped again, its partitions are led by the others {back:.1f} s "
            "later."
        )
    mk = result.find(MEMBER_KILL_KEY, SHARED)
    ack = _stats(mk, [m for _, m, _ in _clients(mk)], timeout) if mk is not None else None
    if mk is not None and ack is not None:
        taken = statistics.median(r["taken_s"] for r in mk.reps)
        lines.append(
            f"- **A member's death** (brokers sharing partitions): the writer leads its "
            f"partitions {taken:.1f} s (p50) after the kill and a client's next "
            f"acknowledgement on them comes at {ack['p50_s']:.1f} s (p50 over every client "
            f"and kill; max {ack['max_s']:.1f} s). The writer may fence the "
            "dead member's WAL stream only once its lease has lapsed (the session timeout, "
            f"{s['session_timeout_ms'] / 1000:g} s), then restores the partitions from the "
            "bucket; the other partitions never stop."
        )
    return [*lines, ""]


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    store = (
        "its own SQLite metadata file"
        if s.get("metadata") == "sqlite"
        else "its own namespace in one etcd (same host)"
    )
    out = ["| target | how it runs |", "| --- | --- |"]
    out += [f"| {f['label']} | {f['description']} |" for f in result.targets.values()]
    out += [
        "",
        "- SeaweedFS (`weed mini`, one process, 127.0.0.1) holds the log; each cluster has "
        f"its own bucket prefix and {store}. The three clusters run "
        "during the throughput case (one loaded at a time, repetitions alternating); the "
        "one-broker cluster is then stopped, the sharing one after its share joins.",
        f"- Throughput: {s['records']:,} records of 1 KiB per produce repetition (acks=all, "
        f"no compression, {s['partitions']} partitions), read back from offset 0; "
        f"{s['reps']} repetition(s). After each produce repetition the suite waits until "
        "no WAL object is left in the bucket.",
        *_failover_method(s),
        f"- Joins: {s['new_brokers']} broker(s) with new node ids started one at a time "
        "under the same load, each stopped (SIGTERM) once listed; on the sharing cluster "
        f"as many, each once the topic was spread 3, 3, 2 again, without load.",
        "",
        "**Producer (throughput)**: the broker suite's settings: "
        + ", ".join(f"`{k}={v}`" for k, v in loadgen.PRODUCER_CONFIG.items()),
        "",
    ]
    return out


def _failover_method(s: dict[str, Any]) -> list[str]:
    """The bullets on the kill series. A JSON from before the four-client run gets today's
    method at its defaults, then a sentence saying how its own results were measured."""
    if "failover_clients" in s:
        return _four_clients(s)
    now = {"rate": RATE, "session_timeout_ms": SESSION_TIMEOUT_MS, "kills": KILLS,
           "steady_s": STEADY_S, "failover_producer": PRODUCER_CONFIG}  # fmt: skip
    return [
        *_four_clients(now),
        "- **The failover results above predate the four-client run**: they come from one "
        f"confluent-kafka producer at {s['rate']:,} records/s of 1 KiB, {s['kills']} writer "
        f"kills and {s['kills']} member kills, {s['steady_s']:g} s of load before each, at "
        f"cluster.session.timeout.ms={s['session_timeout_ms']:,}; the bullets above are "
        "how `floe bench cluster` measures now, at its defaults.",
    ]


def _four_clients(s: dict[str, Any]) -> list[str]:
    """The bullets on the four-client kill series run with settings ``s``."""
    producer = ", ".join(f"`{k}={v}`" for k, v in s.get("failover_producer", {}).items())
    java = s.get("java", "")
    return [
        "- Failover load: four producers at once for the whole of each kill series, each "
        f"idempotent with {producer} and its own defaults otherwise (retries, backoffs, "
        "timeouts), each with values of its own, all given every broker's address: "
        f"confluent-kafka, kafka-python and aiokafka (threads of the suite's process, "
        f"{s['rate']:,} records/s of 1 KiB each, at most {WINDOW_S:g} s' worth "
        "unacknowledged, time waiting at that bound not made up) and Apache's Java "
        "kafka-clients 3.9.1 (a "
        "child JVM running `tests/java/FloeClients.java stream-produce`: one 1 KiB record "
        "every 20 ms, at most 100 unacknowledged)"
        + (f"; **the Java client did not run** ({java})" if java.startswith("absent") else "")
        + f". cluster.session.timeout.ms={s['session_timeout_ms']:,} (the product's default "
        "unless `--cluster-session-timeout-ms` is given); "
        f"{s['kills']} writer kills and {s['kills']} member kills.",
        f"- Writer kills: per kill {s['steady_s']:g} s of load, SIGKILL to the writer's "
        "process group, the timings above; the killed broker is started again only once a "
        "standby serves (earlier, it could take its own lapsed lease back), and the next "
        "kill waits until it stands by.",
        f"- Member kills: on the sharing cluster, a series of its own with its own four "
        f"producers; per kill {s['steady_s']:g} s of load once the topic is spread two "
        "partitions per broker, SIGKILL to a member's process group, the timings above, "
        "then the member started again at once.",
        "- At the end of each series the producers are flushed and stopped and the topic "
        "read back: every record a client had acknowledged must be there exactly once; a "
        "lost or doubled record fails the series and is reported at the top of this section.",
    ]


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    takeover = cluster_takeover.render(result)
    if takeover:
        takeover = ["### Takeover against the bucket's size", "", *takeover]
    if takeover and all(w.key == cluster_takeover.TAKEOVER_KEY for w in result.workloads):
        return [*_machine(result), *takeover]  # --cluster-takeover-only
    fo = result.find(FAILOVER_KEY, THREE)
    lines = [*_loss(fo), *_loss(result.find(MEMBER_KILL_KEY, SHARED)), *_machine(result)]
    lines += ["### At a glance", "", *_glance(result)]
    lines += ["### What the numbers say", "", *_reading(result)]
    lines += ["### Failover against the targets, per client", "", *_targets(result)]
    lines += ["### Failover: kill -9 of the writer", "", *_kills(result)]
    lines += ["### Failover: kill -9 of a member (brokers sharing partitions)", ""]
    lines += _member_kills(result)
    lines += ["### 1 vs 3 brokers", "", *_throughput(result)]
    if store := cluster_store.render(result):
        lines += ["### What each broker asks of the metadata store", "", *store]
    join = result.find(JOIN_KEY, THREE)
    if join is not None:
        lines += [
            "### A new broker joins",
            "",
            f"{join.title}: from `floe up` starting to its `cluster.standby` log line, and "
            f"to the writer's Metadata listing it. p50 / max over {len(join.reps)}: "
            f"{_p50_max(join, 'standby_s')} s and {_p50_max(join, 'metadata_s')} s. A "
            "standby serves nothing until the writer dies.",
            "",
        ]
    share = result.find(SHARE_KEY, SHARED)
    if share is not None:
        lines += [
            "### A new broker takes its share (brokers sharing partitions)",
            "",
            f"{share.title}, three brokers leading 3, 3 and 2 partitions: from `floe up` "
            "starting until the writer's Metadata names it the leader of two, then from its "
            "stop (SIGTERM) until the others lead them again. p50 / max over "
            f"{len(share.reps)}: {_p50_max(share, 'share_s')} s and "
            f"{_p50_max(share, 'back_s')} s.",
            "",
        ]
    lines += takeover
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
