"""A run's output: the summary JSON, the replay file and the closing text block.

The JSON is small enough to commit (``bench-results/fuzz.json`` for the long mode):
at most a few frames per finding, their bytes cut to 512 hex digits. The replay file
(``--repro``) holds every kept frame whole, one JSON object per line, for
``python -m fuzz replay``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fuzz.lanes import Finding

SAMPLE_FINDINGS = 30
SAMPLE_FRAMES = 3
SAMPLE_HEX = 512


def write_json(path: Path, summary: dict[str, Any], findings: list[Finding]) -> None:
    samples = [
        {
            "kind": f.kind,
            "detail": f.detail[:2000],
            "frames": [
                {
                    "index": r.index,
                    "frame_seed": r.frame_seed,
                    "label": r.label,
                    "hex": r.hex[:SAMPLE_HEX],
                }
                for r in f.frames[:SAMPLE_FRAMES]
            ],
        }
        for f in findings[:SAMPLE_FINDINGS]
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**summary, "finding_samples": samples}
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def write_repro(path: Path, findings: list[Finding]) -> bool:
    """Write every kept frame; False (and no file) when there is none."""
    if not any(f.frames for f in findings):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for f in findings:
            for r in f.frames:
                out.write(json.dumps({"kind": f.kind, **r.__dict__}) + "\n")
    return True


def print_summary(
    summary: dict[str, Any], findings: list[Finding], failures: int, repro: Path | None
) -> None:
    s = summary
    print()
    print("=" * 72)
    print(
        f"floe fuzz ({s['mode']}, seed {s['seed']}): {s.get('frames', 0):,} frames in "
        f"{s.get('fuzz_seconds', 0)} s = {s.get('frames_per_s', 0):,}/s; "
        f"{s.get('batches', 0):,} batches ({s.get('bombs', 0)} bombs); "
        f"crashes {s.get('crashes', 0)}; peak RSS {s.get('peak_rss_mb', 0)} MiB "
        f"(budget {s.get('rss_budget_mb')}); fds at end {s.get('fds', {}).get('end')}"
    )
    exceptions = s.get("broker_tracebacks", {})
    if exceptions.get("count"):
        print(f"broker exceptions in its log: {exceptions['count']}")
    for finding in findings[:16]:
        print(f"- {finding.kind}: {finding.detail.splitlines()[0][:200]}")
        for r in finding.frames[:3]:
            print(f"    frame #{r.index} (frame seed {r.frame_seed}): {r.label[:160]}")
            print(f"      hex {r.hex[:160]}{'...' if len(r.hex) > 160 else ''}")
    if repro is not None:
        print(f"replay: .venv/bin/python -m fuzz replay {repro}")
    print("PASS" if not failures else f"FAIL ({failures} failures)")
    print("=" * 72, flush=True)
