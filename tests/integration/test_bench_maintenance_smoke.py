"""``floe bench maintenance`` end to end at a tiny size: JSON and Markdown appear.

A smoke test of the maintenance suite, not a benchmark: no timing is asserted. One
``floe up`` with Spark, 6 s of 200 records/s at 1-s commits, maintenance through the
admin API, the fixed query once per engine and phase (about 1.5-2 min, most of it Spark's
start and the maintenance's four procedures). Outputs go to ``tmp_path``, never
to docs/ or bench-results/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(480)
_RUN_TIMEOUT_S = 420  # generous: a busy 2-core machine (other Spark tests) slows it 2-3x

TINY = ["--quick", "--maintenance-seconds", "6", "--maintenance-query-reps", "1"]


def test_bench_maintenance_quick_writes_reports(tmp_path: Path) -> None:
    out, img, js = tmp_path / "page" / "benchmarks.md", tmp_path / "page" / "img", tmp_path / "j"
    exe = str(Path(sys.executable).with_name("floe"))
    # its own session: on a timeout the whole tree goes (floe up and its Spark JVM too)
    proc = subprocess.Popen(
        [exe, "bench", "maintenance", *TINY, "--out", str(out), "--json-dir", str(js),
         "--img-dir", str(img)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"floe bench maintenance ran over {_RUN_TIMEOUT_S} s: {stderr[-3000:]}")
    assert proc.returncode == 0, stderr[-3000:]

    data = json.loads((js / "maintenance.json").read_text())
    assert data["suite"] == "maintenance"
    work = {w["key"]: w for w in data["workloads"]}
    assert all(not w["failures"] for w in work.values())
    produce = work["produce"]["reps"][0]
    assert produce["records"] == 1200 and produce["commits"] >= 2

    before, after = work["table-before"]["reps"][0], work["table-after"]["reps"][0]
    for facts in (before, after):
        assert {"snapshots", "data_files", "delete_files", "manifests", "data_mb"} <= facts.keys()
        assert facts["rows"] == 1200
    assert before["data_files"] > after["data_files"] >= 1  # compacted
    assert before["snapshots"] >= produce["commits"]
    for engine in ("spark", "duckdb"):
        for phase in ("before", "after"):
            assert len(work[f"query-{engine}-{phase}"]["reps"]) == 1
    maintained = work["maintain"]["reps"][0]
    assert maintained["seconds"] > 0 and maintained["expired_snapshots"] >= 1

    checks = work["correctness"]["reps"][0]
    for key in ("spark_same_rows", "duckdb_same_rows", "engines_agree", "row_counts_ok"):
        assert checks[key] == 1.0, (key, checks)
    ratios = data["figures"]["after_over_before"]
    assert {"snapshots", "data_files", "manifests", "query_spark_s", "query_duckdb_s"} <= set(
        ratios
    )
    assert ratios["data_files"] < 1 and ratios["rows"] == 1

    page = out.read_text()
    assert "## Table maintenance: a table committed every second, before and after" in page
    assert "### Before and after" in page and "**identical**" in page
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert len(images) == 1
    assert (out.parent / images[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
