"""Markdown section and charts of the ``storage`` suite (local disk vs object storage,
and object storage alone vs in a cluster of one on etcd).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/storage.json``).
The cell, ratio and machine helpers are the broker and table reports' own, so the three
sections read alike.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Callable
from pathlib import Path

from benchmarks import loadgen
from benchmarks.broker_report import _keys, _label, _series, _title
from benchmarks.charts import Series, grouped_bars
from benchmarks.harness import SuiteResult, Workload
from benchmarks.s3_clients import BASELINE as CLIENT_BASELINE
from benchmarks.s3_clients import CLIENTS
from benchmarks.table_report import _cell, _machine

LOCAL = "local"
S3 = "s3"
COMMIT = "s3-commit"
COLD = "s3-cold"
COLD_GROUP = "cold-consume"
MONTH_S = 30 * 24 * 3600
REFETCHED = 1.5
"""Bytes got per byte read above which a cold read fetched objects more than once."""
COMMIT_BUDGET = 0.90
"""The least produce throughput of ``s3-commit`` / ``s3`` we aim for: the commit point
may cost at most 10 %."""


def _glance(result: SuiteResult) -> list[str]:
    """Every broker number, local and object storage, and their ratio."""
    plan = [(k, "mb_s", "MB/s", 1) for g in ("produce", "consume") for k in _keys(result, g)]
    for k in _keys(result, "latency"):
        plan += [(k, "p50_ms", "p50 ms", 2), (k, "p99_ms", "p99 ms", 2)]
        plan += [(k, "p999_ms", "p99.9 ms", 2), (k, "max_ms", "max ms", 1)]
    plan += [(k, "broker_cpu_s_per_gb", "broker CPU s/GB", 2) for k in _keys(result, "produce")]
    rows = _pair_rows(result, plan, S3, LOCAL, lambda key, metric: _vs_local(result, key, metric))
    return [
        "Cells: median (min-max) over the repetitions. Ratio: object storage median / local "
        "disk median, measured in the same run; for MB/s above 1 means object storage is "
        "faster, for latency and CPU below 1 means it is better (bold: object storage is "
        "better). Broker CPU s/GB counts the produce call only; the background upload that "
        "follows on object storage is in the requests table below (*upload CPU s*).",
        "",
        *rows,
        "",
    ]


def _pair_rows(
    result: SuiteResult,
    plan: list[tuple[str, str, str, int]],
    target: str,
    base: str,
    ratio: Callable[[str, str], str],
) -> list[str]:
    """A table of ``plan``'s ``(workload, metric, label, digits)``: ``base``'s cell,
    ``target``'s, and ``ratio(workload, metric)``."""
    rows = [
        f"| workload | metric | {_label(result, base)} | {_label(result, target)} "
        f"| {target} / {base} |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, metric, label, digits in plan:
        rows.append(
            f"| {_title(result, key)} | {label} | {_cell(result.find(key, base), metric, digits)} "
            f"| {_cell(result.find(key, target), metric, digits)} | {ratio(key, metric)} |"
        )
    return rows


def _vs_local(result: SuiteResult, key: str, metric: str) -> str:
    """Object storage / local disk, bold where object storage is better."""
    ratio = _median_ratio(result, key, metric)
    if ratio is None:
        return "n/a"
    better = ratio > 1 if metric == "mb_s" else ratio < 1
    return f"**{ratio:.2f}x**" if better else f"{ratio:.2f}x"


def _commit(result: SuiteResult) -> list[str]:
    """Produce throughput and latency with the commit point (``s3-commit``) and without
    (``s3``), and their ratio; nothing for a run without the ``s3-commit`` target."""
    if COMMIT not in result.targets:
        return []
    plan = [(k, "mb_s", "MB/s", 1) for k in _keys(result, "produce")]
    plan += [(k, m, label, 2) for k in _keys(result, "latency")
             for m, label in (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"))]  # fmt: skip

    def ratio(key: str, metric: str) -> str:
        r = _median_ratio(result, key, metric, COMMIT, S3)
        return "n/a" if r is None else f"{r:.2f}x"

    rows = _pair_rows(result, plan, COMMIT, S3, ratio)
    return [
        f"*{_label(result, COMMIT)}* (`s3-commit`) is *{_label(result, S3)}* (`s3`) in a "
        "cluster of one: the same broker settings on its own prefix, plus "
        "`cluster.metadata.url` on an etcd on the same host, so an acks=all produce is "
        "answered only once the WAL object is in the bucket *and* one etcd transaction has "
        "committed its records (the commit point). "
        "Same run, same load, targets loaded one at a time. Cells: median (min-max); ratio: "
        "s3-commit median / s3 median: for MB/s above 1 means faster, for latency below 1 "
        "means faster.",
        "",
        *rows,
        "",
        *_commit_reading(result),
    ]


def _commit_reading(result: SuiteResult) -> list[str]:
    """The measured throughput ratios against the commit point's 10 % budget."""
    ratios = {
        key: r
        for key in _keys(result, "produce")
        if (r := _median_ratio(result, key, "mb_s", COMMIT, S3)) is not None
    }
    if not ratios:
        return []
    within = min(ratios.values()) >= COMMIT_BUDGET
    each = " and ".join(
        f"{r:.2f}x ({_title(result, k).rsplit(', ', 1)[-1]})" for k, r in ratios.items()
    )
    return [
        f"- With the commit point, produce throughput ran at {each} that of object storage "
        f"alone: {'within' if within else 'outside'} the budget of a 10 % cost at most "
        f"(a ratio of {COMMIT_BUDGET:.2f}x or more).",
        "",
    ]


def _prices(result: SuiteResult) -> list[str]:
    p = result.settings.get("prices", {})
    if not p:
        return []
    return [
        f"Prices: public AWS S3 Standard request prices in {p['region']}, as of {p['as_of']}; "
        f"source: {p['source']}. PUT, COPY, POST and LIST ${p['put_class_per_1000']} per 1,000 "
        f"requests, GET ${p['get_class_per_1000']} per 1,000, DELETE free "
        f"(${p['delete_per_1000']}). Storage ($/GB-month) and data transfer are not "
        "included: inside one region transfer to EC2 is free, and storage depends on "
        "retention, not on this benchmark. GB = 10^9 bytes of record values produced (or "
        "consumed) by the client.",
        "",
    ]


def _requests(result: SuiteResult) -> list[str]:
    """Per workload on object storage: requests per GB and their price."""
    head = (
        "| workload | MB per rep | PUT/GB on the ack path | PUT/GB | LIST/GB | GET/GB | "
        "DELETE/GB | bytes PUT / payload | upload wait s | upload CPU s | PUT/s | $ per GB | "
        "$ per TB | $ per 30 days at this rate |"
    )
    rows = [head, "|" + " --- |" * 14]
    for group in ("produce", "latency", "consume"):
        for key in _keys(result, group):
            w = result.find(key, S3)
            if w is None or not w.reps or "usd_per_gb" not in w.reps[0]:
                continue
            mb = _payload_mb(w)
            usd = w.median("usd_per_gb") or 0.0
            rows.append(
                f"| {w.title} | {mb:,.1f} | {_cell(w, 'ack_path_puts_per_gb', 0)} | "
                f"{_cell(w, 'puts_per_gb', 0)} | {_cell(w, 'lists_per_gb', 1)} | "
                f"{_cell(w, 'gets_per_gb', 1)} | {_cell(w, 'deletes_per_gb', 1)} | "
                f"{_cell(w, 'bytes_put_ratio', 2)} | {_cell(w, 'upload_wait_s', 1)} | "
                f"{_cell(w, 'upload_cpu_s', 2)} | {_per_second(w, 'puts'):,.0f} | {usd:.4f} | "
                f"{usd * 1000:,.2f} | {_per_second(w, 'usd') * MONTH_S:,.0f} |"
            )
    if len(rows) == 2:
        return []
    return [
        f"Every request {_label(result, S3)} made per repetition, from its `/metrics` "
        "(`floe_s3_requests_total`, `floe_s3_bytes_total`) scraped before the repetition "
        "and after the background upload it caused (a produce repetition is followed by a "
        "wait until no WAL object is left in the bucket: its records are then in partition "
        "objects). *On the ack path*: PUTs during the client call only (the group-committed "
        "WAL objects acks=all waits for). Local disk makes no such requests. $ per GB and "
        "per TB are medians (the price of the median repetition). *PUT/s* and *$ per 30 "
        "days*: the repetition's requests over its client time, i.e. what the same traffic "
        "would cost if it went on at that speed for a month.",
        "",
        *_prices(result),
        *rows,
        "",
    ]


def _per_second(w: Workload, what: str) -> float:
    """Median over the repetitions of ``what`` (a counter, or ``usd``) per client second."""
    rates = []
    for r in w.reps:
        seconds = r["seconds"] if "seconds" in r else float(w.params["records"]) / r["records_s"]
        payload_gb = r.get("records", float(w.params["records"])) * w.params["value_bytes"] / 1e9
        amount = r["usd_per_gb"] * payload_gb if what == "usd" else r[what]
        rates.append(amount / seconds)
    return statistics.median(rates) if rates else 0.0


def _payload_mb(w: Workload) -> float:
    records = w.reps[0].get("records", float(w.params["records"]))
    return records * float(w.params["value_bytes"]) / 1e6


def _cache(result: SuiteResult) -> list[str]:
    """Consumer reads on object storage: from the local cache or from the bucket."""
    rows = [
        "| workload | MB read per rep | GET requests | bytes from the bucket | "
        "served from the cache |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key in _keys(result, "consume"):
        w = result.find(key, S3)
        if w is None or not w.reps or "gets" not in w.reps[0]:
            continue
        share = 1.0 - max(r["bytes_got_ratio"] for r in w.reps)
        rows.append(
            f"| {w.title} | {_payload_mb(w):,.1f} | {_cell(w, 'gets', 0)} | "
            f"{_cell(w, 'bytes_got', 0)} | {max(0.0, share):.1%} (worst repetition) |"
        )
    if len(rows) == 2:
        return []
    return [
        "Consumers read the topic back from offset 0 right after it was produced, as a "
        "tail consumer does: the records are in the broker's cache (data.dir). GET requests "
        "and bytes are counted during the consume call; *served from the cache* = 1 - bytes "
        "from the bucket / bytes read.",
        "",
        *rows,
        "",
    ]


def _cold(result: SuiteResult) -> list[str]:
    """The same consume served from the cache (``s3``) and from the bucket (``s3-cold``)."""
    rows = [
        f"| workload | MB read per rep | {_label(result, S3)} MB/s (cache) | "
        f"{_label(result, COLD)} MB/s (bucket) | bucket / cache | GET/GB | bytes got / "
        "byte read | $ per TB read | records below the cache start | eviction wait s |",
        "|" + " --- |" * 10,
    ]
    for key in _keys(result, COLD_GROUP):
        cold = result.find(key, COLD)
        if cold is None:
            continue
        warm = result.find(str(cold.params.get("cache_key", "")), S3)
        share = cold.extra.get("cold_share")
        wait = cold.extra.get("evict_wait_s")
        usd = (cold.median("usd_per_gb") or 0.0) * 1000 if cold.reps else None
        rows.append(
            f"| {_title(result, key).removesuffix(', from the bucket')} | "
            f"{_payload_mb(cold) if cold.reps else 0:,.1f} | {_cell(warm, 'mb_s', 1)} | "
            f"{_cell(cold, 'mb_s', 1)} | {_cold_ratio(cold, warm)} | "
            f"{_cell(cold, 'gets_per_gb', 1)} | {_cell(cold, 'bytes_got_ratio', 2)} | "
            f"{'-' if usd is None else f'{usd:.4f}'} | "
            f"{'-' if share is None else f'{share:.1%}'} | "
            f"{'-' if wait is None else f'{wait:.1f}'} |"
        )
    if len(rows) == 2:
        return []
    return [
        "Consumers that start behind the broker's local cache, as a backfill or a new "
        "consumer group reading from the earliest offset does. The cache column is the "
        f"{_label(result, S3)} target's consume workload above (records just produced, all "
        f"in data.dir); the bucket column is the {_label(result, COLD)} target, a separate "
        "broker started alone after the others stopped, which keeps nothing in data.dir "
        "that is in the bucket: the same number of records is produced to it (not timed), "
        "the suite waits until every partition keeps only its active segment in data.dir "
        "(*eviction wait*: from the last ack, the upload to partition objects included), "
        "then consumes them back from offset 0 by count, one repetition at a time. "
        "*Records below the cache start*: the share of the read served from the bucket "
        "(`floe_s3_partition_cache_start_offset`; the rest is in the active segments). "
        "GETs and bytes got are counted during the consume call; *bytes got / byte read* "
        "above 1 means objects were fetched more than once. Ratio: bucket median / cache "
        "median.",
        "",
        *rows,
        "",
        *_cold_reading(result),
    ]


def _cold_ratio(cold: Workload | None, warm: Workload | None) -> str:
    """Bucket / cache median MB/s; small ratios keep two significant digits."""
    a = cold.median("mb_s") if cold is not None else None
    b = warm.median("mb_s") if warm is not None else None
    if a is None or not b:
        return "-"
    return f"{a / b:.2f}x" if a / b >= 0.1 else f"{a / b:.2g}x"


def _cold_reading(result: SuiteResult) -> list[str]:
    """What the cold-read numbers say, and what they do not."""
    ratios: list[str] = []
    refetched: list[str] = []
    for key in _keys(result, COLD_GROUP):
        cold = result.find(key, COLD)
        if cold is None or not cold.reps:
            continue
        warm = result.find(str(cold.params.get("cache_key", "")), S3)
        n = int(cold.params["partitions"])
        partitions = f"{n} partition" + ("s" if n > 1 else "")
        if (ratio := _cold_ratio(cold, warm)) != "-":
            ratios.append(f"{ratio} ({partitions})")
        got = cold.median("bytes_got_ratio") or 0.0
        if got > REFETCHED:
            refetched.append(f"{partitions} ({got:.1f} bytes got per byte read)")
    if not ratios:
        return []
    reuse = (
        "They did not with "
        + ", ".join(refetched)
        + ": blocks were fetched again and again, and the GETs, the broker CPU and the "
        "time follow. Rerun with `--storage-set storage.s3.read.cache.bytes=N`, N above "
        "the partitions read at once times two blocks, to see the difference."
        if refetched
        else "Bytes got per byte read stayed near 1: each block was fetched once."
    )
    return [
        "Reading from the bucket ran at " + " and ".join(ratios) + " the speed of the same read "
        "from the cache. SeaweedFS runs on the same host, so a GET here costs about a "
        "millisecond plus the copy; a real S3 adds tens of milliseconds of first-byte "
        "latency per GET and a per-connection bandwidth limit, so expect lower cold figures "
        "there (the request counts stay the same).",
        "",
        "The broker reads partition objects in 4 MiB range GETs, reading the next block "
        "ahead while a consumer reads in order, and keeps the most recently used blocks in "
        "memory, up to `storage.s3.read.cache.bytes` (64 MiB by default); it remembers "
        "where each read stopped inside an object, so the next read starts there: a "
        "consumer reading in order GETs each block once as long as the blocks of the "
        f"partitions it reads at the same time fit in that memory. {reuse}",
        "",
    ]


def _clients(result: SuiteResult) -> list[str]:
    keys = _keys(result, "s3-client")
    if not keys:
        return []
    others = [c for c in CLIENTS if c != CLIENT_BASELINE]
    head = "| request | obstore p50 ms | obstore p99 ms |"
    for c in others:
        head += f" {c} p50 ms | {c} p99 ms | {c} / obstore p50 | {c} / obstore p99 |"
    rows = [head, "|" + " --- |" * (3 + 4 * len(others))]
    for key in keys:
        base = result.find(key, CLIENT_BASELINE)
        cells = [_title(result, key), _cell(base, "p50_ms", 2), _cell(base, "p99_ms", 2)]
        for c in others:
            w = result.find(key, c)
            if w is not None and not w.reps and w.failures:
                cells += ["n/a", "n/a", "n/a", "n/a"]
                continue
            cells += [_cell(w, "p50_ms", 2), _cell(w, "p99_ms", 2)]
            cells += [_plain_ratio(w, base, "p50_ms"), _plain_ratio(w, base, "p99_ms")]
        rows.append("| " + " | ".join(cells) + " |")
    unsupported = sorted(
        {f"{w.target}: {w.failures[0]}" for w in result.workloads
         if w.group == "s3-client" and w.failures}
    )  # fmt: skip
    samples = ", ".join(
        f"{w.title} {w.params['samples']}"
        for w in result.workloads
        if w.group == "s3-client" and w.target == CLIENT_BASELINE
    )
    m = result.machine
    return [
        "The client comparison behind `storage.type = s3`'s choice of obstore "
        "(`src/floe/storage/object/bucket.py`), against the same SeaweedFS before any "
        f"broker runs: obstore {m.get('obstore', '?')}, boto3 {m.get('boto3', '?')}, "
        f"pyarrow {m.get('pyarrow', '?')} (`S3FileSystem`). Sequential calls, one at a "
        f"time, after one warm-up call; samples per repetition: {samples}. Ratios: the "
        "client's median / obstore's median (above 1: slower than obstore).",
        "",
        *rows,
        "",
        *(f"- {u}" for u in unsupported),
        *([""] if unsupported else []),
    ]


def _plain_ratio(w: Workload | None, base: Workload | None, metric: str) -> str:
    a = w.median(metric) if w is not None else None
    b = base.median(metric) if base is not None else None
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    out = ["| target | how it runs |", "| --- | --- |"]
    out += [f"| {f['label']} | {f['description']} |" for f in result.targets.values()]
    out += [
        "",
        f"- SeaweedFS {result.machine.get('seaweedfs', '?')} (`weed mini`, one process, "
        "127.0.0.1, its data on the same disk as the brokers' data.dir), started by the "
        "suite and stopped at its end: the bucket is local, so these are request counts "
        "and the cost of Floe's own work, not the latency of a remote S3.",
        "- The broker suite's method and load generator (`benchmarks.broker.Runner`, "
        "`benchmarks.loadgen`): the brokers run for the whole suite, one is loaded at a "
        "time, repetitions alternate the order, and the client is confluent-kafka in a "
        "separate process.",
        f"- Produce: {s['records']:,} records of 1 KiB per repetition (acks=all, no "
        "compression, round-robin over the partitions); consume reads every acknowledged "
        "record back from offset 0. Latency: "
        f"{s['latency_rate']:,} records/s for {s['latency_seconds']:g} s per repetition, "
        "`produce()` to delivery callback.",
        f"- {s['reps']} repetition(s) per workload. Topics are deleted after each case; the "
        "suite then waits until the bucket holds none of their objects.",
        *(
            [
                f"- Cold reads: {_label(result, COLD)} runs alone after the others stopped, "
                f"with segments of {s['cold_segment_bytes'] / 2**20:g} MiB; per consume case "
                "it gets as many records as the cache read (not timed) and, once they left "
                "data.dir, they are read back like the others. Its topics are not deleted "
                "(it stops right after)."
            ]
            if COLD in result.targets and "cold_segment_bytes" in s
            else []
        ),
        "",
    ]
    out += [
        "**Producer (throughput)**: the broker suite's settings: "
        + ", ".join(f"`{k}={v}`" for k, v in loadgen.PRODUCER_CONFIG.items()),
        "",
    ]
    return out


def _reading(result: SuiteResult) -> list[str]:
    """What the numbers say: computed sentences, then the why."""
    lines: list[str] = []
    for key in [*_keys(result, "produce"), *_keys(result, "consume")]:
        r = _median_ratio(result, key, "mb_s")
        if r is not None:
            lines.append(f"- {_title(result, key)}: object storage at {r:.2f}x local disk.")
    for key in _keys(result, "latency"):
        p50, p99 = _median_ratio(result, key, "p50_ms"), _median_ratio(result, key, "p99_ms")
        if p50 is not None and p99 is not None:
            lines.append(f"- {_title(result, key)}: p50 {p50:.2f}x, p99 {p99:.2f}x local disk.")
    for key in [*_keys(result, "produce"), *_keys(result, "latency")]:
        w = result.find(key, S3)
        if w is not None and w.reps and "usd_per_gb" in w.reps[0]:
            lines.append(
                f"- {_title(result, key)}: {w.median('puts_per_gb') or 0:,.0f} PUTs per GB "
                f"written ({_per_second(w, 'puts'):,.0f} PUT/s), "
                f"${(w.median('usd_per_gb') or 0) * 1000:,.2f} of S3 requests per TB, "
                f"${_per_second(w, 'usd') * MONTH_S:,.0f} per 30 days at this rate."
            )
    gets = [
        w.median("gets") or 0.0
        for w in result.workloads
        if w.group == "consume" and w.target == S3 and w.reps and "gets" in w.reps[0]
    ]
    if gets:
        lines.append(
            f"- Consumers at the tail: {max(gets):.0f} GET requests at most per repetition."
        )
    for key in _keys(result, COLD_GROUP):
        cold = result.find(key, COLD)
        warm = result.find(str(cold.params.get("cache_key", "")), S3) if cold else None
        ratio = _cold_ratio(cold, warm)
        if cold is not None and cold.reps and ratio != "-":
            lines.append(
                f"- {_title(result, key)}: {ratio} the speed of the same read from the cache, "
                f"{cold.median('gets_per_gb') or 0:,.0f} GETs per GB read."
            )
    return [
        *lines,
        "",
        "How to read this: on object storage an acks=all produce is answered when a WAL "
        "object holding the records is in the bucket: one PUT per group commit, carrying "
        "every partition's pending records, so throughput and latency follow the PUT "
        "latency of the store (here a SeaweedFS on the same host: about a millisecond for a "
        "small PUT, far below a remote S3's tens of milliseconds, so expect larger latency "
        "ratios against real S3). Local disk pays an fsync instead.",
        "",
        "The request bill is set by how many records one group commit gathers (up to "
        "`storage.s3.wal.max.bytes`), not by the bytes: at full speed WAL objects are large "
        "and PUTs per GB few; at a moderate fixed rate each commit carries only the records "
        "of the last PUT's round trip, so PUTs per GB, and the price per TB, rise by two "
        "orders of magnitude (the latency row). `storage.s3.wal.min.interval.ms` (0 by "
        "default) caps WAL PUTs at 1000 / interval per second, paid for in acks=all latency "
        "(rerun with `--storage-set storage.s3.wal.min.interval.ms=N` to see the trade). "
        "Partition objects, written every `storage.s3.upload.interval.ms` in pieces of at "
        "most 4 MiB, add a few PUTs and write every byte a second time (*bytes PUT / "
        "payload* about 2); merging pieces into objects of about "
        "`storage.s3.object.target.bytes` writes it a third time.",
        "",
        "Where the object-storage p99 is far above local disk's, look first at the partition "
        "upload pass that runs every `storage.s3.upload.interval.ms` inside the broker (a "
        "10 s latency repetition contains one at the default interval): its PUTs (and "
        "merges) go to the same store as the WAL PUTs acks=all waits for, and here that "
        "store shares the broker's two cores. Reads at the tail cost nothing: they come "
        "from data.dir. Reads behind the cache are in *Cold reads* below.",
        "",
    ]


def _median_ratio(
    result: SuiteResult, key: str, metric: str, target: str = S3, base: str = LOCAL
) -> float | None:
    """``target``'s median / ``base``'s median of ``metric`` in workload ``key``."""
    w, b = result.find(key, target), result.find(key, base)
    a = w.median(metric) if w is not None else None
    d = b.median(metric) if b is not None else None
    return a / d if a is not None and d else None


def _failures(result: SuiteResult) -> list[str]:
    return [
        f"- {_label(result, w.target)}, {w.title}: {len(w.failures)} repetition(s) failed: "
        f"`{w.failures[0][:300]}`"
        for w in result.workloads
        if w.failures and w.group != "s3-client"
    ]


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's section of the page, headings from level 3 down."""
    lines = _machine(result)
    lines += ["### Object storage / local disk at a glance", "", *_glance(result)]
    for title, path in charts:
        rel = Path(os.path.relpath(path, page_dir)).as_posix()
        lines += [f"![{title}]({rel})", ""]
    lines += ["### What the numbers say", "", *_reading(result)]
    if commit := _commit(result):
        lines += [
            "### The commit point: object storage in a cluster of one on etcd vs alone",
            "",
            *commit,
        ]
    lines += ["### Object-storage requests per GB, and their price", "", *_requests(result)]
    lines += ["### Consumer reads: cache or bucket", "", *_cache(result)]
    lines += ["### Cold reads: consumers behind the cache", "", *_cold(result)]
    lines += ["### S3 clients: obstore vs boto3 vs pyarrow", "", *_clients(result)]
    lines += ["### Method", "", *_method(result)]
    mem = result.memory
    if mem:
        lines += ["| target | peak RSS MB | total CPU s |", "| --- | --- | --- |"]
        lines += [
            f"| {_label(result, t)} | {m.get('peak_rss_mb', 0):,.0f} | "
            f"{m.get('total_cpu_s', 0):,.1f} |"
            for t, m in mem.items()
        ]
        lines.append("")
    notes = [*_failures(result), *(f"- {n}" for n in result.notes)]
    if notes:
        lines += ["### Notes", "", *notes, ""]
    return lines


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Throughput and latency, local disk vs object storage, one PNG each (the cold-read
    target ran none of these workloads: it has no bars)."""
    made: list[tuple[str, Path]] = []
    pair = {t: f for t, f in result.targets.items() if t in (LOCAL, S3)}
    result = dataclasses.replace(result, targets=pair)
    keys = [k for g in ("produce", "consume") for k in _keys(result, g)]
    if keys:
        title = "Local disk vs object storage: throughput"
        path = grouped_bars(
            img_dir / "bench-storage-throughput.png",
            title,
            "MB/s (median, min-max)",
            [_chart_label(result, k) for k in keys],
            _series(result, keys, "mb_s"),
        )
        made.append((title, path))
    for key in _keys(result, "latency"):
        title = f"Produce latency at {result.settings['latency_rate']:,} records/s, acks=all"
        path = grouped_bars(
            img_dir / "bench-storage-latency.png",
            title,
            "ms (lower is better)",
            ["p50", "p99"],
            [_percentiles(result, key, t) for t in result.targets],
        )
        made.append((title, path))
    return made


def _chart_label(result: SuiteResult, key: str) -> str:
    """``Produce`` / ``Consume`` and the partition count: what differs between the bars."""
    title = _title(result, key)
    return f"{title.split(' ', 1)[0]}\n{title.rsplit(', ', 1)[-1]}"


def _percentiles(result: SuiteResult, key: str, target: str) -> Series:
    """One target's p50 and p99 bars of latency workload ``key``."""
    w = result.find(key, target)
    s = w.summary() if w is not None and w.reps else {}
    metrics = ("p50_ms", "p99_ms")
    return Series(
        _label(result, target),
        [s[m]["median"] if s else None for m in metrics],
        [s[m]["min"] if s else None for m in metrics],
        [s[m]["max"] if s else None for m in metrics],
    )
