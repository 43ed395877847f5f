"""Markdown section and chart of the ``security`` suite (TLS on vs off).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/security.json``):
the page can be rebuilt without rerunning anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks import loadgen
from benchmarks.broker_report import _cell, _failures, _keys, _label, _series, _title
from benchmarks.charts import grouped_bars
from benchmarks.harness import SuiteResult, Workload

BASELINE = "plaintext"
TOPIC_NAME = (
    "TLS produce throughput depends on the length of the topic name; PLAINTEXT's does not. "
    "While this suite was written (same VM, one broker with these listeners, 300,000 "
    "records per point), SSL produce ranged from 290 to 404 MB/s over names of 1 to 40 "
    "characters (20-21 characters: about 295-335 MB/s; 22-25: about 355-405), broker and "
    "client CPU per GB moving with it, while PLAINTEXT stayed within 605-690 MB/s at 1, 5, "
    "20, 22, 25 and 38 characters. The cause was not pinned down. Every listener here "
    "writes to names of the same length ({length} characters), so the ratio is one point "
    "of that range: with other topic names, expect the TLS produce ratio to move by about "
    "15% either way."
)
"""Rendered under *What the numbers say*: measured while the suite was written, not by
the run being reported; ``{length}`` is that run's topic name length."""

_GLANCE = (
    ("mb_s", "MB/s", 1),
    ("records_s", "records/s", 0),
    ("broker_cpu_s_per_gb", "broker CPU s/GB", 2),
    ("client_cpu_s_per_gb", "client CPU s/GB", 2),
)


def _others(result: SuiteResult) -> list[str]:
    return [t for t in result.targets if t != BASELINE]


def _median(result: SuiteResult, key: str, target: str, metric: str) -> float | None:
    w = result.find(key, target)
    return None if w is None else w.median(metric)


def _ratio(result: SuiteResult, key: str, target: str, metric: str) -> float | None:
    v, b = _median(result, key, target, metric), _median(result, key, BASELINE, metric)
    return v / b if v is not None and b else None


