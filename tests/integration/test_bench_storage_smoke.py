"""``floe bench storage`` end to end at tiny sizes: JSON, Markdown and PNGs appear.

A smoke test of the storage suite, not a benchmark: no timing is asserted. SeaweedFS,
the S3 client comparison, etcd, ``floe up`` on local disk, on object storage and on
object storage in a cluster of one on that etcd (``s3-commit``), 10,000 records per
produce repetition, partition objects every 200 ms so the suite's waits for the
uploader stay short; then the cold reads on a broker of their own with 64 KiB segments.
10,000 records are more than one producer batch (``batch.size`` 1 MB) per partition
even over 8 partitions, so every partition rolls a segment that can leave the cache.
Outputs go to ``tmp_path``, never to docs/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(150)

TINY = [
    "--quick",
    "--storage-records", "10000",
    "--storage-latency-rate", "500",
    "--storage-latency-seconds", "0.4",
    "--storage-client-samples", "8",
    "--storage-set", "storage.s3.upload.interval.ms=200",
    "--storage-cold-segment-bytes", "65536",
]  # fmt: skip
BROKER_KEYS = {
    "produce-1024b-none-acksall-p1",
    "produce-1024b-none-acksall-p8",
    "consume-1024b-none-acksall-p1",
    "consume-1024b-none-acksall-p8",
    "produce-latency-1024b-p1",
    "cold-consume-1024b-none-acksall-p1",
    "cold-consume-1024b-none-acksall-p8",
}


def test_bench_storage_quick_writes_reports(tmp_path: Path) -> None:
    out, img, js = tmp_path / "page" / "benchmarks.md", tmp_path / "page" / "img", tmp_path / "j"
    exe = str(Path(sys.executable).with_name("floe"))
    done = subprocess.run(
        [exe, "bench", "storage", *TINY, "--out", str(out), "--json-dir", str(js),
         "--img-dir", str(img)],
        capture_output=True, text=True, timeout=140, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    data = json.loads((js / "storage.json").read_text())
    assert data["suite"] == "storage"
    assert set(data["targets"]) == {"local", "s3", "s3-commit", "s3-cold"}
    assert {"seaweedfs", "obstore", "boto3", "pyarrow"} <= data["machine"].keys()
    assert data["settings"]["prices"]["put_class_per_1000"] == 0.005

    brokers = [w for w in data["workloads"] if w["group"] != "s3-client"]
    assert {w["key"] for w in brokers} == BROKER_KEYS
    for w in brokers:
        assert not w["failures"], (w["key"], w["target"], w["failures"])
        assert len(w["reps"]) == 1
        rep = w["reps"][0]
        assert ("p99_ms" if w["group"] == "latency" else "mb_s") in rep
        if w["target"] in ("s3", "s3-commit"):
            assert {"puts_per_gb", "gets", "usd_per_gb", "bytes_put_ratio"} <= rep.keys()
            if w["group"] == "consume":
                assert rep["puts"] == 0  # reading writes nothing to the bucket
            else:
                assert rep["ack_path_puts"] >= 1 and rep["bytes_put_ratio"] >= 1
        if w["group"] == "cold-consume":
            # every record read back, the evicted ones from the bucket (only the active
            # segments, of a batch or two per partition, stay in data.dir)
            assert w["target"] == "s3-cold" and w["params"]["records"] == 10_000
            assert rep["records"] == 10_000 and rep["mb_s"] > 0
            assert w["extra"]["cold_share"] > 0, w["extra"]
            assert rep["gets"] >= 1 and rep["bytes_got"] > 0 and rep["puts"] == 0

    clients = {(w["key"], w["target"]): w for w in data["workloads"] if w["group"] == "s3-client"}
    assert len(clients) == 5 * 3
    for (key, target), w in clients.items():
        if key == "s3-client-put-if-none-match" and target == "pyarrow":
            assert not w["reps"] and "not supported" in w["failures"][0]
        else:
            assert not w["failures"], (key, target, w["failures"])
            assert w["reps"][0]["p50_ms"] > 0

    page = out.read_text()
    assert "## Storage: local disk vs object storage" in page
    assert "| s3 / local |" in page and "### S3 clients: obstore vs boto3 vs pyarrow" in page
    assert "$0.005 per 1,000" in page
    assert "### Cold reads: consumers behind the cache" in page
    assert "### The commit point: object storage in a cluster of one on etcd vs alone" in page
    assert re.search(r"\| Produce [^|]*\| MB/s \|[^|]+\|[^|]+\| \d+\.\d\dx \|", page)
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page)
    assert len(images) == 2
    for rel in images:
        assert (out.parent / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
