"""A broker that waits for the writer lease loads ahead everything the writer's start
imports (``floe.serving.load_writer_modules``): on a loaded machine those imports
(FastAPI, the console, the registry's API) cost most of a second of every failover,
between the lease and the Kafka port.

The test starts a writer in a fresh interpreter after the preload and lists what the
start imported still: nothing of Floe's or of its web stack may be left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from floe.testing.ports import free_ports

STACK = ("floe", "fastapi", "starlette", "uvicorn", "jinja2", "pydantic", "anyio")
"""Packages whose modules the writer's start must find loaded."""

START_AFTER_PRELOAD = """
import asyncio, json, sys
from floe.app import serve
from floe.config.loader import load_config
from floe import serving

config = load_config(sys.argv[1], json.loads(sys.argv[2]), {})
serving.load_writer_modules()
before = set(sys.modules)
imported = []

async def main() -> None:
    stop = asyncio.Event()
    announce = serving.Writer.announce

    def started(self) -> None:
        imported.extend(sorted(set(sys.modules) - before))
        announce(self)
        stop.set()

    serving.Writer.announce = started
    await serve(config, stop)

asyncio.run(main())
print(json.dumps(imported))
"""


def test_a_writer_started_after_the_preload_imports_nothing_of_its_stack(
    tmp_path: Path,
) -> None:
    kafka, registry, admin = free_ports(3)
    toml = tmp_path / "floe.toml"
    toml.touch()
    overrides = {
        "data.dir": str(tmp_path / "data"),
        "host": "127.0.0.1",
        "kafka.port": kafka,
        "registry.port": registry,
        "admin.port": admin,
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(START_AFTER_PRELOAD), str(toml),
         json.dumps(overrides)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    late = [m for m in imported if m.split(".")[0] in STACK]
    assert late == [], f"the writer's start imported, after the preload: {late}"
