"""``floe bench table`` end to end at tiny sizes: JSON, Markdown and PNGs appear.

A smoke test of the table suite, not a benchmark: no timing is asserted. One ``floe up``
with Spark, 2,000 records per target, one freshness interval of 1 s for 3 s. Outputs go
to ``tmp_path``, never to docs/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

TINY = [
    "--quick",
    "--table-records", "2000",
    "--table-etl-batch", "500",
    "--table-fresh-rate", "500",
    "--table-fresh-intervals", "1",
    "--table-fresh-seconds", "3",
]  # fmt: skip


def test_bench_table_quick_writes_reports(tmp_path: Path) -> None:
    out, img, js = tmp_path / "page" / "benchmarks.md", tmp_path / "page" / "img", tmp_path / "j"
    exe = str(Path(sys.executable).with_name("floe"))
    done = subprocess.run(
        [exe, "bench", "table", *TINY, "--out", str(out), "--json-dir", str(js),
         "--img-dir", str(img)],
        capture_output=True, text=True, timeout=220, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    data = json.loads((js / "table.json").read_text())
    assert data["suite"] == "table"
    assert {"machine", "settings", "command", "targets", "memory", "workloads"} <= data.keys()
    assert set(data["targets"]) == {"floe", "etl", "floor"}
    assert data["memory"]["floe"]["cold_start_s"] > 0
    assert data["memory"]["convert"]["records_s_one_core"] > 0

    for key in ("ingest", "ingest-json", "ingest-string"):  # Avro, JSON Schema, string
        ingest = {w["target"]: w for w in data["workloads"] if w["key"] == key}
        assert set(ingest) == {"floe", "etl", "floor"}, key
        for target, w in ingest.items():
            assert not w["failures"], (key, target, w["failures"])
            assert len(w["reps"]) == 1
            rep = w["reps"][0]
            assert rep["records"] == 2000
            assert {"records_s", "mb_s", "cpu_s_per_gb", "files", "file_mb_mean"} <= rep.keys()
            assert "records_s" in w["summary"]
    ingest = {w["target"]: w for w in data["workloads"] if w["key"] == "ingest"}
    assert {"spark_peak_rss_mb", "round_s_max", "enable_to_visible_s"} <= ingest["floe"]["reps"][
        0
    ].keys()
    assert ingest["etl"]["reps"][0]["commits"] == 4  # 2,000 records in batches of 500

    fresh = [w for w in data["workloads"] if w["group"] == "freshness"]
    assert [w["key"] for w in fresh] == ["freshness-1s"]
    assert not fresh[0]["failures"], fresh[0]["failures"]
    rep = fresh[0]["reps"][0]
    assert {"p50_s", "p99_s", "max_s", "commit_p99_s", "rounds"} <= rep.keys()
    assert rep["records"] == 1500
    assert rep["duckdb_checked"] > 0 and rep["duckdb_mismatches"] == 0

    assert [p["workload"] for p in data["profiles"]] == ["convert-avro-flatten"]
    assert data["profiles"][0]["top_self"]

    page = out.read_text()
    assert "## Table topics: Floe vs a Python ETL vs the Parquet floor" in page
    assert "Floe / ETL:" in page and "### Freshness" in page and "### What limits it" in page
    assert "### By value format" in page and "JSON text (`string`)" in page
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert len(images) == 2
    for rel in images:
        assert (out.parent / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
