"""Markdown section and charts of the ``broker`` suite (Floe vs Tansu).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/broker.json``):
the page can be rebuilt without rerunning anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from benchmarks import loadgen
from benchmarks.charts import Series, grouped_bars
from benchmarks.harness import SuiteResult, Workload

BASELINE = "tansu"
PROFILED = "floe-interval"
PRODUCE_TARGET_MB_S = 100.0
CONSUME_TARGET_MB_S = 200.0
IDLE_RSS_TARGET_MB = 150.0

_LOWER_IS_BETTER = {"p50_ms", "p99_ms", "p999_ms", "max_ms"}


def _keys(result: SuiteResult, group: str) -> list[str]:
    """Workload keys of ``group`` in run order, each once."""
    seen: dict[str, None] = {}
    for w in result.workloads:
        if w.group == group:
            seen.setdefault(w.key, None)
    return list(seen)


def _title(result: SuiteResult, key: str) -> str:
    return next(w.title for w in result.workloads if w.key == key)


def _label(result: SuiteResult, target: str) -> str:
    return result.targets.get(target, {}).get("label", target)


def _floe_targets(result: SuiteResult) -> list[str]:
    return [t for t in result.targets if t != BASELINE]


def _cell(w: Workload | None, metric: str, digits: int = 1) -> str:
    """``median (min-max)``, the value for one repetition, or why there is none."""
    if w is None:
        return "-"
    if not w.reps:
        return "**failed**" if w.failures else "-"
    s = w.summary()[metric]
    text = f"{s['median']:,.{digits}f}"
    if len(w.reps) > 1:
        text += f" ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"
    if w.failures:
        text += f" [{len(w.failures)} failed]"
    return text


def _ratio(floe: Workload | None, base: Workload | None, metric: str) -> str:
    """Floe median / Tansu median; bold when Floe is better."""
    if floe is None or base is None:
        return "-"
    f, b = floe.median(metric), base.median(metric)
    if f is None or b is None or b == 0:
        return "n/a"
    ratio = f / b
    better = ratio < 1 if metric in _LOWER_IS_BETTER else ratio > 1
    return f"**{ratio:.2f}x**" if better else f"{ratio:.2f}x"


def _cores_busy(w: Workload) -> float | None:
    """Broker CPU seconds per wall second of the run (1.0 = one core saturated)."""
    if not w.reps:
        return None
    if "seconds" in w.reps[0]:
        values = sorted(r["broker_cpu_s"] / r["seconds"] for r in w.reps)
    else:
        records = float(w.params["records"])
        values = sorted(r["broker_cpu_s"] * r["records_s"] / records for r in w.reps)
    return values[len(values) // 2]


def _summary(result: SuiteResult) -> list[str]:
    floes = _floe_targets(result)
    head = ["workload", "metric", _label(result, BASELINE)]
    for t in floes:
        head += [_label(result, t), f"{_label(result, t)} / Tansu"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    plan = [(k, "mb_s", "MB/s", 1) for k in _keys(result, "produce")]
    plan += [(k, "mb_s", "MB/s", 1) for k in _keys(result, "consume")]
    for k in _keys(result, "latency"):
        plan += [(k, "p50_ms", "p50 ms", 2), (k, "p99_ms", "p99 ms", 2)]
    for key, metric, label, digits in plan:
        base = result.find(key, BASELINE)
        cells = [_title(result, key), label, _cell(base, metric, digits)]
        for t in floes:
            w = result.find(key, t)
            cells += [_cell(w, metric, digits), _ratio(w, base, metric)]
        rows.append("| " + " | ".join(cells) + " |")
    return [
        "Ratios are Floe median / Tansu median. For MB/s above 1 means Floe is faster (the "
        "records/s ratio is the same number: both targets move the same records); for "
        "latency below 1 means Floe is faster. Bold: Floe is better.",
        "",
        *rows,
        "",
    ]


def _transfer_tables(result: SuiteResult, group: str) -> list[str]:
    out: list[str] = []
    for key in _keys(result, group):
        w0 = next(w for w in result.workloads if w.key == key)
        stored = any("stored_ratio" in (result.find(key, t) or w0).extra for t in result.targets)
        out += [f"#### {w0.title}", ""]
        head = "| target | MB/s | records/s | broker CPU s | broker CPU s/GB | broker cores busy "
        head += "| client CPU s | broker peak RSS MB |"
        head += " on-disk / value bytes |" if stored else ""
        out += [head, "|" + " --- |" * (8 + stored)]
        for t in result.targets:
            w = result.find(key, t)
            if w is None:
                continue
            busy = _cores_busy(w)
            ratio = w.extra.get("stored_ratio")
            out.append(
                f"| {_label(result, t)} | {_cell(w, 'mb_s')} | {_cell(w, 'records_s', 0)} | "
                f"{_cell(w, 'broker_cpu_s', 2)} | {_cell(w, 'broker_cpu_s_per_gb', 2)} | "
                f"{'-' if busy is None else f'{busy:.2f}'} | {_cell(w, 'client_cpu_s', 2)} | "
                f"{_cell(w, 'broker_peak_rss_mb', 0)} |"
                + ((f" {ratio:.2f} |" if ratio is not None else " - |") if stored else "")
            )
        recs = w0.params.get("records")
        out += ["", f"Records per repetition: {recs:,}." if isinstance(recs, int) else "", ""]
        out += _failures(result, key)
    return out


def _latency_tables(result: SuiteResult) -> list[str]:
    out: list[str] = []
    for key in _keys(result, "latency"):
        out += [f"#### {_title(result, key)}", ""]
        out += [
            "| target | p50 ms | p99 ms | p99.9 ms | max ms | achieved records/s "
            "| broker CPU s | broker cores busy |",
            "|" + " --- |" * 8,
        ]
        for t in result.targets:
            w = result.find(key, t)
            if w is None:
                continue
            busy = _cores_busy(w)
            out.append(
                f"| {_label(result, t)} | {_cell(w, 'p50_ms', 2)} | {_cell(w, 'p99_ms', 2)} | "
                f"{_cell(w, 'p999_ms', 2)} | {_cell(w, 'max_ms', 1)} | "
                f"{_cell(w, 'records_s', 0)} | {_cell(w, 'broker_cpu_s', 2)} | "
                f"{'-' if busy is None else f'{busy:.2f}'} |"
            )
        out += ["", *_failures(result, key)]
    return out


def _failures(result: SuiteResult, key: str) -> list[str]:
    lines = []
    for t in result.targets:
        w = result.find(key, t)
        if w is not None and w.failures:
            lines.append(
                f"- {_label(result, t)}: {len(w.failures)} repetition(s) failed: "
                f"`{w.failures[0][:300]}`"
            )
    errors = sum(r["errors"] for w in result.workloads if w.key == key for r in w.reps)
    if errors:
        lines.append(f"- Delivery or fetch errors reported by the client: {errors:.0f}.")
    return [*lines, ""] if lines else []


def _shortfalls(result: SuiteResult) -> list[str]:
    """Workloads where the fastest Floe setting is worse than Tansu, with evidence."""
    if BASELINE not in result.targets or PROFILED not in result.targets:
        return []
    profiles = {p.workload: p for p in result.profiles}
    lines: list[str] = []
    plan = [(k, "mb_s") for g in ("produce", "consume") for k in _keys(result, g)]
    plan += [(k, "p99_ms") for k in _keys(result, "latency")]
    for key, metric in plan:
        floe, base = result.find(key, PROFILED), result.find(key, BASELINE)
        if floe is None or base is None:
            continue
        f, b = floe.median(metric), base.median(metric)
        if f is None or b is None or b == 0:
            continue
        worse = f > b if metric in _LOWER_IS_BETTER else f < b
        if not worse:
            continue
        unit = "ms p99" if metric == "p99_ms" else "MB/s"
        fb, bb = _cores_busy(floe), _cores_busy(base)
        text = (
            f"- **{_title(result, key)}**: {_label(result, PROFILED)} {f:,.1f} {unit} vs "
            f"Tansu {b:,.1f} ({f / b:.2f}x)."
        )
        if fb is not None and bb is not None:
            text += (
                f" Broker cores busy: Floe {fb:.2f}, Tansu {bb:.2f} (Floe serves every "
                "connection from one Python event loop, so about 1.0 is its ceiling; Tansu "
                "runs native code on several threads)."
            )
        prof = profiles.get(key)
        if prof is not None and prof.top_self:
            top = ", ".join(f"`{fn}` {pct:.0f}%" for fn, pct in prof.top_self[:4])
            text += f" py-spy self time: {top}."
        lines.append(text)
    if not lines:
        return ["No workload where Floe (flush=interval) is behind Tansu in this run.", ""]
    return [
        "Measured against Floe's fastest setting (the durable default also waits for an "
        "fsync before answering acks=all). How to read the evidence: Floe runs all "
        "connections on one uvloop event loop in one Python thread, so its broker can use "
        "at most about one core while Tansu (Rust, tokio) spreads work over all of them; "
        "*cores busy* near 1.0 for Floe means that ceiling was the limit. In the py-spy "
        "shares, `Runner.run` as a leaf is time inside uvloop's compiled loop (socket "
        "reads and writes, callback scheduling: no Python frame below it), "
        "`StreamWriter.writelines`/`StreamReader.*` are response and request I/O, "
        "`Segment.write` is the log append and `fsync_tickets` the flush bookkeeping.",
        "",
        *lines,
        "",
    ]


def _client_bound(result: SuiteResult) -> list[str]:
    """Workloads where the load generator, not the broker, was likely the limit."""
    found = []
    for key in [*_keys(result, "produce"), *_keys(result, "consume")]:
        busy = []
        for t in result.targets:
            w = result.find(key, t)
            if w is not None and w.reps:
                values = sorted(r["client_cpu_s"] / r["seconds"] for r in w.reps)
                busy.append(values[len(values) // 2])
        if busy and min(busy) >= 0.9:
            found.append(f"`{key}` ({min(busy):.2f}-{max(busy):.2f})")
    if not found:
        return []
    return [
        "The load generator used about one core or more (client CPU s / wall s) on every "
        "target in " + ", ".join(found) + ": librdkafka's Python `produce()`/`consume()` "
        "loop is then likely the limit, and a ratio near 1 says little about the brokers."
    ]


def _goals(result: SuiteResult) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    rows = ["| goal (Floe, flush=acks) | measured | status |", "| --- | --- | --- |"]
    for key, label, target in (
        ("produce-1024b-none-acksall-p1", "produce 1 KiB, 1 partition, acks=all", 100.0),
        ("consume-1024b-none-acksall-p1", "consume 1 KiB, 1 partition", 200.0),
    ):
        w = result.find(key, "floe")
        median = w.median("mb_s") if w is not None else None
        if median is not None:
            rows.append(
                f"| {label} >= {target:.0f} MB/s | {median:.1f} MB/s | "
                f"{verdict(median >= target)} |"
            )
    mem = result.memory.get("floe", {})
    for k, label in (("idle_rss_start_mb", "after start"), ("idle_rss_after_mb", "after load")):
        if k in mem:
            rows.append(
                f"| idle RSS {label} <= {IDLE_RSS_TARGET_MB:.0f} MB | {mem[k]:.1f} MB | "
                f"{verdict(mem[k] <= IDLE_RSS_TARGET_MB)} |"
            )
    return [*rows, ""] if len(rows) > 2 else []


def _config_table(title: str, config: dict[str, str | int]) -> list[str]:
    rows = [f"**{title}**", "", "| setting | value |", "| --- | --- |"]
    rows += [f"| `{k}` | `{v}` |" for k, v in config.items()]
    return [*rows, ""]


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    out = ["| target | version | how it runs |", "| --- | --- | --- |"]
    out += [
        f"| {f['label']} | {f['version']} | {f['description']} |" for f in result.targets.values()
    ]
    out += [
        "",
        "- Every target is a subprocess on its own free 127.0.0.1 port; all run for the whole "
        "suite, and only one is loaded at a time. Each workload runs its repetitions "
        "alternately on every target (repetition r starts with a different target each "
        "time), so slow drift of the machine hits all targets alike.",
        "- The load generator is confluent-kafka (librdkafka) in one separate, spawned "
        "process. Broker CPU seconds (user + system) and RSS come from `/proc/<pid>/stat` "
        "and `/proc/<pid>/status` of that target only, measured around each whole client "
        "call (including connection setup). *Cores busy* = broker CPU s / wall s. Client and "
        "brokers share the machine's cores.",
        f"- Values: {', '.join(sorted({str(w.params['value_bytes']) for w in result.workloads}))}"
        " bytes, no key, half seeded random bytes and half text, 1024 distinct values cycled "
        f"(lz4 ratio about 2:1). Seed {s['seed']} (+ repetition index). Records go "
        "round-robin over the partitions.",
        f"- Produce: {s['records']:,} records of 1 KiB or {s['small_records']:,} of 100 B per "
        "repetition into one topic per case; MB/s counts value bytes (1 MB = 10^6 B) from the "
        "first `produce()` to the end of `flush()`. Consume reads every acknowledged record "
        "of the case's topic back from offset 0 (`assign()` to last record; on Floe the data "
        "is likely in the page cache, Tansu keeps it in memory). Topics are deleted after "
        "each case.",
        "- Matrix (one factor at a time from 1 KiB / none / acks=all / 1 partition, plus one "
        "100 B lz4 8-partition case; the full 16-case product was left out for time): "
        + "; ".join(f"`{k}`" for k in _keys(result, "produce"))
        + ".",
        f"- Latency: {s['latency_rate']:,} records/s for {s['latency_seconds']:g} s per "
        "repetition. Produce latency runs from `produce()` to the delivery callback; "
        "end-to-end latency from `produce()` to the record's arrival in a consumer polling "
        "the same partition in the same thread (1 ms ticks).",
        f"- {s['reps']} repetition(s) per workload; cells show median (min-max).",
        "",
    ]
    out += _config_table("Producer (throughput; `compression.type` and `acks` per case)",
                         loadgen.PRODUCER_CONFIG)  # fmt: skip
    out += _config_table("Producer (latency)", loadgen.LATENCY_PRODUCER_CONFIG)
    out += _config_table("Consumer (throughput)", loadgen.CONSUMER_CONFIG)
    out += _config_table("Consumer (end-to-end latency)", loadgen.E2E_CONSUMER_CONFIG)
    return out


def _profiles(result: SuiteResult) -> list[str]:
    if not result.profiles:
        return []
    out = [
        f"Extra, unmeasured runs on {_label(result, PROFILED)} with `py-spy record --format raw "
        "--function --nonblocking` attached. Shares are of samples with Python code running "
        "(py-spy drops idle samples, e.g. threads waiting in epoll). *Self* = the frame was "
        "the leaf; *inclusive* = a Floe function was anywhere on the stack. `Runner.run` as "
        "a leaf is uvloop's compiled event loop, which has no Python frames of its own.",
        "",
    ]
    for p in result.profiles:
        out += [f"#### {p.workload} ({p.samples:,} samples)", ""]
        out += ["| self % | function (file:line) | | inclusive % | function (file:line) |"]
        out += ["| ---: | --- | --- | ---: | --- |"]
        for (sf, sp), (inf, ip) in zip(p.top_self[:10], p.top_inclusive[:10], strict=False):
            out.append(f"| {sp:.1f} | `{sf}` | | {ip:.1f} | `{inf}` |")
        out.append("")
    return out


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    lines = ["### Machine and versions", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in result.machine.items()]
    lines += [f"| {f['label']} | {f['version']} |" for f in result.targets.values()]
    lines += [f"| duration | {result.duration_s / 60:.1f} min |", ""]
    lines += [f"Command: `{result.command}` (started {result.started}).", ""]
    lines += ["### Floe / Tansu at a glance", "", *_summary(result)]
    for title, path in charts:
        rel = Path(os.path.relpath(path, page_dir)).as_posix()
        lines += [f"![{title}]({rel})", ""]
    lines += ["### Method", "", *_method(result)]
    lines += ["### Produce throughput", "", *_transfer_tables(result, "produce")]
    lines += ["### Consume throughput", "", *_transfer_tables(result, "consume")]
    lines += ["### Latency", "", *_latency_tables(result)]
    lines += ["### Broker memory and CPU", ""]
    order = ("idle_rss_start_mb", "startup_cpu_s", "idle_rss_after_mb", "peak_rss_mb")
    seen = {k for m in result.memory.values() for k in m}
    metrics = [k for k in order if k in seen] + sorted(seen - set(order))
    lines += ["| target | " + " | ".join(metrics) + " |", "|" + " --- |" * (len(metrics) + 1)]
    for t, m in result.memory.items():
        cells = [f"{m[k]:,.1f}" if k in m else "-" for k in metrics]
        lines.append(f"| {_label(result, t)} | " + " | ".join(cells) + " |")
    lines += ["", "### Floe's own goals", "", *_goals(result)]
    lines += ["### Where Floe falls short of Tansu, and why", "", *_shortfalls(result)]
    if result.profiles:
        lines += ["### Profiles (py-spy)", "", *_profiles(result)]
    notes = [*_client_bound(result), *result.notes]
    if notes:
        lines += ["### Notes", "", *(f"- {n}" for n in notes), ""]
    return lines


def _series(result: SuiteResult, keys: Iterable[str], metric: str) -> list[Series]:
    out = []
    for t in result.targets:
        med: list[float | None] = []
        lo: list[float | None] = []
        hi: list[float | None] = []
        for key in keys:
            w = result.find(key, t)
            s = w.summary().get(metric) if w is not None and w.reps else None
            med.append(s["median"] if s else None)
            lo.append(s["min"] if s else None)
            hi.append(s["max"] if s else None)
        out.append(Series(_label(result, t), med, lo, hi))
    return out


def _short(result: SuiteResult, key: str) -> str:
    """A compact chart label: the title without its leading verb, broken in two."""
    title = _title(result, key).split(" ", 1)[1] if " " in _title(result, key) else key
    return title.replace(", ", "\n", 1)


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Throughput, broker CPU per GB and latency charts, one PNG each."""
    made: list[tuple[str, Path]] = []
    for group, metric, ylabel, title in (
        ("produce", "mb_s", "MB/s (median, min-max)", "Produce throughput"),
        ("consume", "mb_s", "MB/s (median, min-max)", "Consume throughput"),
        ("produce", "broker_cpu_s_per_gb", "broker CPU s per GB", "Produce: broker CPU per GB"),
    ):
        keys = _keys(result, group)
        if not keys:
            continue
        name = f"bench-broker-{group}-{metric.replace('_', '-')}.png"
        path = grouped_bars(
            img_dir / name,
            title,
            ylabel,
            [_short(result, k) for k in keys],
            _series(result, keys, metric),
        )
        made.append((title, path))
    keys = _keys(result, "latency")
    if keys:
        for metric in ("p50_ms", "p99_ms"):
            pct = metric.split("_")[0]
            title = f"Latency {pct} at {result.settings['latency_rate']:,} records/s"
            path = grouped_bars(
                img_dir / f"bench-broker-latency-{pct}.png",
                title,
                f"{pct} ms (lower is better)",
                ["produce -> ack" if k.startswith("produce") else "produce -> read" for k in keys],
                _series(result, keys, metric),
            )
            made.append((title, path))
    return made
