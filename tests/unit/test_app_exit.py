"""A stopped Floe exits within its grace period, whatever its worker threads do.

Python waits at exit for every non-daemon thread, ``asyncio``'s executor threads
included: one catalog or Spark call that never returns held a stopped ``floe up``
past its supervisor's deadline (CI: "floe up ignored SIGTERM for 30.0 s" after
``floe.stopped``). Each test runs a fresh interpreter, as ``floe up`` is one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

DEADLINE_S = 20.0

STUCK = """
import logging, sys, threading, time
from floe.app import exit_within

logging.basicConfig(level="INFO", stream=sys.stderr)

def read_catalog() -> None:  # a call that never returns
    time.sleep(3600)

threading.Thread(target=read_catalog, name="catalog-read").start()
exit_within(0.5)
print("main done", flush=True)
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )


def test_a_thread_that_never_returns_is_logged_and_abandoned() -> None:
    done = run_python(STUCK)
    assert done.returncode == 0, done.stderr
    assert "main done" in done.stdout
    assert "floe.exit_forced thread=catalog-read" in done.stderr
    assert "read_catalog" in done.stderr  # the stack says where it is stuck


def test_a_clean_exit_is_not_delayed_or_reported() -> None:
    done = run_python(
        STUCK.replace("exit_within(0.5)", "exit_within(60)").replace(
            'threading.Thread(target=read_catalog, name="catalog-read").start()', ""
        )
    )
    assert done.returncode == 0, done.stderr
    assert "floe.exit_forced" not in done.stderr
