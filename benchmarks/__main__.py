"""Command line: ``python -m benchmarks {broker,table,...,all} [--quick] [options]``.

``all`` runs every suite but those in ``harness.NOT_IN_ALL`` (the hour-long
``maintenance`` suite runs on its own).

``floe bench`` (src/floe/cli/bench.py) calls ``main`` with the same arguments.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks import report
from benchmarks.harness import NOT_IN_ALL, REPO, SUITES, SuiteUnavailableError, load_suite, progress


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Run Floe's benchmarks and rebuild docs/benchmarks.md."
    )
    parser.add_argument("suite", choices=[*SUITES, "all"], help="which suite to run")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny sizes, 1 rep")
    parser.add_argument("--reps", type=int, help="repetitions per workload (default 3)")
    parser.add_argument("--seed", type=int, default=20240601, help="payload seed")
    # Defaults are inside the repository, wherever the command is started from.
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--json-dir", type=Path, default=REPO / "bench-results")
    parser.add_argument("--img-dir", type=Path, default=REPO / "docs" / "img")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="also profile Floe with py-spy into DIR"
    )
    for name in SUITES:
        try:
            load_suite(name).add_arguments(parser)
        except SuiteUnavailableError:
            continue
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks") -> int:
    """Run the chosen suite(s), write their JSON and rebuild the page; return exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(args_list)
    names = [n for n in SUITES if n not in NOT_IN_ALL] if args.suite == "all" else [args.suite]
    command = shlex.join([*prog.split(), *args_list])
    ran = 0
    for name in names:
        try:
            module = load_suite(name)
        except SuiteUnavailableError as exc:
            if args.suite != "all":
                print(f"{prog}: error: {exc}", file=sys.stderr)
                return 2
            progress(f"skipping {name}: {exc}")
            continue
        t0 = time.monotonic()
        try:
            result = module.run(args, command)
        except (ValueError, RuntimeError, TimeoutError) as exc:
            print(f"{prog}: error: {name}: {exc}", file=sys.stderr)
            return 1
        path = report.write_json(result, args.json_dir)
        progress(f"{name} done in {time.monotonic() - t0:.0f} s; wrote {path}")
        ran += 1
    if ran:
        report.write_page(args.out, args.json_dir, args.img_dir)
        progress(f"wrote {args.out} (charts in {args.img_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
