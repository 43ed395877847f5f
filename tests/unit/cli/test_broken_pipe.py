"""A reader that stops reading ends a ``floe`` command quietly, as any Unix tool
(``floe config --docs | head``): no traceback, no error line, exit 141."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "args",
    [
        ["config", "--docs"],  # printed by main itself
        ["completion", "bash"],  # printed by a command
    ],
)
def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path, args: list[str]) -> None:
    floe = str(Path(sys.executable).with_name("floe"))
    proc = subprocess.Popen(
        [floe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert (proc.wait(60), err) == (141, "")
