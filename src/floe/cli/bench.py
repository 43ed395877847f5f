"""``floe bench [broker|security|table|storage|cluster|maintenance|all] [--quick] ...``: run the
benchmark harness.

The harness is the top-level ``benchmarks`` package of the source repository, which
is not installed with Floe (it drives Floe from outside, as a user would, and pulls in
benchmark-only tools such as matplotlib and a downloaded Tansu binary). So this command
only works from a source checkout: it looks for ``benchmarks/`` next to the ``src/``
this package was installed from (an editable install), then in the current directory.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import floe


def add_parser(sub: Any) -> None:
    """Register ``floe bench`` for ``floe --help``; ``main`` parses its arguments."""
    p = sub.add_parser(
        "bench",
        help="run the benchmarks (source checkout only): "
        "floe bench broker|security|table|storage|cluster|maintenance|all [--quick]",
        add_help=False,
    )
    p.add_argument("args", nargs=argparse.REMAINDER)


def find_checkout() -> Path | None:
    """The repository root holding ``benchmarks/``, or None outside a source checkout."""
    installed_from = Path(floe.__file__).resolve().parents[2]  # <repo>/src/floe/__init__.py
    for root in (installed_from, Path.cwd()):
        if (root / "benchmarks" / "__main__.py").is_file():
            return root
    return None


def main(argv: Sequence[str]) -> int:
    """Run ``python -m benchmarks`` with ``argv``; return its exit code."""
    root = find_checkout()
    if root is None:
        print(
            "floe bench: error: needs a Floe source checkout (benchmarks/ is not installed); "
            "run it from the repository root",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(root))
    harness = importlib.import_module("benchmarks.__main__")
    code: int = harness.main(list(argv), prog="floe bench")
    return code
