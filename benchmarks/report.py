"""Render a ``SuiteResult`` as Markdown (docs/benchmarks.md) and as JSON."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from benchmarks import loadgen
from benchmarks.broker import SuiteResult, Workload

PRODUCE_TARGET_MB_S = 100.0
CONSUME_TARGET_MB_S = 200.0
IDLE_RSS_TARGET_MB = 150.0


def _cell(workload: Workload, metric: str, digits: int = 1) -> str:
    """``median (min-max)`` of one metric, or just the value for a single repetition."""
    s = workload.summary()[metric]
    if len(workload.reps) == 1:
        return f"{s['median']:,.{digits}f}"
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def _find(result: SuiteResult, key: str) -> Workload | None:
    return next((w for w in result.workloads if w.key == key), None)


def _config_table(title: str, config: dict[str, str | int]) -> list[str]:
    rows = [f"**{title}**", "", "| setting | value |", "| --- | --- |"]
    rows += [f"| `{k}` | `{v}` |" for k, v in config.items()]
    return [*rows, ""]


def _transfer_table(workloads: list[Workload]) -> list[str]:
    stored = any(w.stored_ratio is not None for w in workloads)
    rows = [
        "| workload | records/rep | MB/s | records/s | broker CPU s | client CPU s "
        "| broker peak RSS MB |" + (" on-disk / value bytes |" if stored else ""),
        "| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if stored else ""),
    ]
    for w in workloads:
        ratio = f" {w.stored_ratio:.2f} |" if w.stored_ratio is not None else ""
        rows.append(
            f"| {w.title} | {w.params['records']:,} | {_cell(w, 'mb_s')} | "
            f"{_cell(w, 'records_s', 0)} | {_cell(w, 'broker_cpu_s', 2)} | "
            f"{_cell(w, 'client_cpu_s', 2)} | {_cell(w, 'broker_peak_rss_mb', 0)} |{ratio}"
        )
    errors = sum(r["errors"] for w in workloads for r in w.reps)
    return [*rows, "", f"Delivery or fetch errors over all repetitions: {errors:.0f}.", ""]


def _latency_table(w: Workload) -> list[str]:
    return [
        "| workload | p50 ms | p99 ms | p99.9 ms | max ms | achieved records/s | broker CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {w.title} | {_cell(w, 'p50_ms', 2)} | {_cell(w, 'p99_ms', 2)} | "
        f"{_cell(w, 'p999_ms', 2)} | {_cell(w, 'max_ms', 1)} | {_cell(w, 'records_s', 0)} | "
        f"{_cell(w, 'broker_cpu_s', 2)} |",
        "",
    ]


def _targets(result: SuiteResult) -> list[str]:
    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    rows = ["| target | measured | status |", "| --- | --- | --- |"]
    for key, label, target in (
        ("produce-none-p1", "produce, 1 partition, 1 KiB, acks=all", PRODUCE_TARGET_MB_S),
        ("consume-none-p1", "consume, 1 partition, 1 KiB", CONSUME_TARGET_MB_S),
    ):
        w = _find(result, key)
        if w is not None and w.reps:
            median = w.summary()["mb_s"]["median"]
            rows.append(
                f"| {label} >= {target:.0f} MB/s | {median:.1f} MB/s "
                f"({median / target:.0%} of target) | {verdict(median >= target)} |"
            )
    for key, label in (("idle_rss_start_mb", "after start"), ("idle_rss_after_mb", "after load")):
        if key in result.memory:
            rss = result.memory[key]
            rows.append(
                f"| idle broker RSS {label} <= {IDLE_RSS_TARGET_MB:.0f} MB | {rss:.1f} MB | "
                f"{verdict(rss <= IDLE_RSS_TARGET_MB)} |"
            )
    return [*rows, ""]


def _profiles(result: SuiteResult) -> list[str]:
    if not result.profiles:
        return []
    out = [
        "## Profile (py-spy)",
        "",
        "Extra, unmeasured runs with `py-spy record --format raw --function --nonblocking` "
        "attached to the broker. Shares are of samples with Python code running (py-spy "
        "drops idle samples, e.g. threads waiting in epoll). *Self* = the frame was the "
        "leaf; *inclusive* = a Floe function was anywhere on the stack.",
        "",
    ]
    for p in result.profiles:
        out += [f"### {p.workload} ({p.samples:,} samples)", ""]
        out += ["| self % | function (file:line) | | inclusive % | function (file:line) |"]
        out += ["| ---: | --- | --- | ---: | --- |"]
        for (sf, sp), (inf, ip) in zip(p.top_self, p.top_inclusive, strict=False):
            out.append(f"| {sp:.1f} | `{sf}` | | {ip:.1f} | `{inf}` |")
        out.append("")
    return out


def _derived_notes(result: SuiteResult) -> list[str]:
    """Warnings read off the measurements themselves."""
    notes = []
    for w in result.workloads:
        compressed = w.params.get("compression", "none") != "none"
        if compressed and w.stored_ratio is not None and w.stored_ratio > 0.9:
            notes.append(
                f"`{w.key}`: the log holds {w.stored_ratio:.2f} bytes per value byte, so the "
                "client sent the batches uncompressed. librdkafka only uses lz4 when the broker "
                "advertises FindCoordinator (its LZ4 feature check); until Floe does, this row "
                "measures uncompressed produce."
            )
    peak, idle = result.memory.get("peak_rss_at_start_mb"), result.memory.get("idle_rss_start_mb")
    if peak is not None and idle is not None and peak > 2 * idle:
        notes.append(
            f"Broker RSS peaked at {peak:.0f} MB during startup, before any client connected "
            f"(idle afterwards: {idle:.0f} MB); see startup_cpu_s for its CPU cost."
        )
    return notes


def render_markdown(result: SuiteResult) -> str:
    """The full report as Markdown."""
    s = result.settings
    groups = {g: [w for w in result.workloads if w.group == g] for g in ("produce", "consume")}
    latency = _find(result, "latency-p1")
    lines = [
        "# Floe broker benchmarks",
        "",
        f"Generated by `{result.command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}. "
        "Do not edit by hand: rerun `make bench`.",
        "",
    ]
    if s.quick:
        lines += ["> **Quick mode** (smoke test): tiny sizes, one repetition. Not a result.", ""]
    lines += ["## Machine", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in result.machine.items()]
    lines += [
        "",
        "## How to reproduce",
        "",
        "```sh",
        "make bench          # full run, writes this file and bench-results/broker.json",
        ".venv/bin/python -m benchmarks broker --out docs/benchmarks.md "
        "--json bench-results/broker.json --profile /tmp/floe-profiles  # needs py-spy",
        ".venv/bin/python -m benchmarks broker --quick --out /tmp/x.md --json /tmp/x.json",
        "```",
        "",
        "## Method",
        "",
        "- The broker is a real `floe up --host 127.0.0.1 --kafka-port <free port>` subprocess "
        "with a fresh data dir on the filesystem named above"
        + (f" and `--set {' --set '.join(s.broker_sets)}`" if s.broker_sets else "")
        + " (default `log.flush.policy=acks`: an acks=all produce is answered after a "
        "group-committed fsync).",
        "- The load generator is confluent-kafka (librdkafka) in one separate, spawned "
        "process. Broker CPU seconds (user + system) and RSS come from `/proc/<pid>/stat` "
        "and `/proc/<pid>/status`; broker CPU is measured around each whole client call "
        "(including connection setup). Client and broker share the machine's cores.",
        f"- Values are {loadgen.VALUE_BYTES} bytes, no key: half seeded random bytes, half "
        f"text, {loadgen.PAYLOAD_POOL} distinct values cycled (lz4 ratio about 2:1). "
        f"Seed {s.seed} (+ repetition index). Records go round-robin over the partitions.",
        "- MB/s counts record value bytes, 1 MB = 10^6 bytes. Throughput time runs from the "
        "first `produce()` to the end of `flush()`, or from `assign()` to the last record.",
        f"- Each workload runs {s.reps} time(s); cells show median (min-max). Produce "
        f"repetitions append {s.records:,} records each to a fresh topic; consumers then "
        "read each uncompressed topic in full from offset 0 (data is likely in the page "
        "cache). Each topic is deleted after its workloads: on the reference VM, write() "
        "costs several times more kernel time once a few GB of new files are live.",
        "- *on-disk / value bytes*: segment file bytes per record value byte after the "
        "produce repetitions (about 1.0 means the batches were stored uncompressed).",
        f"- Latency: {s.latency_rate:,} records/s for {s.latency_seconds:g} s per repetition, "
        "timed from `produce()` to the delivery callback (includes client batching).",
        "",
    ]
    lines += _config_table("Producer (throughput)", loadgen.PRODUCER_CONFIG)
    lines += _config_table("Producer (latency)", loadgen.LATENCY_PRODUCER_CONFIG)
    lines += _config_table("Consumer", loadgen.CONSUMER_CONFIG)
    lines += ["## Targets", "", *_targets(result)]
    lines += ["## Produce throughput (acks=all)", "", *_transfer_table(groups["produce"])]
    if latency is not None:
        lines += ["## Produce latency (acks=all)", "", *_latency_table(latency)]
    lines += ["## Consume throughput", "", *_transfer_table(groups["consume"])]
    lines += ["## Broker memory and CPU", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v:,.1f} |" for k, v in result.memory.items()]
    lines += ["", *_profiles(result)]
    notes = [*_derived_notes(result), *result.notes]
    if notes:
        lines += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(result: SuiteResult) -> str:
    """Machine-readable form: settings, machine, memory, per-rep metrics and summaries."""
    data = dataclasses.asdict(result)
    for w, out in zip(result.workloads, data["workloads"], strict=True):
        out["summary"] = w.summary()
    return json.dumps(data, indent=2, default=str) + "\n"


def write(result: SuiteResult, markdown_path: Path, json_path: Path) -> None:
    """Write both reports, creating parent directories."""
    for path, text in ((markdown_path, render_markdown(result)), (json_path, to_json(result))):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
