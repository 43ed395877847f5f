"""Markdown section and chart of the ``maintenance`` suite (a table committed every second,
before and after maintenance).

Pure functions of a ``SuiteResult`` (as read back from ``bench-results/maintenance.json``):
the page can be rebuilt without rerunning anything.
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.charts import Series, grouped_bars
from benchmarks.harness import SuiteResult, Workload

_ROWS = (
    ("snapshots", "snapshots", 0),
    ("data_files", "data files (current snapshot)", 0),
    ("delete_files", "delete files (current snapshot)", 0),
    ("manifests", "manifests (current snapshot)", 0),
    ("data_mb", "data MB (current snapshot)", 1),
    ("rows", "rows (current snapshot)", 0),
    ("dir_files", "files in the table's directory (data + metadata)", 0),
    ("metadata_files", "of which metadata files", 0),
    ("dir_mb", "MB in the table's directory", 1),
)
_ENGINES = (("spark", "Spark SQL (admin API)"), ("duckdb", "DuckDB `iceberg_scan`"))


def _one(result: SuiteResult, key: str) -> dict[str, float]:
    w = result.find(key, "floe")
    return w.reps[0] if w is not None and w.reps else {}


def _times(w: Workload | None) -> str:
    """``median (min-max)`` seconds of the query runs."""
    if w is None or not w.reps:
        return "-"
    s = w.summary()["seconds"]
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def _ratio(value: float | None) -> str:
    """after / before, bold when maintenance lowered it; tiny ratios as a fraction too."""
    if value is None:
        return "-"
    if 0 < value < 0.01:
        return f"**{value:.2g}x** (1/{1 / value:,.0f})"
    return f"**{value:.3f}x**" if value < 1 else f"{value:.3f}x"


def _machine(result: SuiteResult) -> list[str]:
    lines = ["### Machine and versions", "", "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in result.machine.items()]
    lines += [f"| {t['label']} | {t['version']} |" for t in result.targets.values()]
    lines += [f"| duration | {result.duration_s / 60:.1f} min |", ""]
    lines += [f"Command: `{result.command}` (started {result.started}).", ""]
    return lines


def _run(result: SuiteResult) -> list[str]:
    s = result.settings
    p = _one(result, "produce")
    if not p:
        return ["The run did not complete: no figures.", ""]
    hour = "" if s["seconds"] >= 3600 else (
        f" **This run wrote for {s['seconds']:.0f} s ({s['seconds'] / 60:.1f} min), not the "
        "hour of the default run** (`floe bench maintenance`, `--maintenance-seconds "
        "3600`): fewer commits, so fewer files and snapshots before maintenance, and "
        "smaller ratios."
    )  # fmt: skip
    return [
        f"One table topic written at {s['rate']:,} records/s over {s['partitions']} "
        f"partitions for {p['seconds']:.0f} s ({p['seconds'] / 60:.1f} min), a commit round "
        f"every second: **{p['commits']:,.0f} commits**, {p['records']:,.0f} records "
        f"(Avro clickstream, `by_schema_id` + `flatten`).{hour}",
        "",
        f"Rounds took {p.get('round_s_median', 0):.2f} s (median); "
        f"{p.get('round_s_first_tenth', 0):.2f} s in the first tenth of the run and "
        f"{p.get('round_s_last_tenth', 0):.2f} s in the last (max "
        f"{p.get('round_s_max', 0):.2f} s): each commit writes a new metadata file listing "
        "every snapshot so far. The last commit landed "
        f"{p.get('catch_up_s', 0):.1f} s after the last record was acknowledged.",
        "",
        f"Load on the machine (2 cores, shared with other engineers' Spark tests): 1-min "
        f"loadavg {p.get('loadavg_1m_mean', 0):.2f} on average while writing (max "
        f"{p.get('loadavg_1m_max', 0):.2f}); at start "
        f"{result.machine.get('loadavg_at_start', '-')}, after "
        f"{result.machine.get('loadavg_after_workloads', '-')}. Absolute times move with "
        "that load: **trust the ratios**, measured minutes apart in the same run.",
        "",
    ]


def _glance(result: SuiteResult) -> list[str]:
    before, after = _one(result, "table-before"), _one(result, "table-after")
    ratios = result.figures.get("after_over_before", {})
    lines = [
        "### Before and after",
        "",
        "| measure | before | after | after / before |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label, digits in _ROWS:
        if key in before and key in after:
            lines.append(
                f"| {label} | {before[key]:,.{digits}f} | {after[key]:,.{digits}f} | "
                f"{_ratio(ratios.get(key))} |"
            )
    n = result.settings.get("query_reps", 1)
    for engine, label in _ENGINES:
        b = result.find(f"query-{engine}-before", "floe")
        a = result.find(f"query-{engine}-after", "floe")
        lines.append(
            f"| fixed query, {label}, s (median of {n}, min-max) | {_times(b)} | {_times(a)} | "
            f"{_ratio(ratios.get(f'query_{engine}_s'))} |"
        )
    lines.append("")
    m = _one(result, "maintain")
    if m:
        lines += [
            f"**Maintenance** (`POST /api/v1/tables/<topic>/maintenance`, as `floe table "
            f"maintain --now`) took **{m['seconds']:.1f} s**: compacted "
            f"{m.get('rewritten_files', 0):,.0f} files into {m.get('added_files', 0):,.0f}, "
            f"expired {m.get('expired_snapshots', 0):,.0f} snapshots "
            f"({m.get('deleted_files', 0):,.0f} files deleted), removed "
            f"{m.get('orphan_files', 0):,.0f} orphan files, rewrote "
            f"{m.get('rewritten_manifests', 0):,.0f} manifests into "
            f"{m.get('added_manifests', 0):,.0f}.",
            "",
        ]
    c = _one(result, "correctness")
    if c:
        ok = all(c.get(k) == 1.0 for k in ("spark_same_rows", "duckdb_same_rows",
                                            "engines_agree", "row_counts_ok"))  # fmt: skip
        verdict = "**identical**" if ok else "**NOT identical (see the JSON)**"
        lines += [
            f"Correctness: the fixed query's rows before and after are {verdict} "
            "(each engine against itself and Spark against DuckDB); `count(*)` is "
            f"{c.get('rows_spark_before', 0):,.0f} / {c.get('rows_spark_after', 0):,.0f} in "
            f"Spark and {c.get('rows_duckdb_before', 0):,.0f} / "
            f"{c.get('rows_duckdb_after', 0):,.0f} in DuckDB (before / after) for "
            f"{c.get('records_produced', 0):,.0f} records produced.",
            "",
        ]
    return lines


def _reading(result: SuiteResult) -> list[str]:
    """What the figures say, each statement computed from them."""
    before, after = _one(result, "table-before"), _one(result, "table-after")
    ratios = result.figures.get("after_over_before", {})
    if not before or not after or "query_spark_s" not in ratios:
        return []
    lines = ["### What the numbers say", ""]
    if before["data_files"]:
        kb = before["data_mb"] * 1000 / before["data_files"]
        lines.append(
            f"- **Queries**: {1 / ratios['query_spark_s']:.0f}x faster in Spark and "
            f"{1 / ratios['query_duckdb_s']:.0f}x in DuckDB after maintenance. The table "
            f"had {before['manifests']:,.0f} manifests before (Iceberg merges an append's "
            f"small manifests at commit time), so what the query paid for was "
            f"{before['data_files']:,.0f} data files of {kb:,.0f} KB on average (one per "
            f"partition and commit) and a metadata file listing "
            f"{before['snapshots']:,.0f} snapshots; after, {after['data_files']:,.0f} "
            f"file(s) and {after['snapshots']:,.0f} snapshots."
        )
    if ratios.get("data_mb"):
        lines.append(
            f"- **Data**: the same {after['rows']:,.0f} rows in {ratios['data_mb']:.2f}x the "
            "bytes: one large Parquet file encodes and compresses better than many small ones."
        )
    meta_mb = after["dir_mb"] - after["data_mb"]
    lines += [
        f"- **What stays on disk**: {after['metadata_files']:,.0f} metadata files "
        f"({meta_mb:,.0f} MB) remain under the table's `metadata/` after maintenance, so "
        f"the directory keeps {ratios.get('dir_mb', 0):.2f}x of its size: mostly the old "
        "metadata JSON versions, one per commit, each listing every snapshot of its time. "
        "Expiry does not delete them, and the orphan step spares files younger than its "
        "window (`maintenance.orphan.age.ms`, at least 24 h); Iceberg deletes them at "
        "commit time with `write.metadata.delete-after-commit.enabled`, which Floe sets "
        "since `table.topic.metadata.versions.kept` (default 100) exists: a run from before "
        "that key shows thousands here, a run after it about 100.",
        "",
    ]
    return lines


def _method(result: SuiteResult) -> list[str]:
    s = result.settings
    config = ", ".join(f"`{k}={v}`" for k, v in s.get("topic_config", {}).items())
    return [
        "### Method",
        "",
        "- One `floe up` (registry, Spark `local[2]` with a 1 GiB driver, the embedded "
        "JDBC-on-SQLite catalog, local warehouse) on 127.0.0.1. A pool of "
        "clickstream records serialized once with a fixed seed (confluent-kafka's "
        "`AvroSerializer` against Floe's registry for the first, fastavro after), produced "
        "by a separate process at a fixed rate (record i sent at i/rate, acks=all), "
        "round-robin over the partitions, cycling through the pool.",
        f"- The topic: {config}. Scheduled maintenance is off; expiry may drop every "
        "snapshot but the newest. The suite waits until the table's committed offsets reach "
        "the log end, so no round runs during the measurements.",
        "- Table facts: pyiceberg on the current snapshot (`inspect.files()`, "
        "`inspect.manifests()`, the metadata's snapshot list), and every file under the "
        "table's location on disk. Metadata JSON files of old versions stay on disk "
        "(Iceberg's `write.metadata.delete-after-commit.enabled` is off).",
        f"- The fixed query, run {s.get('query_reps', 1)} times per engine and phase, "
        "engines alternating (which one goes first changes every run): "
        f"`{s.get('query', '').format(table='<table>')}`. Spark: `POST /api/v1/sql` on the "
        "broker's Spark session (wall time of the HTTP call); DuckDB 1.5 in the suite's "
        "process, `iceberg_scan` on the table's current metadata file, its extensions "
        "loaded from their wheels.",
        "- Maintenance: one run through the admin API, timed by the client; its counts "
        "are Iceberg's procedure results as the broker reports them.",
        "",
    ]


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The section: machine, the run, before/after table, chart, method, notes."""
    lines = _machine(result) + _run(result) + _glance(result) + _reading(result)
    for title, path in charts:
        lines += [f"![{title}]({os.path.relpath(path, page_dir)})", ""]
    lines += _method(result)
    if result.notes:
        lines += ["### Notes", ""] + [f"- {n}" for n in result.notes] + [""]
    return lines


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """The fixed query's time per engine, before and after; none without figures."""
    series = []
    for phase in ("before", "after"):
        found = [result.find(f"query-{engine}-{phase}", "floe") for engine, _ in _ENGINES]
        stats = [w.summary()["seconds"] if w is not None and w.reps else None for w in found]
        series.append(
            Series(
                f"{phase} maintenance",
                [None if s is None else s["median"] for s in stats],
                [None if s is None else s["min"] for s in stats],
                [None if s is None else s["max"] for s in stats],
            )
        )
    if all(m is None for s in series for m in s.medians):
        return []
    title = "Fixed query, table committed every second: before/after maintenance"
    path = grouped_bars(
        img_dir / "bench-maintenance-query.png", title, "seconds (median, min-max)",
        [label.replace("`", "") for _, label in _ENGINES], series,
    )  # fmt: skip
    return [(title, path)]