def _busy(w: Workload | None, cpu: str) -> float | None:
    """Median CPU seconds per wall second (1.0 = one core saturated) of ``cpu``."""
    if w is None or not w.reps:
        return None
    values = sorted(r[cpu] / r["seconds"] for r in w.reps)
    return values[len(values) // 2]


def _glance(result: SuiteResult) -> list[str]:
    head = ["workload", "metric", _label(result, BASELINE)]
    for t in _others(result):
        head += [_label(result, t), f"{_label(result, t)} / {_label(result, BASELINE)}"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in [*_keys(result, "produce"), *_keys(result, "consume")]:
        for metric, label, digits in _GLANCE:
            cells = [_title(result, key), label, _cell(result.find(key, BASELINE), metric, digits)]
            for t in _others(result):
                ratio = _ratio(result, key, t, metric)
                text = "-" if ratio is None else f"{ratio:.2f}x"
                bold = metric == "mb_s" and ratio is not None
                cells += [
                    _cell(result.find(key, t), metric, digits),
                    f"**{text}**" if bold else text,
                ]
            rows.append("| " + " | ".join(cells) + " |")
    return [
        "Ratios are the TLS listener's median over PLAINTEXT's, same broker, same run. For "
        "MB/s and records/s below 1 means TLS is slower (the two ratios agree: every "
        "listener moves the same 1 KiB records); for CPU per GB above 1 means TLS costs "
        "more. Cells show median (min-max).",
        "",
        *rows,
        "",
    ]


def _reading(result: SuiteResult) -> list[str]:
    """What the figures say, worded from the figures themselves."""
    lines: list[str] = []
    ssl = "ssl" if "ssl" in result.targets else None
    for group in ("produce", "consume"):
        keys = _keys(result, group)
        if not keys or ssl is None:
            continue
        key = keys[0]
        ratio = _ratio(result, key, ssl, "mb_s")
        base, tls = result.find(key, BASELINE), result.find(key, ssl)
        if ratio is None or base is None or tls is None:
            lines.append(f"- **{group.capitalize()}**: no ratio (a listener failed; see Notes).")
            continue
        text = (
            f"- **{group.capitalize()}** over TLS runs at **{ratio:.2f}x** the PLAINTEXT "
            f"throughput ({_median(result, key, ssl, 'mb_s'):,.0f} vs "
            f"{_median(result, key, BASELINE, 'mb_s'):,.0f} MB/s: "
            f"{abs(1 - ratio) * 100:.0f}% {'less' if ratio < 1 else 'more'})."
        )
        cpu = [_ratio(result, key, ssl, f"{end}_cpu_s_per_gb") for end in ("broker", "client")]
        busy = [_busy(w, f"{end}_cpu_s") for end in ("broker", "client") for w in (base, tls)]
        known = [v for v in (*cpu, *busy) if v is not None]
        if len(known) == 6:
            broker_gb, client_gb, broker_plain, broker_tls, client_plain, client_tls = known
            text += (
                f" Per GB, the broker spends {broker_gb:.2f}x the CPU and the client "
                f"{client_gb:.2f}x. Cores busy, PLAINTEXT -> TLS: broker {broker_plain:.2f} -> "
                f"{broker_tls:.2f}, client {client_plain:.2f} -> {client_tls:.2f} (both share "
                f"the machine's {result.machine.get('cores', '?')} cores)."
            )
            if broker_tls >= 0.85:
                text += (
                    " The broker is at about one core over TLS: Floe serves every connection "
                    "from one event loop and does its TLS on it, so its extra CPU per GB comes "
                    "straight out of throughput."
                )
            elif client_tls >= 0.9:
                text += (
                    " The broker stays below one core over TLS and the client is at about one "
                    "(librdkafka does a connection's TLS on that connection's one thread): the "
                    "ratio is that of this client and this broker together, as an application "
                    "on the same host would see it, not of the broker alone."
                )
            else:
                text += " Neither the broker nor the client is at one core over TLS."
        lines.append(text)
    if ssl is not None and "sasl_ssl" in result.targets:
        parts, ratios = [], []
        for group in ("produce", "consume"):
            keys = _keys(result, group)
            s, t = (_ratio(result, keys[0], n, "mb_s") if keys else None for n in (ssl, "sasl_ssl"))
            if s is not None and t is not None:
                parts.append(f"{group} {t / s:.2f}x")
                ratios.append(t / s)
        if parts:
            close = all(abs(r - 1) <= 0.1 for r in ratios)
            lines.append(
                f"- **SASL_SSL / SSL**: {', '.join(parts)}. SCRAM adds one exchange per "
                "connection, made before the clock starts (the producer's metadata request, "
                "the consumer's offsets query); the records then move as on SSL. "
                + (
                    "Within 10%, as expected."
                    if close
                    else "A gap above 10% is more than authentication explains: compare "
                    "the min-max spreads in the table above (repetition noise)."
                )
            )
    length = next(
        (w.params.get("topic_name_length") for w in result.workloads if w.group == "produce"),
        None,
    )
    if length is not None and len(result.targets) > 1:
        lines.append(f"- **Topic names.** {TOPIC_NAME.format(length=length)}")
    load = result.machine.get("loadavg_at_start", "")
    first = float(load.split()[0]) if load else 0.0
    if first >= 1.0:
        lines.append(
            f"- The machine was not quiet (1-min load average {first:.2f} at start, "
            f"{result.machine.get('loadavg_after_workloads', '-')} after) on "
            f"{result.machine.get('cores', '?')} cores: every figure moved with that load. "
            "The ratios, measured seconds apart with the listener order rotated every "
            "repetition, are less exposed than absolute MB/s but not immune: see the "
            "min-max spreads."
        )
    return [*lines, ""] if lines else ["No ratio: the run did not complete.", ""]


def _details(result: SuiteResult) -> list[str]:
    out: list[str] = []
    for key in [*_keys(result, "produce"), *_keys(result, "consume")]:
        out += [f"#### {_title(result, key)}", ""]
        out += [
            "| listener | MB/s | records/s | broker CPU s/GB | broker cores busy "
            "| client CPU s/GB | client cores busy | broker peak RSS MB |",
            "|" + " --- |" * 8,
        ]
        for t in result.targets:
            w = result.find(key, t)
            if w is None:
                continue
            busy = [_busy(w, c) for c in ("broker_cpu_s", "client_cpu_s")]
            b, c = ("-" if v is None else f"{v:.2f}" for v in busy)
            out.append(
                f"| {_label(result, t)} | {_cell(w, 'mb_s')} | {_cell(w, 'records_s', 0)} | "
                f"{_cell(w, 'broker_cpu_s_per_gb', 2)} | {b} | "
                f"{_cell(w, 'client_cpu_s_per_gb', 2)} | {c} | "
                f"{_cell(w, 'broker_peak_rss_mb', 0)} |"
            )
        recs = next(w.params.get("records") for w in result.workloads if w.key == key)
        out += ["", f"Records per repetition: {recs:,}." if isinstance(recs, int) else "", ""]
        out += _failures(result, key)
    return out


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    out = ["| listener | how it runs |", "| --- | --- |"]
    out += [f"| {f['label']} | {f['description']} |" for f in result.targets.values()]
    tls = result.targets.get("ssl", {}).get("tls")
    total = s["records"] * s["reps"]
    labels = [_label(result, n) for n in result.targets]
    firsts = ", then ".join(
        f"{labels[r % len(labels)]} first" for r in range(min(s["reps"], len(labels)))
    )
    out += [
        "",
        "- One `floe up` (defaults otherwise: `log.flush.policy=acks`, so acks=all is "
        "answered after a group-committed fsync) with one listener per protocol on "
        "127.0.0.1. The PLAINTEXT baseline is the same broker process in the same run.",
        "- Certificates: a throwaway CA and a server certificate (SAN 127.0.0.1, localhost) "
        "made for the run, EC P-256, SHA-256. The broker's TLS is Python's `ssl` under "
        f"uvloop ({result.machine.get('openssl', 'OpenSSL')}); the client's is the OpenSSL "
        "bundled with confluent-kafka."
        + (f" The SSL listener picks **{tls}** (asked with Python's `ssl`)." if tls else ""),
        f"- Produce: {s['records']:,} records of 1 KiB per repetition through each listener, "
        "each repetition into a fresh 1-partition topic deleted right after it (names of one "
        "length for every listener; no "
        "compression, acks=all, the broker suite's producer settings below plus the "
        "listener's client settings). MB/s counts value bytes (1 MB = 10^6 B) from the first "
        "`produce()` to the end of `flush()`; the connection is made before the clock starts. "
        "Why delete: on this VM, with topics kept, produce repetitions after about 2 GB of "
        "writes ran up to 40% slower at up to 2.5x the broker CPU per GB (system time), "
        "whatever the listener, so the later repetitions measured the page cache more than "
        "TLS.",
        f"- Consume: one topic filled once over PLAINTEXT ({total:,} records, unmeasured), "
        "then read whole from offset 0 through each listener (`assign()`; the data is in the "
        "page cache): the same bytes from the same files for every listener.",
        f"- {s['reps']} repetition(s) per workload. Repetition r runs the listeners in an "
        f"order rotated by r ({firsts}), so no listener always meets a warm or a cold "
        "broker. Broker CPU (user + system) and RSS come from "
        "`/proc` of the broker around each client call; client CPU is the load generator's "
        "(one spawned process, librdkafka threads included). *Cores busy* = CPU s / wall s.",
        "",
        "**Client settings per listener** (over the producer and consumer settings below)",
        "",
        "| listener | settings |",
        "| --- | --- |",
        "| PLAINTEXT | (none) |",
        "| SSL | `security.protocol=SSL`, `ssl.ca.location=<ca.pem>` |",
        "| SASL_SSL | `security.protocol=SASL_SSL`, `ssl.ca.location=<ca.pem>`, "
        "`sasl.mechanism=SCRAM-SHA-512`, `sasl.username`, `sasl.password` |",
        "",
    ]
    for title, config in (
        ("Producer (`compression.type=none`, `acks=all`)", loadgen.PRODUCER_CONFIG),
        ("Consumer", loadgen.CONSUMER_CONFIG),
    ):
        out += [f"**{title}**", "", "| setting | value |", "| --- | --- |"]
        out += [f"| `{k}` | `{v}` |" for k, v in config.items()]
        out.append("")
    return out


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    lines = ["### Machine and versions", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in result.machine.items()]
    version = next((f["version"] for f in result.targets.values()), None)
    lines += [f"| Floe | {version} |"] if version else []
    lines += [f"| duration | {result.duration_s / 60:.1f} min |", ""]
    lines += [f"Command: `{result.command}` (started {result.started}).", ""]
    lines += ["### TLS / PLAINTEXT at a glance", "", *_glance(result)]
    for title, path in charts:
        rel = Path(os.path.relpath(path, page_dir)).as_posix()
        lines += [f"![{title}]({rel})", ""]
    lines += ["### What the numbers say", "", *_reading(result)]
    lines += ["### Per listener", "", *_details(result)]
    lines += ["### Method", "", *_method(result)]
    lines += ["| broker | idle RSS MB at start | idle RSS MB after | peak RSS MB | total CPU s |"]
    lines += ["| --- | --- | --- | --- | --- |"]
    for name, m in result.memory.items():
        cells = [m.get(k) for k in ("idle_rss_start_mb", "idle_rss_after_mb", "peak_rss_mb",
                                    "total_cpu_s")]  # fmt: skip
        lines.append(
            f"| {name} | " + " | ".join("-" if v is None else f"{v:,.1f}" for v in cells) + " |"
        )
    lines.append("")
    if result.notes:
        lines += ["### Notes", "", *(f"- {n}" for n in result.notes), ""]
    return lines


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Produce and consume MB/s per listener, one PNG."""
    keys = [*_keys(result, "produce"), *_keys(result, "consume")]
    if not keys:
        return []
    title = "TLS on vs off: throughput (1 KiB, acks=all, 1 partition)"
    path = grouped_bars(
        img_dir / "bench-security-throughput.png",
        title,
        "MB/s (median, min-max)",
        [_title(result, k).split(" ", 1)[0] for k in keys],
        _series(result, keys, "mb_s"),
    )
    return [(title, path)]
