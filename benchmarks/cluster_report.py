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
SHARED = "3-shared"
SHARE_KEY = "share-join"
FAILOVER_KEY = "failover"
JOIN_KEY = "join"
MEMBER_KILL_KEY = "member-kill"


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
        what = "produce" if key.startswith("produce") else "consume"
        for target, label in ((THREE, "3 brokers (standbys)"), (SHARED, "3 brokers sharing")):
            ratio = _ratio(result, key, target=target)
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
            "| member kill -> first record sent after the kill to its partitions "
            f"acknowledged, s (p50 / max) | {_p50_max(mk, 'produce_s')} |",
        ]
        if "acked" in mk.extra:
            e = mk.extra
            rows.append(
                f"| records acknowledged / lost / written twice (member kills) | "
                f"{int(e['acked']):,} / {int(e['lost']):,} / {int(e['duplicates']):,} |"
            )
    return [*rows, ""]


def _tally(w: Workload) -> str:
    """What the producer of a kill series sent and what the topic held afterwards."""
    e = w.extra
    if "acked" not in e:
        return "The topic was not read back (the run failed before)."
    return (
        f"Producer: {int(e['sent']):,} records sent, {int(e['acked']):,} acknowledged, "
        f"{int(e['delivery_errors']):,} delivery errors; the topic held {int(e['in_topic']):,} "
        f"records: **{int(e['lost']):,} acknowledged records lost, {int(e['duplicates']):,} "
        "written twice**."
    )


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
        _tally(w),
        "",
    ]


def _member_kills(result: SuiteResult) -> list[str]:
    w = result.find(MEMBER_KILL_KEY, SHARED)
    if w is None:
        return ["Not run.", ""]
    rows = [
        "| kill | its partitions led again s | first new ack on them s |",
        "| --- | --- | --- |",
    ]
    rows += [
        f"| {i} | {r['taken_s']:.2f} | {r['produce_s']:.2f} |" for i, r in enumerate(w.reps, 1)
    ]
    return [
        f"{w.title}, on the sharing cluster: a topic of {w.params.get('partitions', '?')} "
        "partitions, two per broker; each kill takes a member (the two in turn) leading "
        "two. *Led again*: from the SIGKILL until the writer's Metadata names a live "
        "leader for both (polled every 20 ms). *First new ack*: to the delivery report of "
        "the first record `produce()`d after the kill to one of them (the producer's "
        "partitioner spreads records over every partition). The member starts again at "
        "once and gets its share back before the next kill.",
        "",
        *rows,
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
    if mk is not None and mk.reps:
        taken = statistics.median(r["taken_s"] for r in mk.reps)
        ack = statistics.median(r["produce_s"] for r in mk.reps)
        lines.append(
            f"- **A member's death** (brokers sharing partitions): the writer leads its "
            f"partitions {taken:.1f} s (p50) after the kill and the first record sent to "
            f"them after the kill is acknowledged at {ack:.1f} s. The writer may fence the "
            "dead member's WAL stream only once its lease has lapsed (the session timeout, "
            f"{s['session_timeout_ms'] / 1000:g} s), then restores the partitions from the "
            "bucket; the other partitions never stop."
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
        "its own bucket prefix and its own SQLite metadata file. The three clusters run "
        "during the throughput case (one loaded at a time, repetitions alternating); the "
        "one-broker cluster is then stopped, the sharing one after its share joins.",
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
        "under the same load, each stopped (SIGTERM) once listed; on the sharing cluster "
        f"as many, each once the topic was spread 3, 3, 2 again, without load.",
        f"- Member kills: on the sharing cluster, the failover producer on a "
        f"{s['kills']}-kill series of its own; per kill {s['steady_s']:g} s of load once "
        "the topic is spread two partitions per broker, SIGKILL to a member's process "
        "group, the timings above, then the member started again at once. At the end the "
        "topic is read back: every acknowledged record must be there once.",
        "",
        "**Producer (throughput)**: the broker suite's settings: "
        + ", ".join(f"`{k}={v}`" for k, v in loadgen.PRODUCER_CONFIG.items()),
        "",
    ]
    return out


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    fo = result.find(FAILOVER_KEY, THREE)
    lines = [*_loss(fo), *_loss(result.find(MEMBER_KILL_KEY, SHARED)), *_machine(result)]
    lines += ["### At a glance", "", *_glance(result)]
    lines += ["### What the numbers say", "", *_reading(result)]
    lines += ["### Failover: kill -9 of the writer", "", *_kills(result)]
    lines += ["### Failover: kill -9 of a member (brokers sharing partitions)", ""]
    lines += _member_kills(result)
    lines += ["### 1 vs 3 brokers", "", *_throughput(result)]
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
