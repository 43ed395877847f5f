"""The broker under test: one real ``floe up`` process, and what /proc says about it.

:class:`FloeProcess` owns the child process, its log files and its data directory; it
starts it, kills it with SIGKILL (the final crash), starts it again on the same port
and data, and always reaps it in :meth:`close`. :func:`sample` reads RSS and open file
descriptors (sockets counted apart from files) from ``/proc/<pid>``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ProcSample:
    """One reading of the broker process: memory and descriptors."""

    rss_bytes: int
    peak_rss_bytes: int
    fds: int
    sockets: int

    @property
    def files(self) -> int:
        return self.fds - self.sockets


def sample(pid: int) -> ProcSample:
    """Read ``/proc/<pid>``.

    Raises:
        OSError: the process is gone.
    """
    rss = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    fds = sockets = 0
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        fds += 1
        try:
            if os.readlink(f"{fd_dir}/{name}").startswith("socket:"):
                sockets += 1
        except OSError:
            continue  # closed while we looked
    return ProcSample(rss, peak, fds, sockets)


TCP_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
    "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
    "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}  # fmt: skip


def tcp_sockets(pid: int) -> list[tuple[str, int, int]]:
    """The TCP sockets ``pid`` holds, as ``(state, local port, remote port)``, read from
    ``/proc`` (what ``ss -tanp`` would print for it): the fd-leak oracle names them."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for name in os.listdir(fd_dir):
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[9] in inodes:
                local = int(cols[1].rsplit(":", 1)[1], 16)
                remote = int(cols[2].rsplit(":", 1)[1], 16)
                found.append((TCP_STATES.get(cols[3], cols[3]), local, remote))
    return sorted(found)


class FloeProcess:
    """``floe up`` on 127.0.0.1 with a private data dir, restartable in place."""

    def __init__(self, workdir: Path, settings: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = workdir / "data"
        self.settings = dict(settings or {})
        self.port = free_port()
        self.host = "127.0.0.1"
        self.log_path = workdir / "floe.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def command(self) -> list[str]:
        floe = Path(sys.executable).with_name("floe")
        cmd = [str(floe), "up", "--data-dir", str(self.data_dir), "--host", self.host]
        cmd += ["--kafka-port", str(self.port)]
        cmd += ["--set", f"registry.port={free_port()}", "--set", f"admin.port={free_port()}"]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT_S) -> float:
        """Start and wait until the Kafka port answers; return the seconds it took.

        Raises:
            RuntimeError: the process exited or did not listen within ``timeout``.
        """
        assert not self.alive(), "already running"
        self.starts += 1
        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"\n----- fuzz: start #{self.starts} -----\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"floe up exited with {self.proc.returncode} during start:\n{self.tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"floe up did not listen within {timeout:.0f} s:\n{self.tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL and reap (``kill -9``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, escalating to SIGKILL; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def close(self) -> None:
        self.kill()

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
