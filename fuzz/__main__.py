"""Command line: ``python -m fuzz [run] [--short|--long] [options]`` and ``... replay FILE``.

``make fuzz`` runs the long mode (1,000,000 frames, bench-results/fuzz.json); ``make
fuzz-short`` and tests/integration/test_fuzz_short.py run the short one inside ``make
test``. Exit code 0: no failure; 1: at least one (listed, with frames to replay).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from fuzz import replay
from fuzz.run import Run, RunConfig

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench-results"

MODES: dict[str, dict[str, int]] = {
    "short": {"frames": 40_000, "flood": 300, "trickle": 10, "never_read": 4},
    "long": {"frames": 1_000_000, "flood": 2000, "trickle": 50, "never_read": 16},
}


def _settings(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--set wants KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="fuzz a fresh floe up (the default command)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--short",
        dest="mode",
        action="store_const",
        const="short",
        help="40k frames, small flood (the default; inside make test)",
    )
    mode.add_argument(
        "--long",
        dest="mode",
        action="store_const",
        const="long",
        help="1,000,000 frames, 2,000-connection flood (make fuzz)",
    )
    p.set_defaults(mode="short")
    p.add_argument("--frames", type=int, help="mutated frames to send (overrides the mode)")
    p.add_argument("--seed", type=int, help="run seed (default: random, printed)")
    p.add_argument("--rss-budget-mb", type=int, default=1024, help="broker RSS limit")
    p.add_argument(
        "--fd-slack",
        type=int,
        default=320,
        help="files the broker may keep open beyond its baseline at the end",
    )
    p.add_argument("--p99-ms", type=float, default=1000.0, help="sentinel p99 limit")
    p.add_argument("--lanes", type=int, default=6, help="pipelined connections")
    p.add_argument("--window", type=int, default=16, help="frames in flight per connection")
    p.add_argument(
        "--bomb-mib",
        type=int,
        default=2048,
        help="what a compression bomb inflates to (0: no bombs)",
    )
    p.add_argument("--flood", type=int, help="connections in the flood")
    p.add_argument(
        "--no-capture", action="store_true", help="kio seeds only (skip running the real clients)"
    )
    p.add_argument("--json", type=Path, help="summary JSON (default: bench-results/...)")
    p.add_argument("--repro", type=Path, help="frames of the findings, one JSON per line")
    p.add_argument("--workdir", type=Path, help="keep the broker's data and logs here")
    p.add_argument("--keep", action="store_true", help="keep the work dir even on success")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra floe up setting (repeatable)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0] not in ("run", "replay", "-h", "--help"):
        args_list = ["run", *args_list]
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    replay.add_parser(sub)
    args = parser.parse_args(args_list)
    if args.command == "replay":
        return replay.main(args)
    preset = MODES[args.mode]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    name = "fuzz" if args.mode == "long" else "tmp/fuzz-short"
    cfg = RunConfig(
        frames=args.frames or preset["frames"],
        seed=seed,
        mode=args.mode,
        rss_budget_mb=args.rss_budget_mb,
        fd_slack=args.fd_slack,
        lanes=args.lanes,
        window=args.window,
        capture=not args.no_capture,
        flood=args.flood if args.flood is not None else preset["flood"],
        trickle=preset["trickle"],
        never_read=preset["never_read"],
        bomb_mib=args.bomb_mib,
        p99_ms=args.p99_ms,
        json_path=args.json or RESULTS / f"{name}.json",
        repro_path=args.repro or RESULTS / "tmp" / f"{Path(name).name}-repro.jsonl",
        workdir=args.workdir,
        keep=args.keep,
        broker_settings=_settings(args.set),
    )
    return Run(cfg).execute()


if __name__ == "__main__":
    sys.exit(main())
