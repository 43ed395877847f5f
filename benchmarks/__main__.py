"""Command line: ``python -m benchmarks broker [--quick] [--out MD] [--json JSON]``."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import report
from benchmarks.broker import Settings, progress, run_suite


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="suite", required=True)
    broker = sub.add_parser("broker", help="produce/consume throughput, latency, RSS, CPU")
    broker.add_argument("--quick", action="store_true", help="smoke test: tiny sizes, 1 rep")
    broker.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    broker.add_argument("--json", type=Path, default=Path("bench-results/broker.json"))
    broker.add_argument("--records", type=int, help="records per produce rep (1 KiB each)")
    broker.add_argument("--reps", type=int, help="repetitions per workload (default 3)")
    broker.add_argument("--seed", type=int, default=20240601)
    broker.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config passed to floe up (repeatable)",
    )
    broker.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="also run py-spy against the broker (extra runs) and write profiles to DIR",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen suite and write its reports; return the exit code."""
    args = _parser().parse_args(argv)
    quick = bool(args.quick)
    settings = Settings(
        records=args.records or (20_000 if quick else 500_000),
        reps=args.reps or (1 if quick else 3),
        latency_rate=5_000,
        latency_seconds=1.0 if quick else 10.0,
        seed=args.seed,
        broker_sets=tuple(args.set),
        profile_dir=args.profile,
        quick=quick,
    )
    if settings.records < 1 or settings.reps < 1:
        print("records and reps must be positive", file=sys.stderr)
        return 2
    shown = ["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)]
    try:
        result = run_suite(settings, shlex.join(shown))
    except (RuntimeError, TimeoutError) as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        return 1
    report.write(result, args.out, args.json)
    progress(f"wrote {args.out} and {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
