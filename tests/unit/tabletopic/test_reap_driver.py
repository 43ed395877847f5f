"""A Spark driver left running by a killed broker is killed before table topics start;
any other process whose pid happens to be in the pid file is left alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from floe.tabletopic.spark.session import DRIVER_PID_FILE, reap_previous_driver

SLEEPER = "import time, sys; time.sleep(60)"


def spawn(*args: str) -> subprocess.Popen[bytes]:
    """A sleeping child, returned once it has exec'ed (its command line is final)."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, *args])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    while SLEEPER.encode() not in cmdline.read_bytes():
        time.sleep(0.01)
    return proc


def test_the_previous_driver_of_this_data_dir_is_killed(tmp_path: Path) -> None:
    work = tmp_path / "spark"
    work.mkdir()
    orphan = spawn(f"-Dlog4j.configurationFile={work}/log4j2.properties")
    try:
        (work / DRIVER_PID_FILE).write_text(f"{orphan.pid}\n")
        assert reap_previous_driver(work) == orphan.pid
        assert orphan.wait(5) == -9
    finally:
        orphan.kill()
        orphan.wait()


def test_a_reused_pid_is_left_alone(tmp_path: Path) -> None:
    work = tmp_path / "spark"
    work.mkdir()
    other = spawn("--unrelated")
    try:
        (work / DRIVER_PID_FILE).write_text(f"{other.pid}\n")
        assert reap_previous_driver(work) is None
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
    assert reap_previous_driver(tmp_path / "nothing-here") is None
